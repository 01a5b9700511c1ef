import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import {
  benchDir,
  CLI,
  latencySummary,
  round,
  startAdapter,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    cli: { type: 'string', default: CLI },
    label: { type: 'string' },
    seconds: { type: 'string', default: '5' },
    max: { type: 'string', default: '10' },
    queued: { type: 'string', default: '500' },
    channels: { type: 'string', default: '50' },
    sync: { type: 'string', default: 'full,normal' },
  },
});
const cli = resolve(values.cli);
const label = values.label ?? (cli === CLI ? 'this build' : cli);
const seconds = Number(values.seconds);
const queued = Number(values.queued);
const channelCount = Number(values.channels);
const levels = values.max.split(',').map(Number);
const channels = Array.from(
  { length: channelCount },
  (_, i) => `lane-${String(i).padStart(2, '0')}`,
);
const text = 'x'.repeat(200);

/** orchestrator (alerts_to), pm (the sender) and qa (the poller); pm and qa in every channel. */
const topologyDir = () =>
  benchDir({
    agents: ['orchestrator', 'pm', 'qa'],
    channels: channels.map((name) => ({ name, members: ['pm', 'qa'] })),
  });

const auth = (a) => ({ authorization: `Bearer ${tokenOf(a)}`, 'content-type': 'application/json' });

async function request(pool, opts, expected = 200) {
  const res = await pool.request(opts);
  const body = await res.body.json();
  if (res.statusCode !== expected)
    throw new Error(`${opts.path}: ${res.statusCode} ${JSON.stringify(body)}`);
  return body;
}

let next = 0;
/** `n` messages from pm, round-robin over the channels, in batches of at most 100. */
async function send(pool, n) {
  for (let done = 0; done < n; ) {
    const k = Math.min(100, n - done);
    const messages = Array.from({ length: k }, () => ({
      idempotency_key: uuidv7(),
      to: channels[next++ % channels.length],
      kind: 'status',
      payload: { text },
    }));
    const { results } = await request(pool, {
      method: 'POST',
      path: '/v1/messages/batch',
      headers: auth('pm'),
      body: JSON.stringify({ messages }),
    });
    if (results.some((r) => r.status !== 201)) throw new Error('a send was refused');
    done += k;
  }
}

for (const sync of values.sync.split(',')) {
  for (const max of levels) {
    const { dir, topology, cleanup } = topologyDir();
    // a bound far above the queue: nothing is ever evicted
    const adapter = await startAdapter(
      dir,
      topology,
      ['--sync', sync, '--queue-capacity', '100000'],
      {},
      cli,
    );
    const pool = new Pool(adapter.url, { connections: 1, pipelining: 1, keepAliveTimeout: 60_000 });
    try {
      next = 0;
      await send(pool, queued);
      const latencies = [];
      let short = 0;
      const step = async (record) => {
        const t0 = performance.now();
        const { deliveries } = await request(pool, {
          method: 'GET',
          path: `/v1/inbox?max=${max}`,
          headers: auth('qa'),
        });
        const ms = performance.now() - t0;
        if (record) latencies.push(ms);
        if (deliveries.length < max) short++;
        await request(pool, {
          method: 'POST',
          path: '/v1/acks',
          headers: auth('qa'),
          body: JSON.stringify({ delivery_ids: deliveries.map((d) => d.delivery_id) }),
        });
        await send(pool, deliveries.length);
      };
      for (const until = performance.now() + 1000; performance.now() < until; ) await step(false);
      const started = performance.now();
      const until = started + seconds * 1000;
      while (performance.now() < until) await step(true);
      const elapsed = (performance.now() - started) / 1000;
      const hb = await request(pool, {
        method: 'POST',
        path: '/v1/heartbeat',
        headers: auth('qa'),
      });
      console.log(
        JSON.stringify({
          bench: 'poll',
          label,
          sync,
          queued,
          channels: channelCount,
          max,
          n: latencies.length,
          seconds: round(elapsed, 2),
          polls_per_second: Math.round(latencies.length / elapsed),
          ...latencySummary(latencies),
          short_pages: short,
          pending_at_end: hb.pending,
        }),
      );
    } finally {
      await pool.close();
      await adapter.stop();
      cleanup();
    }
  }
}
