/**
 * Each sweep runs once across replicas: three adapters on one database all watch the same
 * expired leases and the same alert windows, and each expiry must become exactly one dead
 * letter, each alert window exactly one alert, not one per replica.
 *
 * Leases are 500 ms with no retry (--max-retries 0), so an expired lease is dead-lettered at
 * once. The first dead letter of qa and of research raises an alert at once (count 1); the
 * rest, dead-lettered within that alert's 30 s window, make one more alert when the window
 * ends, which all three replicas' timers see fall due at the same moment. So the test lasts a
 * window, ~35 s.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, type Json } from '../helpers/http.js';
import {
  alerts,
  deadLetters,
  envelope,
  post,
  type ReplicaSet,
  sleep,
  startReplicaSet,
} from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

// at most one alert per recipient and reason every 30 s (docs/design/delivery.md, "Alerts")
const WINDOW_MS = 30_000;
const PER_RECIPIENT = 8; // ≤ 20: every message id fits in the alerts' lists
const RECIPIENTS = ['qa', 'research'];

let set: ReplicaSet;
beforeAll(async () => {
  set = await startReplicaSet(['--lease-ms', '500', '--max-retries', '0']);
}, 60_000);
afterAll(() => set?.cleanup(), 30_000);

it('makes one dead letter per expired lease and one alert per window across replicas', {
  timeout: 180_000,
}, async () => {
  const { replicas } = set;
  const url = (i: number) => replicas.urlOf(i % replicas.count);
  const sent = new Map<string, string>(); // message_id → recipient
  const handed = new Map<number, number>(); // delivery_id → times handed out
  let polls = 0;

  /** Sends n messages to @recipient through the replicas in turn. */
  const send = async (recipient: string, n: number) => {
    for (let i = 0; i < n; i++) {
      const r = await post(url(i), 'pm', envelope(`@${recipient}`, { i }));
      expect(r.status).toBe(201);
      sent.set(r.body.message_id, recipient);
    }
  };
  /** Polls (never acks) through the replicas in turn until `count` deliveries were handed out. */
  const takeAll = async (recipient: string, count: number) => {
    let got = 0;
    while (got < count) {
      const r = await call(url(polls++), 'GET', '/v1/inbox?wait=5&max=100', { agent: recipient });
      expect(r.status).toBe(200);
      for (const d of r.body.deliveries as Json[]) {
        handed.set(d.delivery_id, (handed.get(d.delivery_id) ?? 0) + 1);
        got++;
      }
    }
  };
  const deadOf = async () =>
    (await deadLetters(url(0))).filter((d) => sent.has(d.message?.message_id));

  // one message each, expired: its dead letter raises the first alert of the window at once
  for (const r of RECIPIENTS) await send(r, 1);
  for (const r of RECIPIENTS) await takeAll(r, 1);
  await until(async () => (await deadOf()).length >= 2, 'the first two dead letters');
  await until(async () => (await alerts(url(1))).length >= 2, 'the first alerts');

  // the rest, within the window: counted, and sent as one alert per recipient when it ends
  for (const r of RECIPIENTS) await send(r, PER_RECIPIENT - 1);
  for (const r of RECIPIENTS) await takeAll(r, PER_RECIPIENT - 1);
  const total = RECIPIENTS.length * PER_RECIPIENT;
  await until(
    async () => (await deadOf()).length >= total,
    'every lease expired and dead-lettered',
  );
  const counted = async (r: string) =>
    (await alerts(url(2)))
      .filter((a) => a.payload.recipient === r)
      .reduce((n, a) => n + (a.payload.count as number), 0);
  for (const r of RECIPIENTS)
    await until(
      async () => (await counted(r)) >= PER_RECIPIENT,
      `the window ends and the aggregated alert about ${r} goes out`,
      { ms: WINDOW_MS + 60_000, everyMs: 500 },
    );
  // a second replica doing the same sweep would commit within moments of the first: look again
  await sleep(3000);

  const dead = await deadOf();
  const perMessage = new Map<string, Json[]>();
  for (const d of dead)
    perMessage.set(d.message.message_id, [...(perMessage.get(d.message.message_id) ?? []), d]);
  const twice = [...perMessage.entries()].filter(([, ds]) => ds.length > 1);
  expect(twice.map(([id, ds]) => `${id}: ${ds.map((d) => d.id).join(', ')}`)).toEqual([]);
  expect(dead.length).toBe(total);
  for (const d of dead) {
    expect(d, `dead letter ${d.id}`).toMatchObject({
      reason: 'lease_expired',
      attempts: 1,
      recipient: sent.get(d.message.message_id),
    });
  }
  expect([...handed.values()].filter((n) => n > 1)).toEqual([]);
  expect(handed.size).toBe(total);

  const all = await alerts(url(0));
  console.log(
    `sweeps: ${dead.length} dead letters; alerts ${all.map((a) => `${a.payload.recipient} ${a.payload.count} at ${a.timestamp_iso8601}`).join(', ')}`,
  );
  for (const r of RECIPIENTS) {
    const mine = all.filter((a) => a.payload.recipient === r);
    const describe = JSON.stringify(
      mine.map((a) => ({
        at: a.timestamp_iso8601,
        kind: a.kind,
        reason: a.payload.reason,
        count: a.payload.count,
      })),
    );
    for (const a of mine)
      expect(a, describe).toMatchObject({
        kind: 'alert/dead-letter',
        payload: { reason: 'lease_expired' },
      });
    // every dead letter counted once, in one alert of one window
    expect(
      mine.reduce((n, a) => n + a.payload.count, 0),
      describe,
    ).toBe(PER_RECIPIENT);
    const listed = mine.flatMap((a) => a.payload.message_ids as string[]).sort();
    const expected = [...sent.entries()]
      .filter(([, to]) => to === r)
      .map(([id]) => id)
      .sort();
    expect(listed, describe).toEqual(expected);
    // at most one alert per window: the first at once, the next when its window ended
    // (the stamps are the adapters' own clocks, on this one machine)
    const at = mine.map((a) => Date.parse(a.timestamp_iso8601)).sort((x, y) => x - y);
    expect(mine.length, describe).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < at.length; i++)
      expect(at[i]! - at[i - 1]!, describe).toBeGreaterThanOrEqual(WINDOW_MS - 1000);
  }
});
