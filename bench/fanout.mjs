// Fan-out: orchestrator posts to all-agents (five recipients) with 16 in flight while the five
// long-poll and ack. Reports messages accepted and deliveries received per second.
//
//   node bench/fanout.mjs [--seconds 5] [--inflight 16]
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { AGENTS, benchDir, round, startAdapter, tokenOf, uuidv7 } from './lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    inflight: { type: 'string', default: '16' },
  },
});
const seconds = Number(values.seconds);
const inflight = Number(values.inflight);
const { dir, topology, cleanup } = benchDir();
// a queue bound above what a 5 s run can pile up, so nothing is evicted
const adapter = await startAdapter(dir, topology, ['--queue-capacity', '1000000']);
const pool = new Pool(adapter.url, { connections: inflight + 10 });
const auth = (a) => ({ authorization: `Bearer ${tokenOf(a)}`, 'content-type': 'application/json' });
const text = 'x'.repeat(1000);
const recipients = AGENTS.filter((a) => a !== 'orchestrator');

let running = true;
let received = 0;
const receivers = recipients.map(async (agent) => {
  while (running) {
    const res = await pool.request({
      method: 'GET',
      path: '/v1/inbox?wait=1&max=100',
      headers: auth(agent),
    });
    const { deliveries } = await res.body.json();
    if (deliveries.length === 0) continue;
    received += deliveries.length;
    await (
      await pool.request({
        method: 'POST',
        path: '/v1/acks',
        headers: auth(agent),
        body: JSON.stringify({ delivery_ids: deliveries.map((d) => d.delivery_id) }),
      })
    ).body.text();
  }
});
let accepted = 0;
const started = performance.now();
const until = started + seconds * 1000;
await Promise.all(
  Array.from({ length: inflight }, async () => {
    while (performance.now() < until) {
      const res = await pool.request({
        method: 'POST',
        path: '/v1/messages',
        headers: auth('orchestrator'),
        body: JSON.stringify({
          idempotency_key: uuidv7(),
          to: 'all-agents',
          kind: 'status',
          payload: { text },
        }),
      });
      await res.body.text();
      if (res.statusCode === 201) accepted++;
    }
  }),
);
const sendSeconds = (performance.now() - started) / 1000;
const receivedDuringSend = received;
// let the receivers finish what was sent
const deadline = performance.now() + 30_000;
while (received < accepted * recipients.length && performance.now() < deadline)
  await new Promise((r) => setTimeout(r, 20));
const allSeconds = (performance.now() - started) / 1000;
running = false;
await Promise.all(receivers);
await pool.close();
await adapter.stop();
cleanup();
console.log(
  JSON.stringify({
    bench: 'fanout',
    recipients: recipients.length,
    inflight,
    seconds: round(sendSeconds, 2),
    messages_per_second: Math.round(accepted / sendSeconds),
    deliveries_per_second_while_sending: Math.round(receivedDuringSend / sendSeconds),
    deliveries_per_second_to_drain: Math.round(received / allSeconds),
    accepted,
    delivered: received,
  }),
);
