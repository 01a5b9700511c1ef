// The adapter on PostgreSQL (docs/design/postgres.md), beside the SQLite adapter and the PostgreSQL
// peer row, in one run: acked sends per second and p50/p99 at 1, 16 and 64 in flight (~1 KiB
// payloads, AGW_SYNC full) through one replica and through three (the loops spread over them), then
// end to end with sender and receiver on different replicas at a fixed rate, and the cross-replica
// wake: how long after its sender's 201 a message parked for on another replica is received. One
// JSON line per measurement on stdout. Each PostgreSQL target gets a database of its own.
//
//   node bench/store/replicas.mjs [--seconds 5] [--inflight 1,16,64] [--rate 200]
//                           [--url postgres://postgres@127.0.0.1:5432/postgres]
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Pool } from 'undici';
import {
  benchDir,
  CLI,
  closedLoopFn,
  latencySummary,
  pgDatabase,
  startProcess,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    inflight: { type: 'string', default: '1,16,64' },
    rate: { type: 'string', default: '200' },
    url: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/postgres' },
  },
});
const seconds = Number(values.seconds);
const levels = values.inflight.split(',').map(Number);
const rate = Number(values.rate);
const text = 'x'.repeat(1000);
const emit = (o) => console.log(JSON.stringify({ bench: 'replicas', ...o }));
const auth = (a) => ({ authorization: `Bearer ${tokenOf(a)}`, 'content-type': 'application/json' });

function adapter(topology, db) {
  return startProcess(
    [
      CLI,
      'adapter',
      '--listen',
      '127.0.0.1:0',
      '--topology',
      topology,
      '--db',
      db,
      // this measures the write path, not eviction
      '--queue-capacity',
      '1000000',
    ],
    { AGW_SEND_RATE: '0' },
  );
}

/** Acked sends from pm to qa, the loops spread round-robin over `urls`. */
async function sends(urls, inflight) {
  const pools = urls.map((u) => new Pool(u, { connections: inflight, keepAliveTimeout: 60_000 }));
  try {
    return await closedLoopFn({
      inflight,
      seconds,
      send: async (i) => {
        const res = await pools[i % pools.length].request({
          method: 'POST',
          path: '/v1/messages',
          headers: auth('pm'),
          body: JSON.stringify({
            idempotency_key: uuidv7(),
            to: '@qa',
            kind: 'status',
            payload: { text },
          }),
        });
        await res.body.text();
        if (res.statusCode !== 201) throw new Error(`unexpected ${res.statusCode}`);
      },
    });
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
}

/**
 * pm sends through `from` at `rate` a second (open loop) while research (its queue empty: the
 * throughput runs send to qa) long-polls through `to` and acks: latency from send to receipt; and, for each message that found the poll parked, from
 * its 201 to the poll's answer (the wake).
 */
async function endToEnd(from, to) {
  const send = new Pool(from, { connections: 32 });
  const recv = new Pool(to, { connections: 4 });
  const latencies = [];
  const acked = new Map(); // message t -> when its 201 came
  const wakes = [];
  let receiving = true;
  const receiver = (async () => {
    while (receiving) {
      const res = await recv.request({
        method: 'GET',
        path: '/v1/inbox?wait=1&max=100',
        headers: auth('research'),
      });
      const { deliveries } = await res.body.json();
      const t = performance.now();
      if (deliveries.length === 0) continue;
      for (const d of deliveries) {
        latencies.push(t - d.message.payload.t);
        const at = acked.get(d.message.payload.t);
        if (at !== undefined) wakes.push(t - at);
      }
      const ack = await recv.request({
        method: 'POST',
        path: '/v1/acks',
        headers: auth('research'),
        body: JSON.stringify({ delivery_ids: deliveries.map((d) => d.delivery_id) }),
      });
      await ack.body.text();
    }
  })();
  const total = Math.round(rate * seconds);
  const start = performance.now() + 1000;
  const pending = [];
  for (let i = 0; i < total; i++) {
    const wait = start + (i * 1000) / rate - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const t = performance.now();
    pending.push(
      send
        .request({
          method: 'POST',
          path: '/v1/messages',
          headers: auth('pm'),
          body: JSON.stringify({
            idempotency_key: uuidv7(),
            to: '@research',
            kind: 'status',
            payload: { t, text },
          }),
        })
        .then(async (r) => {
          await r.body.text();
          acked.set(t, performance.now());
        }),
    );
  }
  await Promise.all(pending);
  const deadline = performance.now() + 10_000;
  while (latencies.length < total && performance.now() < deadline)
    await new Promise((r) => setTimeout(r, 20));
  receiving = false;
  await receiver;
  await send.close();
  await recv.close();
  // a wake is the 201-to-receipt time of a message the poll was parked for; a message received
  // before its own 201 arrived (the poll raced the answer) has none
  const w = latencySummary(wakes.filter((x) => x >= 0));
  return {
    sent: total,
    received: latencies.length,
    ...latencySummary(latencies),
    wake_p50_ms: w.p50_ms,
    wake_p99_ms: w.p99_ms,
  };
}

const { dir, topology, cleanup } = benchDir();
try {
  // the SQLite adapter, FULL
  {
    const a = await adapter(topology, join(dir, 'adapter.db'));
    for (const inflight of levels)
      emit({
        target: 'adapter-sqlite',
        replicas: 1,
        inflight,
        ...(await sends([a.url], inflight)),
      });
    emit({
      target: 'adapter-sqlite',
      replicas: 1,
      e2e: true,
      rate,
      ...(await endToEnd(a.url, a.url)),
    });
    await a.stop();
  }
  // the PostgreSQL peer row: one INSERT per transaction, synchronous_commit on (peers.mjs)
  {
    const db = await pgDatabase(values.url);
    const pool = new pg.Pool({ connectionString: db.url, max: 64 });
    // DROP DATABASE ... WITH (FORCE) may end a connection the pool is still closing
    pool.on('error', () => {});
    await pool.query('CREATE TABLE q (id bigserial PRIMARY KEY, body jsonb NOT NULL)');
    for (const inflight of levels) {
      const r = await closedLoopFn({
        inflight,
        seconds,
        send: () =>
          pool.query('INSERT INTO q (body) VALUES ($1)', [
            JSON.stringify({
              idempotency_key: randomUUID(),
              to: '@qa',
              kind: 'status',
              payload: { text },
            }),
          ]),
      });
      emit({ target: 'postgres-insert', inflight, ...r });
    }
    await pool.end();
    await db.drop();
  }
  // one adapter on PostgreSQL
  {
    const db = await pgDatabase(values.url);
    const a = await adapter(topology, db.url);
    for (const inflight of levels)
      emit({
        target: 'adapter-postgres',
        replicas: 1,
        inflight,
        ...(await sends([a.url], inflight)),
      });
    emit({
      target: 'adapter-postgres',
      replicas: 1,
      e2e: true,
      rate,
      ...(await endToEnd(a.url, a.url)),
    });
    await a.stop();
    await db.drop();
  }
  // three adapters on one database
  {
    const db = await pgDatabase(values.url);
    const rs = [];
    for (let i = 0; i < 3; i++) rs.push(await adapter(topology, db.url));
    const urls = rs.map((r) => r.url);
    for (const inflight of levels)
      emit({ target: 'adapter-postgres', replicas: 3, inflight, ...(await sends(urls, inflight)) });
    emit({
      target: 'adapter-postgres',
      replicas: 3,
      e2e: true,
      cross_replica: true,
      rate,
      ...(await endToEnd(urls[0], urls[1])),
    });
    for (const r of rs) await r.stop();
    await db.drop();
  }
} finally {
  cleanup();
}
