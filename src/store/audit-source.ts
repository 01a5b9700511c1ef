/**
 * The audit log of a store, opened for reading alone, for `agent-gateway audit verify`
 * (cli/audit.ts): a SQLite file read-only (an adapter may be running on it: WAL readers do not
 * block it), or a PostgreSQL database over one connection that reads and writes nothing else.
 * Neither migrates, creates or locks anything, so the check can run against a live store. The
 * statements are the engines' own (sqlite/sql.ts, postgres/pg-sql.ts). A store at a schema
 * version that keeps the audit log's anchor is read with it (rules/audit-chain.ts), its row
 * gone or not; an older one without.
 */
import { statSync } from 'node:fs';
import { isPostgresUrl, shownDb } from './open.js';
import {
  type AnchorRead,
  type AuditAnchorRow,
  type AuditPages,
  anchorView,
} from './rules/audit-chain.js';
import { type AuditRow, auditView } from './rules/operators.js';

/** The store cannot be read as an adapter's (no such file, no database, no audit log). */
export class AuditSourceError extends Error {
  override name = 'AuditSourceError';
}

export interface AuditSource {
  /** Pages of entries, oldest first (rules/audit-chain.ts AuditPages). */
  readonly read: AuditPages;
  /**
   * The anchor (VerifyOptions.anchor), when the store is at a schema version that keeps one
   * (resolving undefined when its row or its table is gone); undefined for an older store.
   */
  readonly anchor: AnchorRead | undefined;
  close(): Promise<void>;
}

/** A connection that does not answer within this, ms, is an unreachable database. */
const CONNECT_TIMEOUT_MS = 10_000;

/** `db` as AGW_DB names it: a file path or a postgres:// URL. */
export async function openAuditSource(db: string): Promise<AuditSource> {
  return isPostgresUrl(db) ? openPg(db) : openSqliteFile(db);
}

async function openSqliteFile(file: string): Promise<AuditSource> {
  try {
    if (!statSync(file).isFile()) throw new AuditSourceError(`${file} is not a file`);
  } catch (err) {
    if (err instanceof AuditSourceError) throw err;
    throw new AuditSourceError(`no such file: ${file}`);
  }
  const { default: Database } = await import('better-sqlite3');
  const { AUDIT_ANCHOR_VERSION, SQL } = await import('./sqlite/sql.js');
  let db: InstanceType<typeof Database>;
  try {
    db = new Database(file, { readonly: true, fileMustExist: true });
  } catch (err) {
    throw new AuditSourceError(`cannot open ${file} as SQLite: ${(err as Error).message}`);
  }
  try {
    db.pragma('busy_timeout = 5000');
    const table = db
      .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_log'")
      .get();
    if (table === undefined)
      throw new AuditSourceError(`${file} has no audit log: it is not an adapter's store`);
    const page = db.prepare<[number, number], AuditRow>(SQL.audit);
    const version = db.pragma('user_version', { simple: true }) as number;
    const kept =
      db
        .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_anchor'")
        .get() !== undefined;
    const row = kept ? db.prepare<[], AuditAnchorRow>(SQL.auditAnchor) : undefined;
    return {
      read: async (after, limit) => page.all(after, limit).map(auditView),
      anchor:
        version < AUDIT_ANCHOR_VERSION
          ? undefined
          : async () => {
              const r = row?.get();
              return r === undefined ? undefined : anchorView(r);
            },
      close: async () => {
        db.close();
      },
    };
  } catch (err) {
    db.close();
    if (err instanceof AuditSourceError) throw err;
    throw new AuditSourceError(
      `cannot read ${file} as an adapter's store: ${(err as Error).message}`,
    );
  }
}

async function openPg(url: string): Promise<AuditSource> {
  const { default: pg } = await import('pg');
  const { PG_AUDIT_ANCHOR_VERSION, PG_SQL } = await import('./postgres/pg-sql.js');
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
  c.on('error', () => undefined); // a connection lost between reads fails the next read
  let version = 0;
  let kept = false;
  try {
    await c.connect();
    // read-only whatever the statements: a verification never writes
    await c.query('SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY');
    const r = await c.query<{ t: string | null }>("SELECT to_regclass('audit_log') AS t");
    if (r.rows[0]?.t === null || r.rows[0]?.t === undefined)
      throw new AuditSourceError(`${shownDb(url)} has no audit log: it is not an adapter's store`);
    // the schema version says whether the anchor is kept; its table, whether it is still there
    const t = await c.query<{ schema: string | null; anchor: string | null }>(
      "SELECT to_regclass('agw_schema')::text AS schema, to_regclass('audit_anchor')::text AS anchor",
    );
    kept = (t.rows[0]?.anchor ?? null) !== null;
    if ((t.rows[0]?.schema ?? null) !== null) {
      const v = await c.query<{ version: number | null }>(PG_SQL.schemaVersion);
      version = v.rows[0]?.version ?? 0;
    }
  } catch (err) {
    await c.end().catch(() => undefined);
    if (err instanceof AuditSourceError) throw err;
    throw new AuditSourceError(`cannot reach ${shownDb(url)}: ${messageOf(err)}`);
  }
  return {
    read: async (after, limit) =>
      (await c.query<AuditRow>(PG_SQL.audit, [after, limit])).rows.map(auditView),
    anchor:
      version < PG_AUDIT_ANCHOR_VERSION
        ? undefined
        : async () => {
            if (!kept) return undefined;
            const [row] = (await c.query<AuditAnchorRow>(PG_SQL.auditAnchor)).rows;
            return row === undefined ? undefined : anchorView(row);
          },
    close: () => c.end(),
  };
}

/** One line about an error (a refused connection's AggregateError has no message of its own). */
function messageOf(err: unknown): string {
  const e = err as { message?: string; code?: string; errors?: unknown[] };
  const text = e.message || e.code || (e.errors?.[0] !== undefined ? messageOf(e.errors[0]) : '');
  return (text || String(err)).replace(/\s+/g, ' ');
}
