/**
 * The SQLite side of `agent-gateway migrate-store` (docs/deploy.md, "Moving a SQLite adapter's
 * data to PostgreSQL"): a stopped adapter's file, opened read-only at this program's schema
 * version; refused (CopyRefusal) when another process holds it or it is not such a store.
 * postgres/copy-from-sqlite.ts copies from the handle this returns.
 */
import { readFileSync, statSync } from 'node:fs';
import Database from 'better-sqlite3';
import { CopyRefusal } from '../copy-refusal.js';
import { MIGRATIONS } from './sql.js';

/** The store in `file`, read-only, once nothing else holds it. */
export function openCopySource(file: string): Database.Database {
  refuseIfHeld(file);
  return openSource(file);
}

/**
 * Refuses a file another process has open (an adapter still running on it, or any other
 * SQLite connection: in WAL mode each holds a read lock on the file for as long as it is open),
 * from /proc/locks. Where there is no /proc/locks (not Linux) nothing is checked: stopping the
 * adapter first is the documented step either way.
 */
function refuseIfHeld(file: string): void {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(file);
  } catch {
    throw new CopyRefusal(`no such file: ${file}`);
  }
  if (!st.isFile()) throw new CopyRefusal(`not a file: ${file}`);
  let locks: string;
  try {
    locks = readFileSync('/proc/locks', 'utf8');
  } catch {
    return;
  }
  // /proc/locks names a file as MAJOR:MINOR:INODE, the device numbers in hex
  const dev = Number(st.dev);
  const major = (dev >> 8) & 0xfff;
  const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
  const where = `${hex2(major)}:${hex2(minor)}:${st.ino}`;
  for (const line of locks.split('\n')) {
    const f = line.trim().split(/\s+/);
    // "1: POSIX  ADVISORY  READ 13034 fe:00:2147468 1073741826 1073742335" (a blocked waiter's
    // line starts with "->" and shifts by one field)
    const at = f.indexOf(where);
    if (at < 1) continue;
    const pid = Number(f[at - 1]);
    if (pid === process.pid) continue;
    throw new CopyRefusal(
      `${file} is open in process ${pid} (an adapter still running on it?): stop it first`,
    );
  }
}

const hex2 = (n: number) => n.toString(16).padStart(2, '0');

/** The SQLite store, read-only, at this program's schema version. */
function openSource(file: string): Database.Database {
  let db: Database.Database;
  try {
    db = new Database(file, { readonly: true, fileMustExist: true });
  } catch (err) {
    throw new CopyRefusal(`cannot open ${file} as SQLite: ${(err as Error).message}`);
  }
  try {
    const version = db.pragma('user_version', { simple: true }) as number;
    const hasMessages = db
      .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages'")
      .get();
    if (version === 0 || hasMessages === undefined)
      throw new CopyRefusal(`${file} is not an adapter's store`);
    if (version < MIGRATIONS.length)
      throw new CopyRefusal(
        `${file} is at schema version ${version}, older than this program's ` +
          `${MIGRATIONS.length}: start this version's adapter on it once (it migrates at ` +
          'start), stop it, and run this again',
      );
    if (version > MIGRATIONS.length)
      throw new CopyRefusal(
        `${file} is at schema version ${version}, newer than this program's ` +
          `${MIGRATIONS.length}: use the agent-gateway that wrote it`,
      );
    return db;
  } catch (err) {
    db.close();
    if (err instanceof CopyRefusal) throw err;
    throw new CopyRefusal(`cannot read ${file} as an adapter's store: ${(err as Error).message}`);
  }
}
