/**
 * The PostgreSQL store against the storage conformance suite: a fresh database per test on the
 * local server (test/helpers/pg.ts), opened as the adapter opens it (sync full).
 */
import pg from 'pg';
import { openPgStore } from '../../src/store/postgres/pg-store.js';
import { testDatabase } from '../helpers/pg.js';
import { storeConformance } from './conformance/index.js';

storeConformance('PostgreSQL store', async ({ delivery, storage, budgets }) => {
  const db = await testDatabase();
  const store = await openPgStore(db.url, { sync: 'full', delivery, storage, budgets }).catch(
    async (err: unknown) => {
      await db.drop();
      throw err;
    },
  );
  let current = store;
  return {
    store,
    reopen: async () => {
      await current.close();
      current = await openPgStore(db.url, { sync: 'full', delivery, storage, budgets });
      return current;
    },
    cleanup: async () => {
      await current.close();
      await db.drop();
    },
    // A direct UPDATE rewrites one byte of the stored body and leaves the checksum alone.
    corrupt: async (channel, seq) => {
      const c = new pg.Client({ connectionString: db.url });
      await c.connect();
      try {
        const { rows } = await c.query<{ body: string }>(
          'SELECT body FROM messages WHERE channel = $1 AND seq = $2',
          [channel, seq],
        );
        const body = rows[0]?.body;
        if (body === undefined) throw new Error(`no message ${channel} #${seq} to corrupt`);
        const at = body.indexOf('"kind"') + 1; // "kind" becomes "jind"
        const changed = `${body.slice(0, at)}j${body.slice(at + 1)}`;
        const r = await c.query('UPDATE messages SET body = $1 WHERE channel = $2 AND seq = $3', [
          changed,
          channel,
          seq,
        ]);
        if (r.rowCount !== 1) throw new Error(`corrupted ${r.rowCount} rows, not 1`);
      } finally {
        await c.end();
      }
    },
  };
});
