// Fan-out: orchestrator posts to all-agents (five recipients) with 16 in flight while the five
// long-poll and ack. Reports messages accepted and deliveries received per second. `--acks
// on-poll` carries each answer's acks on the next poll (POST /v1/inbox, as the client library
// does; a build from before it answers 405, and the run acks on its own), `separate` acks with
// POST /v1/acks before polling again.
//
//   node bench/path/fanout.mjs [--seconds 5] [--inflight 16] [--acks on-poll|separate]
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { AGENTS, benchDir, round, startAdapter, tokenOf, uuidv7 } from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    inflight: { type: 'string', default: '16' },
    acks: { type: 'string', default: 'on-poll' },
  },
});
if (!['on-poll', 'separate'].includes(values.acks)) {
  console.error(`--acks: on-poll or separate, not ${values.acks}`);
  process.exit(2);
}
const seconds = Number(values.seconds);
const inflight = Number(values.inflight);
const { dir, topology, cleanup } = benchDir();
// a queue bound above what a 5 s run can pile up, so nothing is evicted
const adapter = await startAdapter(dir, topology, ['--queue-capacity', '1000000']);
const pool = new Pool(adapter.url, { connections: inflight + 10 });
const auth = (a) => ({ authorization: `Bearer ${tokenOf(a)}`, 'content-type': 'application/json' });
const text = 'x'.repeat(1000);
const recipients = AGENTS.filter((a) => a !== 'orchestrator');

/** One request of an agent, its answer's JSON; with `ids`, a body of delivery ids. */
async function call(agent, method, path, ids) {
  const res = await pool.request({
    method,
    path,
    headers: auth(agent),
    ...(ids === undefined ? {} : { body: JSON.stringify({ delivery_ids: ids }) }),
  });
  return { status: res.statusCode, body: await res.body.json() };
}
// a build from before POST /v1/inbox answers it 405: its runs ack on their own
let acks = values.acks;
if (acks === 'on-poll') {
  const probe = await call('qa', 'POST', '/v1/inbox?wait=0&max=1', [1]);
  if (probe.status === 405) acks = 'separate';
}

let running = true;
let received = 0;
const receivers = recipients.map(async (agent) => {
  let carry = [];
  while (running) {
    const inbox = '/v1/inbox?wait=1&max=100';
    const { body } = await (carry.length > 0
      ? call(agent, 'POST', inbox, carry)
      : call(agent, 'GET', inbox));
    carry = [];
    const { deliveries } = body;
    if (deliveries.length === 0) continue;
    received += deliveries.length;
    const ids = deliveries.map((d) => d.delivery_id);
    if (acks === 'on-poll') carry = ids;
    else await call(agent, 'POST', '/v1/acks', ids);
  }
  if (carry.length > 0) await call(agent, 'POST', '/v1/acks', carry);
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
    acks,
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
