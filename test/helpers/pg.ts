/**
 * A fresh PostgreSQL database per test, on the server this kind of machine runs at
 * 127.0.0.1:5432 (trust auth, user postgres; .ci/run starts it if it is down). AGW_TEST_PG
 * names another server (a postgres:// URL of its maintenance database). An unreachable server
 * is an error that says so: PostgreSQL tests never skip silently.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

const ADMIN_URL = process.env.AGW_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/postgres';

async function admin<T>(run: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: ADMIN_URL, connectionTimeoutMillis: 5000 });
  c.on('error', () => undefined);
  try {
    await c.connect();
  } catch (err) {
    await c.end().catch(() => undefined);
    throw new Error(
      `PostgreSQL is not reachable at ${ADMIN_URL.replace(/\/\/[^@]*@/, '//')} (${(err as Error).message}): these tests need a real PostgreSQL (start it with pg_ctlcluster, or set AGW_TEST_PG)`,
      { cause: err },
    );
  }
  try {
    return await run(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** Creates database agw_t_<random>; `drop()` ends its connections and drops it. */
export async function testDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `agw_t_${randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  let dropped = false;
  return {
    url: url.toString(),
    drop: async () => {
      if (dropped) return;
      dropped = true;
      await admin(async (c) => {
        await c.query(
          'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
          [name],
        );
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      });
    },
  };
}
