/**
 * Three adapters on one PostgreSQL database: the same idempotency key sent to two replicas at
 * the same moment (and, every third round, to all three) is stored once. One answer is 201,
 * every other is 200 with `duplicate: true` and the same assignment; the channel holds the key
 * once and its sequence runs 1..N with no number burned by the loser of the race.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Json } from '../helpers/http.js';
import {
  envelope,
  post,
  type ReplicaSet,
  replayEveryChannel,
  startReplicaSet,
} from '../helpers/replicas.js';

const ROUNDS = Number(process.env.AGW_TEST_REPLICA_ROUNDS ?? 100);
const ROUTES = ['product', 'all-agents', '@qa', '@engineering'];

let set: ReplicaSet;
beforeAll(async () => {
  set = await startReplicaSet();
}, 60_000);
afterAll(() => set?.cleanup(), 30_000);

it(`stores a key sent to several replicas at once exactly once (${ROUNDS} rounds)`, {
  timeout: 120_000,
}, async () => {
  const { replicas } = set;
  const urls = [0, 1, 2].map((i) => replicas.urlOf(i));
  // one request to each first, so that every round's requests go out on open connections
  await Promise.all(urls.map((u) => post(u, 'pm', envelope('@qa'))));

  const won = new Map<string, Json>(); // key → the 201's assignment
  const problems: string[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const targets = round % 3 === 2 ? [0, 1, 2] : [round % 3, (round + 1) % 3];
    const body = envelope(ROUTES[round % ROUTES.length]!, { round });
    const answers = await Promise.all(targets.map((i) => post(urls[i]!, 'pm', body)));
    const statuses = answers.map((a) => a.status).sort();
    const expected = [...targets.slice(1).map(() => 200), 201];
    const where = `round ${round}, key ${body.idempotency_key}, replicas ${targets.join('+')}`;
    if (JSON.stringify(statuses) !== JSON.stringify(expected)) {
      problems.push(
        `${where}: answered ${answers.map((a) => `${a.status} ${JSON.stringify(a.body)}`).join(' | ')}`,
      );
      continue;
    }
    const first = answers.find((a) => a.status === 201)!.body;
    won.set(body.idempotency_key, first);
    for (const a of answers.filter((x) => x.status === 200)) {
      const same = ['message_id', 'channel', 'channel_sequence_id', 'thread_id', 'hop'].every(
        (k) => a.body[k] === first[k],
      );
      if (!same || a.body.duplicate !== true)
        problems.push(
          `${where}: the 201 was ${JSON.stringify(first)}, the 200 ${JSON.stringify(a.body)}`,
        );
    }
  }
  expect(problems, problems.slice(0, 10).join('\n')).toEqual([]);

  // what the database holds: each key once, at its 201's assignment; every sequence 1..N
  const { byChannel, problems: gaps } = await replayEveryChannel(urls[0]!);
  expect(gaps).toEqual([]);
  const stored = new Map<string, Json[]>();
  for (const msgs of byChannel.values())
    for (const m of msgs)
      if (m.sender === 'pm')
        stored.set(m.idempotency_key, [...(stored.get(m.idempotency_key) ?? []), m]);
  for (const [key, ack] of won) {
    const copies = stored.get(key) ?? [];
    expect(copies.length, `key ${key} stored ${copies.length} times`).toBe(1);
    expect(copies[0]).toMatchObject({
      message_id: ack.message_id,
      channel: ack.channel,
      channel_sequence_id: ack.channel_sequence_id,
    });
  }
  expect(won.size).toBe(ROUNDS);
});
