/**
 * Which store the adapter gets, decided in one place: AGW_DB is a file path (SQLite, one
 * adapter). The composition root (cli/adapter.ts) calls this; nothing else names a store class.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { SqliteStore, type SqliteStoreOptions } from './sqlite-store.js';
import type { Store } from './store.js';

export function openStore(db: string, opts: SqliteStoreOptions = {}): Store {
  if (/^postgres(ql)?:\/\//.test(db)) {
    throw new Error('AGW_DB: a PostgreSQL store is not part of this version; give a file path');
  }
  mkdirSync(dirname(db), { recursive: true });
  return new SqliteStore(db, opts);
}
