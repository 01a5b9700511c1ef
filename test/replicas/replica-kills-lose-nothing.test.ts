/**
 * The crash test across replicas: 64 concurrent senders spread over three adapters on one
 * PostgreSQL database while one replica after another is SIGKILLed and started again on a new
 * port. A sender whose request fails (connection error, 5xx) sends again with the same
 * idempotency key to another replica, as a sidecar would. At the end every acknowledged
 * message is stored exactly once at the assignment it was acknowledged with, nothing
 * unacknowledged is stored, and every channel's sequence runs 1..N with no gap.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, type Json } from '../helpers/http.js';
import {
  type ReplicaSet,
  replayEveryChannel,
  sleep,
  startReplicaSet,
} from '../helpers/replicas.js';
import { AGENTS, CHANNELS, tokenOf } from '../helpers/topology.js';

const KILLS = Number(process.env.AGW_TEST_REPLICA_KILLS ?? 8);
const SENDERS = 64;
/** One message retried this long without an answer is a failure, not a wait. */
const GIVE_UP_MS = 60_000;

interface Sent {
  readonly agent: string;
  readonly body: { idempotency_key: string; to: string; kind: string; payload: object };
}

const routes = Object.fromEntries(
  AGENTS.map((a) => [
    a,
    [
      ...Object.entries(CHANNELS)
        .filter(([, m]) => m.includes(a))
        .map(([c]) => c),
      ...AGENTS.map((b) => `@${b}`),
    ],
  ]),
);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)]!;

let set: ReplicaSet;
beforeAll(async () => {
  set = await startReplicaSet();
}, 60_000);
afterAll(() => set?.cleanup(), 30_000);

it(`keeps every acknowledged message once, gap-free, over ${KILLS} replica kills`, {
  timeout: 240_000,
}, async () => {
  const { replicas } = set;
  const acked = new Map<string, Json>(); // `${agent}/${key}` → the assignment acknowledged
  const problems: string[] = [];
  let sentTotal = 0;
  let failover = 0; // attempts that failed (connection error, 5xx) and went to another replica
  let duplicates = 0;
  let running = true;

  /** Sends `s` until a replica acknowledges it: home first, then the others in turn. */
  const sendUntilAcked = async (home: number, s: Sent) => {
    const started = Date.now();
    let slot = home;
    let last = '';
    for (;;) {
      if (Date.now() - started > GIVE_UP_MS) {
        problems.push(
          `${s.agent}/${s.body.idempotency_key}: no answer in ${GIVE_UP_MS} ms: ${last}`,
        );
        return;
      }
      const url = replicas.url(slot);
      slot = (slot + 1) % replicas.count;
      if (url === undefined) {
        await sleep(10);
        continue;
      }
      try {
        const res = await fetch(`${url}/v1/messages`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${tokenOf(s.agent)}`,
            'content-type': 'application/json',
          },
          body: JSON.stringify(s.body),
          signal: AbortSignal.timeout(20_000),
        });
        const body = (await res.json()) as Json;
        if (res.status === 201 || res.status === 200) {
          if (res.status === 200) duplicates++;
          acked.set(`${s.agent}/${s.body.idempotency_key}`, {
            message_id: body.message_id,
            channel: body.channel,
            channel_sequence_id: body.channel_sequence_id,
          });
          return;
        }
        last = `${res.status} ${JSON.stringify(body)}`;
        if (res.status < 500) {
          problems.push(`${s.agent}/${s.body.idempotency_key}: refused ${last}`);
          return;
        }
      } catch (err) {
        last = String(err);
      }
      failover++;
      await sleep(5);
    }
  };

  const senders = Array.from({ length: SENDERS }, async (_, n) => {
    while (running) {
      const agent = pick(AGENTS);
      const s: Sent = {
        agent,
        body: {
          idempotency_key: randomUUID(),
          to: pick(routes[agent]!),
          kind: 'status',
          payload: { sender: n, text: 'x'.repeat(Math.floor(Math.random() * 400)) },
        },
      };
      sentTotal++;
      await sendUntilAcked(n % replicas.count, s);
    }
  });

  // one replica down at a time, every few seconds; it comes back on a new port
  const killed: number[] = [];
  try {
    for (let k = 0; k < KILLS; k++) {
      await sleep(1000 + Math.random() * 2000);
      const victim = pick(replicas.liveSlots());
      const pid = replicas.process(victim)!.pid;
      await replicas.kill(victim);
      killed.push(pid);
      await sleep(Math.random() * 500);
      await replicas.start(victim);
    }
  } finally {
    running = false;
    await Promise.all(senders);
  }
  expect(problems, problems.slice(0, 10).join('\n')).toEqual([]);
  // no replica died on its own: the three now running are the last ones started
  expect(replicas.running(), replicas.logs()).toHaveLength(replicas.count);

  const { byChannel, problems: gaps } = await replayEveryChannel(replicas.urlOf(0));
  expect(gaps, gaps.slice(0, 10).join('\n')).toEqual([]);
  const stored = new Map<string, Json[]>();
  for (const msgs of byChannel.values())
    for (const m of msgs) {
      if (m.sender === 'adapter') continue; // its alerts (evictions: nobody polls here)
      const id = `${m.sender}/${m.idempotency_key}`;
      stored.set(id, [...(stored.get(id) ?? []), m]);
    }
  const wrong: string[] = [];
  for (const [id, a] of acked) {
    const copies = stored.get(id) ?? [];
    if (copies.length !== 1) wrong.push(`${id}: acknowledged, stored ${copies.length} times`);
    else if (
      copies[0].message_id !== a.message_id ||
      copies[0].channel !== a.channel ||
      copies[0].channel_sequence_id !== a.channel_sequence_id
    )
      wrong.push(
        `${id}: acknowledged as ${JSON.stringify(a)}, stored as ${copies[0].message_id} ${copies[0].channel}#${copies[0].channel_sequence_id}`,
      );
  }
  for (const id of stored.keys())
    if (!acked.has(id)) wrong.push(`${id}: stored, never acknowledged`);
  expect(wrong, wrong.slice(0, 10).join('\n')).toEqual([]);
  expect(acked.size).toBe(sentTotal);

  // the fan-out was committed with each message: a sample's recipients, by message status
  const sample = [...stored.values()].map((c) => c[0]).sort(() => Math.random() - 0.5);
  const fanOut: string[] = [];
  for (const m of sample.slice(0, 200)) {
    const r = await call(replicas.urlOf(1), 'GET', `/v1/messages/${m.message_id}`, {
      agent: m.sender,
    });
    const want = m.channel.startsWith('@')
      ? [m.channel.slice(1)]
      : CHANNELS[m.channel]!.filter((a) => a !== m.sender);
    const got = ((r.body.recipients ?? []) as Json[]).map((x) => x.agent as string);
    if (r.status !== 200 || JSON.stringify([...got].sort()) !== JSON.stringify([...want].sort()))
      fanOut.push(`${m.message_id} in ${m.channel}: ${r.status} recipients ${got.join(',')}`);
  }
  expect(fanOut, fanOut.slice(0, 10).join('\n')).toEqual([]);
  console.log(
    `replica kills: ${killed.length} kills (pids ${killed.join(' ')}), ${sentTotal} messages, ` +
      `${failover} failed attempts sent again, ${duplicates} answered as duplicates`,
  );
});
