/**
 * Replays on PostgreSQL. A replay page fetches little more than its byte bound
 * (docs/reference/adapter-api.md): before, the store read chunks of 16 then 64 whole rows, so an
 * 8 MiB page of 256 KiB messages fetched about 20 MiB. The adapter reaches its database through a
 * counting TCP proxy on loopback; the bytes PostgreSQL sends during one replay are what the page
 * cost. And replays that wait in PostgreSQL (behind a table lock here) leave /health a connection
 * of the read pool.
 */
import { randomUUID } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/** A TCP proxy to `target` that counts the bytes coming back from it. */
async function countingProxy(target: URL): Promise<{ port: number; received: () => number }> {
  let received = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port || 5432), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.once('close', () => sockets.delete(s));
    }
    upstream.on('data', (d: Buffer) => {
      received += d.length;
    });
    client.pipe(upstream);
    upstream.pipe(client);
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  stops.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return { port: address.port, received: () => received };
}

it('fetches about one page bound of message bodies for one replay page, not 16 rows at once', {
  timeout: 120_000,
}, async () => {
  const db = await testDatabase();
  stops.push(() => db.drop());
  const real = new URL(db.url);
  const proxy = await countingProxy(real);
  const via = new URL(db.url);
  via.port = String(proxy.port);
  const page = 1024 * 1024;
  const t = await startTestAdapter({ db: via.toString(), maxPageBytes: String(page) });
  stops.push(() => t.stop());
  const text = 'x'.repeat(250 * 1024);
  for (let i = 0; i < 40; i++) {
    const r = await call(t.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { idempotency_key: randomUUID(), to: '@pm', kind: 'status', payload: { i, text } },
    });
    expect(r.status).toBe(201);
  }
  const before = proxy.received();
  const r = await call(t.url, 'GET', '/v1/channels/@pm/messages?limit=1000', { agent: 'pm' });
  const fetched = proxy.received() - before;
  expect(r.status).toBe(200);
  expect(r.body.messages).toHaveLength(4); // 4 of 250,000-odd bytes fit in 1 MiB, 5 do not
  // the page's bodies and the one that ends it, with room for the rest of the adapter's
  // traffic meanwhile; the first chunk alone of 16 whole rows was 4 MiB
  expect(fetched).toBeLessThan(page + 2 * 250 * 1024);
});

it('answers /health while replays hold every page read on PostgreSQL', {
  timeout: 120_000,
}, async () => {
  const db = await testDatabase();
  stops.push(() => db.drop());
  // 4 read connections (the default): page reads may hold 3 of them
  const t = await startTestAdapter({ db: db.url, maxReadsPerAgent: '2' });
  stops.push(() => t.stop());
  for (const agent of ['pm', 'qa', 'research', 'growth'])
    await call(t.url, 'POST', '/v1/messages', {
      agent,
      body: { idempotency_key: randomUUID(), to: `@${agent}`, kind: 'status', payload: {} },
    });
  // every read of the messages table waits behind this lock until it is let go
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  stops.push(() => admin.end());
  await admin.query('BEGIN');
  await admin.query('LOCK TABLE messages IN ACCESS EXCLUSIVE MODE');
  const replays = ['pm', 'qa', 'research', 'growth'].flatMap((agent) =>
    [1, 2].map(() => call(t.url, 'GET', `/v1/channels/@${agent}/messages`, { agent })),
  );
  // until three of them wait on the lock inside PostgreSQL (the rest wait for them); asked on
  // a connection of its own, since one in a transaction keeps its first view of the statistics
  const watcher = new pg.Client({ connectionString: db.url });
  await watcher.connect();
  stops.push(() => watcher.end());
  const waiting = async () =>
    (
      await watcher.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      )
    ).rows[0]!.n;
  while ((await waiting()) < 3) await new Promise((resolve) => setImmediate(resolve));
  // the probe and a send's duplicate check find the connection page reads leave free
  const health = await call(t.url, 'GET', '/health');
  expect([health.status, health.body]).toEqual([200, { status: 'ready' }]);
  await admin.query('COMMIT');
  for (const r of await Promise.all(replays)) expect(r.status).toBe(200);
});
