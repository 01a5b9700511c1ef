// End-to-end latency, send to long-poll receive: pm sends direct messages to qa at a fixed rate
// (open loop, default 500 msg/s) while qa long-polls and acks. Latency is the receiving time
// minus the sending time, both on this process's clock. qa acks each answer on its next poll
// (POST /v1/inbox), as the client library does. One JSON line on stdout.
//
//   node bench/path/e2e.mjs [--rate 500] [--seconds 10]
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { benchDir, latencySummary, startAdapter, tokenOf, uuidv7 } from '../lib/lib.mjs';

const { values } = parseArgs({
  options: { rate: { type: 'string', default: '500' }, seconds: { type: 'string', default: '10' } },
});
const rate = Number(values.rate);
const seconds = Number(values.seconds);
const { dir, topology, cleanup } = benchDir();
const adapter = await startAdapter(dir, topology);
const pool = new Pool(adapter.url, { connections: 32 });
const auth = (a) => ({ authorization: `Bearer ${tokenOf(a)}`, 'content-type': 'application/json' });
const text = 'x'.repeat(1000);

const latencies = [];
let sent = 0;
let receiving = true;
const receiver = (async () => {
  let carry = [];
  const body = (ids) => ({ body: JSON.stringify({ delivery_ids: ids }) });
  while (receiving) {
    const res = await pool.request({
      method: carry.length > 0 ? 'POST' : 'GET',
      path: '/v1/inbox?wait=1&max=100',
      headers: auth('qa'),
      ...(carry.length > 0 ? body(carry) : {}),
    });
    const { deliveries } = await res.body.json();
    const t = performance.now();
    carry = deliveries.map((d) => d.delivery_id);
    for (const d of deliveries) latencies.push(t - d.message.payload.t);
  }
  if (carry.length > 0) {
    const res = await pool.request({
      method: 'POST',
      path: '/v1/acks',
      headers: auth('qa'),
      ...body(carry),
    });
    await res.body.text();
  }
})();

const warmup = 1000;
const total = Math.round(rate * seconds);
const start = performance.now() + warmup;
const sends = [];
for (let i = 0; i < total; i++) {
  const due = start + (i * 1000) / rate;
  const wait = due - performance.now();
  if (wait > 1) await new Promise((r) => setTimeout(r, wait));
  sends.push(
    pool
      .request({
        method: 'POST',
        path: '/v1/messages',
        headers: auth('pm'),
        body: JSON.stringify({
          idempotency_key: uuidv7(),
          to: '@qa',
          kind: 'status',
          payload: { t: performance.now(), text },
        }),
      })
      .then((r) => r.body.text()),
  );
  sent++;
}
await Promise.all(sends);
const deadline = performance.now() + 10_000;
while (latencies.length < sent && performance.now() < deadline)
  await new Promise((r) => setTimeout(r, 20));
receiving = false;
await receiver;
await pool.close();
await adapter.stop();
cleanup();
console.log(
  JSON.stringify({
    bench: 'e2e',
    rate,
    seconds,
    sent,
    received: latencies.length,
    ...latencySummary(latencies),
  }),
);
