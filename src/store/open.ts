/**
 * Which store the adapter gets, decided in one place: AGW_DB is a file path (SQLite, one
 * adapter) or a postgres:// URL (PostgreSQL, any number of adapters). The composition root
 * (cli/adapter.ts) calls this; nothing else names a store class.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { SqliteStore, type SqliteStoreOptions } from './sqlite/sqlite-store.js';
import type { Store } from './store.js';

/** A postgres:// or postgresql:// URL: the PostgreSQL store. */
export function isPostgresUrl(db: string): boolean {
  return /^postgres(ql)?:\/\//.test(db);
}

/** AGW_DB as logs may show it: a URL's password left out. */
export function shownDb(db: string): string {
  if (!isPostgresUrl(db)) return db;
  try {
    const u = new URL(db);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return 'postgres://(unparsable URL)';
  }
}

export async function openStore(db: string, opts: SqliteStoreOptions = {}): Promise<Store> {
  if (isPostgresUrl(db)) {
    // loaded only when asked for: a SQLite adapter never loads the driver
    const { openPgStore } = await import('./postgres/pg-store.js');
    return openPgStore(db, opts);
  }
  mkdirSync(dirname(db), { recursive: true });
  return new SqliteStore(db, opts);
}
