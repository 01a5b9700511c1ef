// What AGW_SYNC=full costs on PostgreSQL now that acks commit synchronously
// (docs/design/durability.md, "PostgreSQL"): acked sends (pm -> @qa, ~1 KiB) and acks
// (POST /v1/acks of one delivery each, leased beforehand) per second at 1 and 16 in flight (the
// acks' loops share @qa's deliveries, leased 100 at a time), through one adapter on PostgreSQL,
// for two builds in one run, alternating: this checkout's (after) and AGW_BENCH_CLI_BEFORE's (the
// build before the change). Each build and round gets a database of its own. One JSON line per
// measurement on stdout.
//
//   AGW_BENCH_CLI_BEFORE=/path/to/before/dist/cli/main.js node bench/store/pg-sync.mjs \
//     [--seconds 3] [--inflight 1,16] [--rounds 2] [--url postgres://postgres@127.0.0.1:5432/postgres]
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import {
  benchDir,
  CLI,
  closedLoopFn,
  pgDatabase,
  startProcess,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '3' },
    inflight: { type: 'string', default: '1,16' },
    rounds: { type: 'string', default: '2' },
    url: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/postgres' },
  },
});
const seconds = Number(values.seconds);
const levels = values.inflight.split(',').map(Number);
const rounds = Number(values.rounds);
const text = 'x'.repeat(1000);
const emit = (o) => console.log(JSON.stringify({ bench: 'pg-sync', ...o }));
const auth = (a) => ({ authorization: `Bearer ${tokenOf(a)}`, 'content-type': 'application/json' });
const builds = [['after', CLI]];
if (process.env.AGW_BENCH_CLI_BEFORE) builds.unshift(['before', process.env.AGW_BENCH_CLI_BEFORE]);

async function request(pool, method, path, agent, body) {
  const res = await pool.request({
    method,
    path,
    headers: auth(agent),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  if (res.statusCode >= 300) throw new Error(`${method} ${path}: ${res.statusCode} ${text}`);
  return text === '' ? {} : JSON.parse(text);
}

/** `n` short messages to @qa, in batches of 100. */
async function fill(pool, n) {
  for (let sent = 0; sent < n; sent += 100) {
    const batch = Array.from({ length: Math.min(100, n - sent) }, () => ({
      idempotency_key: uuidv7(),
      to: '@qa',
      kind: 'status',
      payload: {},
    }));
    await request(pool, 'POST', '/v1/messages/batch', 'pm', { messages: batch });
  }
}

/**
 * Delivery ids to ack, one per call: a poll leases up to 100 of @qa (its next ones are not handed
 * out before these are acked: strict order), and the next poll is made once all are taken.
 */
function leased(pool) {
  let queue = [];
  let refill;
  let empty = 0;
  const next = async () => {
    for (;;) {
      const id = queue.pop();
      if (id !== undefined) return id;
      // (empty while the acks of the last lot are still committing: asked again, twice)
      if (empty >= 3) throw new Error('out of messages to ack: fill more');
      refill ??= request(pool, 'GET', '/v1/inbox?wait=1&max=100', 'qa').then(
        ({ deliveries }) => {
          queue = deliveries.map((d) => d.delivery_id).reverse();
          empty = deliveries.length === 0 ? empty + 1 : 0;
          refill = undefined;
        },
        (err) => {
          refill = undefined;
          throw err;
        },
      );
      await refill;
    }
  };
  // the ids taken and not acked when the loop stopped: acked after it, or the next poll of @qa
  // would find its lane still leased
  const rest = () => queue.splice(0);
  return { next, rest };
}

async function measure(build, cli, round) {
  const db = await pgDatabase(values.url);
  const { dir, topology, cleanup } = benchDir();
  const adapter = await startProcess(
    [
      cli,
      'adapter',
      '--listen',
      '127.0.0.1:0',
      '--topology',
      topology,
      '--db',
      db.url,
      '--queue-capacity',
      '1000000',
      '--lease-ms',
      '900000',
    ],
    { AGW_SEND_RATE: '0', AGW_SYNC: 'full' },
  );
  try {
    for (const inflight of levels) {
      const pool = new Pool(adapter.url, { connections: inflight, keepAliveTimeout: 60_000 });
      try {
        const sends = await closedLoopFn({
          inflight,
          seconds,
          send: () =>
            request(pool, 'POST', '/v1/messages', 'pm', {
              idempotency_key: uuidv7(),
              to: '@research',
              kind: 'status',
              payload: { text },
            }),
        });
        emit({ build, round, what: 'acked sends', inflight, ...sends });
        // enough messages for the warm-up and the measured seconds at any rate seen here
        await fill(pool, 5000 * (seconds + 1));
        const { next, rest } = leased(pool);
        const acks = await closedLoopFn({
          inflight,
          seconds,
          send: async () =>
            request(pool, 'POST', '/v1/acks', 'qa', { delivery_ids: [await next()] }),
        });
        const left = rest();
        if (left.length > 0) await request(pool, 'POST', '/v1/acks', 'qa', { delivery_ids: left });
        emit({ build, round, what: 'acks', inflight, ...acks });
      } finally {
        await pool.close();
      }
    }
  } finally {
    await adapter.stop();
    await db.drop();
    cleanup();
  }
  void dir;
}

for (let round = 1; round <= rounds; round++)
  for (const [build, cli] of round % 2 === 1 ? builds : [...builds].reverse())
    await measure(build, cli, round);
