/**
 * Many pollers over three replicas take the same agent's inbox at once while messages arrive
 * through all three: no delivery is leased to two pollers (every delivery_id is handed out
 * once, every message once; the lease, 60 s, does not run out in the test), and the order
 * inside each channel stays strict across replicas (no message handed out before the one
 * ahead of it in its channel was acked).
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, type Json } from '../helpers/http.js';
import { envelope, post, type ReplicaSet, sleep, startReplicaSet } from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

const MESSAGES = Number(process.env.AGW_TEST_REPLICA_MESSAGES ?? 240); // below the queue bound, 500
const POLLERS = 12;
const AGENT = 'qa';
/** Senders and the channels of theirs that reach qa. */
const SENDS: [string, string][] = [
  ['pm', '@qa'],
  ['pm', 'product'],
  ['engineering', 'all-agents'],
  ['research', '@qa'],
  ['growth', 'product'],
];

let set: ReplicaSet;
beforeAll(async () => {
  set = await startReplicaSet(['--lease-ms', '60000']);
}, 60_000);
afterAll(() => set?.cleanup(), 30_000);

it(`hands each delivery to one poller of ${POLLERS} over three replicas`, {
  timeout: 180_000,
}, async () => {
  const { replicas } = set;
  const url = (i: number) => replicas.urlOf(i % replicas.count);
  const sentIds = new Set<string>();
  const handed = new Map<number, string>(); // delivery_id → the poller it went to
  const received = new Map<string, number>(); // message_id → times handed out
  const ackIssued = new Set<string>(); // `${channel}#${seq}`, noted before its ack is sent
  const problems: string[] = [];
  let polls = 0;
  let done = false;

  const pollers = Array.from({ length: POLLERS }, async (_, n) => {
    const poller = `poller ${n} (replica ${n % replicas.count})`;
    while (!done) {
      const r = await call(url(n), 'GET', `/v1/inbox?wait=2&max=${1 + (n % 4)}`, {
        agent: AGENT,
      });
      polls++;
      if (r.status !== 200) {
        problems.push(`${poller}: poll answered ${r.status} ${JSON.stringify(r.body)}`);
        await sleep(100);
        continue;
      }
      const deliveries = r.body.deliveries as Json[];
      const inThisPoll = new Set<string>();
      for (const d of deliveries) {
        const m = d.message;
        const other = handed.get(d.delivery_id);
        if (other !== undefined)
          problems.push(
            `delivery ${d.delivery_id} (${m.message_id}) handed to ${other} and ${poller}`,
          );
        handed.set(d.delivery_id, poller);
        received.set(m.message_id, (received.get(m.message_id) ?? 0) + 1);
        if (d.attempt !== 1) problems.push(`delivery ${d.delivery_id}: attempt ${d.attempt}`);
        // strict order: every earlier message of its channel was acked already, or came first
        // in this same poll
        for (let s = 1; s < m.channel_sequence_id; s++)
          if (!ackIssued.has(`${m.channel}#${s}`) && !inThisPoll.has(`${m.channel}#${s}`)) {
            problems.push(
              `${poller} got ${m.channel}#${m.channel_sequence_id} while #${s} was not acked`,
            );
            break;
          }
        inThisPoll.add(`${m.channel}#${m.channel_sequence_id}`);
      }
      if (deliveries.length === 0) continue;
      for (const key of inThisPoll) ackIssued.add(key);
      // acked through another replica than the one that leased them
      const a = await call(url(n + 1), 'POST', '/v1/acks', {
        agent: AGENT,
        body: { delivery_ids: deliveries.map((d) => d.delivery_id) },
      });
      if (a.status !== 200 || a.body.acked.length !== deliveries.length)
        problems.push(`${poller}: ack answered ${a.status} ${JSON.stringify(a.body)}`);
    }
  });

  // the messages arrive while the pollers poll, through all three replicas
  const senders = SENDS.map(async ([sender, to], n) => {
    for (let i = n; i < MESSAGES; i += SENDS.length) {
      const r = await post(url(i), sender, envelope(to, { i }));
      if (r.status !== 201) throw new Error(`send ${i}: ${r.status} ${JSON.stringify(r.body)}`);
      sentIds.add(r.body.message_id);
      if (i % 7 === 0) await sleep(5);
    }
  });
  try {
    await Promise.all(senders);
    await until(
      () => received.size >= MESSAGES,
      () =>
        `${received.size} of ${MESSAGES} messages handed out; ${problems.slice(0, 3).join('; ')}`,
      { ms: 120_000 },
    );
  } finally {
    done = true;
    await Promise.all(pollers);
  }

  expect(problems, problems.slice(0, 10).join('\n')).toEqual([]);
  expect([...received.entries()].filter(([, n]) => n > 1)).toEqual([]);
  expect(new Set(received.keys())).toEqual(sentIds);
  expect(handed.size).toBe(MESSAGES);
  // nothing left for qa: every delivery acked once
  const hb = await call(url(0), 'POST', '/v1/heartbeat', { agent: AGENT });
  expect(hb.body).toMatchObject({ pending: 0 });
  console.log(`one lease per delivery: ${MESSAGES} messages, ${polls} polls by ${POLLERS} pollers`);
});
