/**
 * Opening a SQLite file, for the adapter's store and the sidecar's outbox alike: WAL, the
 * synchronous mode set and read back, a busy timeout, and the numbered migrations.
 */
import Database from 'better-sqlite3';

/**
 * - `full`: the WAL is fsynced at every commit that holds a message, so an acknowledged message
 *   survives power loss. With group commit that is one fsync per group, not per message. Commits
 *   holding only leases, acks and other delivery marks are NORMAL (docs/design/durability.md).
 * - `normal`: the WAL is fsynced only at checkpoints. A process crash (SIGKILL, OOM) still loses
 *   nothing, since committed pages are in the OS page cache; a power loss or kernel crash can
 *   lose the transactions committed since the last checkpoint (up to ~1000 pages of WAL by
 *   default), i.e. messages that were already acknowledged.
 */
export type SyncMode = 'full' | 'normal';

const SYNC_LEVEL: Record<SyncMode, number> = { normal: 1, full: 2 };

export interface OpenOptions {
  readonly sync: SyncMode;
  /** Migration N brings the schema from version N-1 to N (PRAGMA user_version). */
  readonly migrations: readonly string[];
  /** Who opens it, for the "newer than this program" error: "adapter", "sidecar". */
  readonly program: string;
}

export function openSqlite(file: string, opts: OpenOptions): Database.Database {
  const db = new Database(file);
  try {
    db.pragma('journal_mode = WAL');
    // Set on every open and read back: better-sqlite3 connections start at the compiled-in
    // default, so a mode set once on another connection does not carry over.
    db.pragma(`synchronous = ${opts.sync.toUpperCase()}`);
    const level = db.pragma('synchronous', { simple: true });
    if (level !== SYNC_LEVEL[opts.sync])
      throw new Error(`synchronous=${opts.sync} did not take (got ${level})`);
    // Another connection (the quick_check worker, an operator's sqlite3) may hold a lock for a
    // moment; wait for it rather than fail a commit.
    db.pragma('busy_timeout = 5000');
    migrate(db, opts);
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

/** The synchronous mode a connection really has, read back from SQLite. */
export function synchronousOf(db: Database.Database): SyncMode | number {
  const level = db.pragma('synchronous', { simple: true }) as number;
  return level === 2 ? 'full' : level === 1 ? 'normal' : level;
}

/** Never edit a migration that has shipped: add the next one. */
function migrate(db: Database.Database, { migrations, program }: OpenOptions): void {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > migrations.length) {
    throw new Error(
      `database schema version ${current} is newer than this ${program} knows (${migrations.length}); use a newer ${program}`,
    );
  }
  for (let v = current; v < migrations.length; v++) {
    db.transaction(() => {
      db.exec(withoutPresentColumns(db, migrations[v]!));
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
}

const ADD_COLUMN = /ALTER TABLE (\w+) ADD COLUMN (\w+)[^;]*;/g;

/**
 * A migration without the `ALTER TABLE t ADD COLUMN c` of columns `t` already has: SQLite has
 * no ADD COLUMN IF NOT EXISTS, and a migration run again over a schema that holds part of it
 * (a file whose version was set back by hand) must go through, as its CREATE ... IF NOT EXISTS do.
 */
function withoutPresentColumns(db: Database.Database, sql: string): string {
  return sql.replace(ADD_COLUMN, (statement, table: string, column: string) => {
    const columns = db.prepare<[], { name: string }>(`PRAGMA table_info(${table})`).all();
    return columns.some((c) => c.name === column) ? '' : statement;
  });
}
