/** The storage conformance suite: Leases, acks, nacks and retries, dead letters, strict order, what an agent can say of a delivery. */
import { describe, expect, it } from 'vitest';
import type { Assignment } from '../../../src/protocol/envelope.js';
import type { Delivery } from '../../../src/protocol/wire.js';
import type { OpResults } from '../../../src/store/store.js';
import {
  DAY,
  type DeadLetter,
  draft,
  errorCode,
  idsOf,
  iso,
  type Open,
  subjectOf,
  T0,
} from './harness.js';

export function deliveriesConformance(name: string, open: Open): void {
  describe(`${name}: leases`, () => {
    it('hands out critical channels first, then by oldest delivery, in sequence order inside a channel, at most max at a time', async () => {
      const h = await open({}, ['product', 'ops']);
      const [p1] = await h.send(draft({ channel: 'product', to: ['qa'], at: T0 }));
      const [d1] = await h.send(draft({ channel: '@qa', at: T0 + 1 }));
      const [o1] = await h.send(draft({ channel: 'ops', to: ['qa'], at: T0 + 2 }));
      const [p2] = await h.send(draft({ channel: 'product', to: ['qa'], at: T0 + 3 }));
      const [o2] = await h.send(
        draft({ channel: 'ops', to: ['qa'], priority: 'critical', at: T0 + 4 }),
      );
      // ops holds a critical: it goes first, but o2 does not overtake o1 of its own channel;
      // then product (its oldest is older than @qa's), whole, then @qa
      const ids = (as: (Assignment | undefined)[]) => as.map((a) => a!.message_id);
      expect(idsOf(await h.lease('qa', 4, T0 + 5))).toEqual(ids([o1, o2, p1, p2]));
      expect(idsOf(await h.lease('qa', 4, T0 + 5))).toEqual(ids([d1]));
      expect(await h.lease('qa', 4, T0 + 5)).toEqual([]);
    });

    it('leases until now + leaseMs and hands a leased delivery out again only after it expired', async () => {
      const h = await open({ leaseMs: 10_000, retryBaseMs: 1000 });
      const [m] = await h.send(draft({ channel: '@qa', at: T0 }));
      const t = T0 + 100;
      const { results, effects } = await h.run([{ op: 'lease', agent: 'qa', max: 10, now: t }]);
      const [first] = (results[0] as { ok: string[] }).ok.map((j) => JSON.parse(j) as Delivery);
      expect(first).toMatchObject({
        attempt: 1,
        lease_expires_at: iso(t + 10_000),
        message: { message_id: m!.message_id, channel: '@qa', channel_sequence_id: 1 },
      });
      expect(effects.timingChanged).toBe(true);
      expect(await h.store.nextDue(t)).toBe(t + 10_000);
      await h.sweep(t + 9_999);
      expect(await h.lease('qa', 10, t + 9_999)).toEqual([]);
      await h.sweep(t + 10_000); // expired: a failed attempt, ready after 1000 × 2^0
      expect(await h.lease('qa', 10, t + 10_999)).toEqual([]);
      const [second] = await h.lease('qa', 10, t + 11_000);
      expect(second).toMatchObject({
        delivery_id: first!.delivery_id,
        attempt: 2,
        lease_expires_at: iso(t + 21_000),
      });
    });
  });

  describe(`${name}: acks`, () => {
    it('does not hand out an acked delivery again, and a repeated ack is harmless', async () => {
      const h = await open({ leaseMs: 10_000, retryBaseMs: 1000 });
      await h.send(draft({ channel: '@qa' }), draft({ channel: '@qa' }), draft({ channel: '@qa' }));
      const [a, b, c] = await h.lease('qa', 10, T0);
      const ids = [a!.delivery_id, b!.delivery_id];
      expect(await h.ack('qa', ids)).toEqual({ acked: ids, dead: [], unknown: [] });
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 0 });
      expect(await h.ack('qa', [a!.delivery_id])).toEqual({
        acked: [a!.delivery_id],
        dead: [],
        unknown: [],
      });
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 0 });
      await h.sweep(T0 + 10_000); // every lease expired; only the unacked one comes back
      const again = await h.lease('qa', 10, T0 + 11_000);
      expect(again.map((d) => [d.delivery_id, d.attempt])).toEqual([[c!.delivery_id, 2]]);
    });

    it("answers another agent's delivery as unknown in an ack or nack, and changes nothing of it", async () => {
      // a 403 for it once told any agent which ids other agents held
      const h = await open();
      await h.send(draft({ channel: '@qa' }), draft({ channel: '@pm' }));
      const [x] = await h.lease('qa', 10, T0);
      const [y] = await h.lease('pm', 10, T0);
      const { results } = await h.run([
        { op: 'ack', agent: 'qa', ids: [x!.delivery_id, y!.delivery_id] },
        { op: 'ack', agent: 'qa', ids: [y!.delivery_id, 987_654] },
      ]);
      expect(results[0]).toEqual({
        ok: { acked: [x!.delivery_id], dead: [], unknown: [y!.delivery_id] },
      });
      // another agent's id and an id that names no delivery: the same answer
      expect(results[1]).toEqual({
        ok: { acked: [], dead: [], unknown: [y!.delivery_id, 987_654] },
      });
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
      expect(
        await h.one({ op: 'nack', agent: 'qa', ids: [y!.delivery_id], now: T0, retry: false }),
      ).toEqual({ nacked: [], ignored: [], unknown: [y!.delivery_id] });
      // pm's delivery is as it was: counted, still leased to pm (only a leased one extends),
      // not dead-lettered, and pm's own ack settles it
      expect(await h.depth('pm')).toEqual({ all: 1, critical: 0 });
      expect(await h.deadLetters()).toEqual([]);
      expect(
        await h.one({ op: 'extend', agent: 'pm', ids: [y!.delivery_id], extendMs: 1000, now: T0 }),
      ).toHaveLength(1);
      expect(await h.ack('pm', [y!.delivery_id])).toEqual({
        acked: [y!.delivery_id],
        dead: [],
        unknown: [],
      });
      expect(await h.depth('pm')).toEqual({ all: 0, critical: 0 });
    });

    it('acts once on a delivery id given twice in one ack or nack: the depth falls by one, one dead letter', async () => {
      const h = await open();
      await h.send(draft({ channel: '@qa' }), draft({ channel: '@qa' }), draft({ channel: '@qa' }));
      const [a, b, c] = (await h.lease('qa', 10, T0)).map((d) => d.delivery_id);
      const acked = h.store.stats.acked;
      // both answered acked (as a repeated ack of an acked one is), the delivery acked once
      expect(await h.ack('qa', [a!, a!])).toEqual({ acked: [a, a], dead: [], unknown: [] });
      expect(h.store.stats.acked).toBe(acked + 1);
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 0 });
      // the first takes the lease: one dead letter; the second finds it no longer leased
      expect(
        await h.one({ op: 'nack', agent: 'qa', ids: [b!, b!], now: T0, retry: false }),
      ).toEqual({ nacked: [b], ignored: [b], unknown: [] });
      expect((await h.deadLetters()).map((d) => d.reason)).toEqual(['rejected']);
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 0 });
      // a retried nack: one failed attempt, the delivery waiting for its retry
      expect(await h.nack('qa', [c!, c!], T0)).toEqual({ nacked: [c], ignored: [c], unknown: [] });
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 0 });
      expect(await h.deadLetters()).toHaveLength(1);
      const [again] = await h.lease('qa', 10, T0 + 60_000);
      expect(again).toMatchObject({ delivery_id: c, attempt: 2 });
    });

    it('reports unknown delivery ids, and an ack of a dead-lettered delivery as dead', async () => {
      const h = await open({ maxRetries: 0 });
      await h.send(draft({ channel: '@qa' }), draft({ channel: '@qa' }));
      const [m1, m2] = await h.lease('qa', 10, T0);
      await h.nack('qa', [m1!.delivery_id], T0 + 1); // dead at once
      const unknown = m2!.delivery_id + 1000;
      expect(await h.ack('qa', [m1!.delivery_id, m2!.delivery_id, unknown])).toEqual({
        acked: [m2!.delivery_id],
        dead: [m1!.delivery_id],
        unknown: [unknown],
      });
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
      const dead = await h.deadLetters();
      expect(dead.map((d) => [d.reason, d.message.message_id])).toEqual([
        ['nacked', m1!.message.message_id],
      ]);
    });
  });

  describe(`${name}: nacks and retries`, () => {
    it('makes a nacked delivery ready again after base × 2^(attempt−1) × jitter, then dead-letters it as nacked with an alert', async () => {
      const h = await open({ leaseMs: 60_000, retryBaseMs: 1000, maxRetries: 2 });
      const [m] = await h.send(draft({ channel: '@qa', at: T0 }));
      let now = T0;
      let deliveryId: number | undefined;
      for (const attempt of [1, 2]) {
        const [d] = await h.lease('qa', 10, now);
        expect(d).toMatchObject({ attempt, message: { message_id: m!.message_id } });
        deliveryId ??= d!.delivery_id;
        expect(d!.delivery_id).toBe(deliveryId);
        now += 50;
        const { results, effects } = await h.run([
          { op: 'nack', agent: 'qa', ids: [deliveryId], now },
        ]);
        expect(results[0]).toEqual({ ok: { nacked: [deliveryId], ignored: [], unknown: [] } });
        expect(effects.timingChanged).toBe(true);
        const wait = 1000 * 2 ** (attempt - 1); // jitter 0.75 + 0.5 × 0.5 = 1
        expect(await h.store.nextDue(now)).toBe(now + wait);
        expect(await h.lease('qa', 10, now + wait - 1)).toEqual([]);
        now += wait;
      }
      const [third] = await h.lease('qa', 10, now);
      expect(third).toMatchObject({ delivery_id: deliveryId, attempt: 3 });
      now += 50;
      const { results, effects } = await h.run([
        { op: 'nack', agent: 'qa', ids: [deliveryId!], now },
      ]);
      expect(results[0]).toEqual({ ok: { nacked: [deliveryId], ignored: [], unknown: [] } });
      expect(effects.alerts).toEqual([
        {
          kind: 'alert/dead-letter',
          payload: {
            reason: 'nacked',
            recipient: 'qa',
            count: 1,
            message_ids: [m!.message_id],
            attempts: 3,
          },
        },
      ]);
      expect(await h.deadLetters()).toMatchObject([
        {
          reason: 'nacked',
          attempts: 3,
          recipient: 'qa',
          dead_lettered_at: iso(now),
          message: { message_id: m!.message_id },
        },
      ]);
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
      expect(await h.lease('qa', 10, now + DAY)).toEqual([]);
    });

    it('turns an expired lease into a failed attempt at the sweep, with the same backoff, then dead-letters it as lease_expired with an alert', async () => {
      const h = await open({ leaseMs: 10_000, retryBaseMs: 1000, maxRetries: 1 });
      const [m] = await h.send(draft({ channel: '@qa', at: T0 }));
      const [d1] = await h.lease('qa', 10, T0);
      expect(await h.sweep(T0 + 9_999)).toMatchObject({ effects: { alerts: [] } });
      expect(await h.lease('qa', 10, T0 + 9_999)).toEqual([]); // still leased
      await h.sweep(T0 + 10_000);
      expect(await h.store.nextDue(T0 + 10_000)).toBe(T0 + 11_000);
      expect(await h.lease('qa', 10, T0 + 10_999)).toEqual([]);
      const [d2] = await h.lease('qa', 10, T0 + 11_000);
      expect(d2).toMatchObject({ delivery_id: d1!.delivery_id, attempt: 2 });
      // 1 + maxRetries attempts made: the next failure is the last
      expect(await h.sweep(T0 + 20_999)).toMatchObject({ effects: { alerts: [] } });
      const { effects } = await h.sweep(T0 + 21_000);
      expect(effects.alerts).toEqual([
        {
          kind: 'alert/dead-letter',
          payload: {
            reason: 'lease_expired',
            recipient: 'qa',
            count: 1,
            message_ids: [m!.message_id],
            attempts: 2,
          },
        },
      ]);
      expect(await h.deadLetters()).toMatchObject([
        { reason: 'lease_expired', attempts: 2, recipient: 'qa' },
      ]);
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
      expect(await h.lease('qa', 10, T0 + DAY)).toEqual([]);
    });

    it('ignores a nack of a delivery that is not leased, and reports unknown ids', async () => {
      const h = await open({ leaseMs: 10_000, retryBaseMs: 1000 });
      await h.send(draft({ channel: '@qa' }), draft({ channel: '@qa' }));
      const [waiting, acked] = await h.lease('qa', 10, T0);
      await h.ack('qa', [acked!.delivery_id]);
      await h.sweep(T0 + 10_000); // `waiting` now waits for its retry at T0 + 11,000
      const unknown = acked!.delivery_id + 1000;
      const ids = [waiting!.delivery_id, acked!.delivery_id, unknown];
      expect(await h.nack('qa', ids, T0 + 10_500)).toEqual({
        nacked: [],
        ignored: [waiting!.delivery_id, acked!.delivery_id],
        unknown: [unknown],
      });
      // the ignored nack moved nothing: the retry is ready when it was, as attempt 2
      const [again] = await h.lease('qa', 10, T0 + 11_000);
      expect(again).toMatchObject({ delivery_id: waiting!.delivery_id, attempt: 2 });
    });
  });

  describe(`${name}: dead letters`, () => {
    it('pages dead letters oldest first, each with its reason, attempts, recipient and message', async () => {
      const h = await open({ capacity: 2, maxRetries: 0 });
      const [m1] = await h.send(draft({ channel: '@qa', at: T0 }));
      await h.send(draft({ channel: '@qa', at: T0 }));
      const [l1] = await h.lease('qa', 10, T0); // both leased
      await h.nack('qa', [l1!.delivery_id], T0 + 1); // nacked, 1 attempt
      await h.send(
        draft({ channel: '@pm', priority: 'critical', at: T0 + 2 }),
        draft({ channel: '@pm', priority: 'critical', at: T0 + 2 }),
      );
      const [m3] = await h.send(draft({ channel: '@pm', at: T0 + 2 })); // queue_full
      const [m4] = await h.send(draft({ channel: '@qa', at: T0 + 3 }));
      await h.send(draft({ channel: '@qa', at: T0 + 4 })); // evicts m4 (the other is leased)
      const expected = [
        ['nacked', 1, 'qa', m1!.message_id, iso(T0 + 1)],
        ['queue_full', 0, 'pm', m3!.message_id, iso(T0 + 2)],
        ['evicted', 0, 'qa', m4!.message_id, iso(T0 + 4)],
      ];
      const row = (d: DeadLetter) => [
        d.reason,
        d.attempts,
        d.recipient,
        d.message.message_id,
        d.dead_lettered_at,
      ];
      const page1 = await h.deadLetters(0, 2);
      expect(page1.map(row)).toEqual(expected.slice(0, 2));
      const page2 = await h.deadLetters(page1[1]!.id, 2);
      expect(page2.map(row)).toEqual(expected.slice(2));
      expect(await h.deadLetters(page2[0]!.id, 2)).toEqual([]);
      const all = await h.deadLetters();
      expect(all.map((d) => d.id)).toEqual([...page1, ...page2].map((d) => d.id));
      expect(all.every((d, i) => i === 0 || d.id > all[i - 1]!.id)).toBe(true);
      expect(all.map((d) => d.replay_delivery_id)).toEqual([null, null, null]);
      expect(all[1]!.message).toMatchObject({ channel: '@pm', sender: 'pm', kind: 'status' });
    });

    it('replays a dead letter once as a fresh delivery; a second replay returns the same delivery; an unknown id answers undefined', async () => {
      const h = await open({ maxRetries: 0 });
      const [m] = await h.send(draft({ channel: '@qa', priority: 'critical' }));
      const [old] = await h.lease('qa', 10, T0);
      await h.nack('qa', [old!.delivery_id], T0 + 1);
      const [dl] = await h.deadLetters();
      const first = await h.run([{ op: 'replay_dead_letter', id: dl!.id, now: T0 + 100 }]);
      const replay = (first.results[0] as { ok: OpResults['replay_dead_letter'] }).ok;
      expect(replay).toEqual({ delivery_id: expect.any(Number), replayed: true });
      expect(replay!.delivery_id).not.toBe(old!.delivery_id);
      expect([...first.effects.woken]).toEqual(['qa']);
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 1 });
      const second = await h.run([{ op: 'replay_dead_letter', id: dl!.id, now: T0 + 200 }]);
      expect(second.results[0]).toEqual({
        ok: { delivery_id: replay!.delivery_id, replayed: false },
      });
      expect(second.effects.woken.size).toBe(0);
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 1 });
      // replayed: it has left the dead letters (its journey keeps the redriven event)
      expect(await h.deadLetters()).toEqual([]);
      const leased = await h.lease('qa', 10, T0 + 300);
      expect(leased).toMatchObject([
        { delivery_id: replay!.delivery_id, attempt: 1, message: { message_id: m!.message_id } },
      ]);
      expect(
        await h.one({ op: 'replay_dead_letter', id: dl!.id + 1000, now: T0 + 400 }),
      ).toBeUndefined();
    });
  });

  describe(`${name}: strict order inside a channel`, () => {
    /** Three messages to qa in @qa and one in product, at T0. */
    async function lanes() {
      const h = await open({ leaseMs: 1000, retryBaseMs: 100 }, ['product']);
      const [a, b, c] = await h.send(
        draft({ channel: '@qa', at: T0 }),
        draft({ channel: '@qa', at: T0 }),
        draft({ channel: '@qa', at: T0 }),
      );
      const [p] = await h.send(draft({ channel: 'product', to: ['qa'], at: T0 }));
      return { h, a: a!, b: b!, c: c!, p: p! };
    }

    it('after a nack, nothing later in the channel is handed out before the nacked one', async () => {
      const { h, a, b, c, p } = await lanes();
      const first = await h.lease('qa', 1, T0);
      expect(idsOf(first)).toEqual([a.message_id]);
      await h.nack('qa', [first[0]!.delivery_id], T0 + 1); // back at the head, after 100 ms
      // while a waits for its retry, b and c wait behind it; the other channel goes on
      expect(idsOf(await h.lease('qa', 10, T0 + 2))).toEqual([p.message_id]);
      expect(await h.lease('qa', 10, T0 + 50)).toEqual([]);
      // its retry is ready: a first, then the rest of the channel in order
      const again = await h.lease('qa', 10, T0 + 101);
      expect(idsOf(again)).toEqual([a.message_id, b.message_id, c.message_id]);
      expect(again[0]!.attempt).toBe(2);
    });

    it('after an expired lease, the expired one comes back first', async () => {
      const { h, a, b, c } = await lanes();
      const first = await h.lease('qa', 1, T0);
      expect(idsOf(first)).toEqual([a.message_id]);
      // leased: the channel is held, even though b and c are ready
      expect(idsOf(await h.lease('qa', 10, T0 + 10)).includes(b.message_id)).toBe(false);
      await h.sweep(T0 + 1000); // the lease ran out: a failed attempt, retried after 100 ms
      expect(await h.lease('qa', 10, T0 + 1001)).toEqual([]);
      const back = await h.lease('qa', 10, T0 + 1100);
      expect(idsOf(back)).toEqual([a.message_id, b.message_id, c.message_id]);
    });

    it('one poll may take several consecutive messages; a later poll waits for their acks', async () => {
      const { h, a, b, c } = await lanes();
      const got = await h.lease('qa', 2, T0);
      expect(idsOf(got)).toEqual([a.message_id, b.message_id]);
      expect(idsOf(await h.lease('qa', 10, T0 + 1)).includes(c.message_id)).toBe(false);
      await h.ack('qa', [got[0]!.delivery_id]);
      expect(idsOf(await h.lease('qa', 10, T0 + 2)).includes(c.message_id)).toBe(false); // b
      await h.ack('qa', [got[1]!.delivery_id]);
      expect(idsOf(await h.lease('qa', 10, T0 + 3))).toEqual([c.message_id]);
    });

    it('a dead letter releases the channel', async () => {
      const { h, a, b } = await lanes();
      const first = await h.lease('qa', 1, T0);
      await h.one({ op: 'nack', agent: 'qa', ids: [first[0]!.delivery_id], now: T0, retry: false });
      const next = await h.lease('qa', 1, T0 + 1);
      expect(idsOf(next)).toEqual([b.message_id]);
      expect((await h.deadLetters()).map((d) => d.message.message_id)).toEqual([a.message_id]);
    });
  });

  describe(`${name}: what an agent can say of a delivery`, () => {
    it('a nack with retry false dead-letters at once as rejected, keeps the reason and alerts', async () => {
      const h = await open({ maxRetries: 3 });
      const [m] = await h.send(draft({ channel: '@qa', at: T0 }));
      const [d] = await h.lease('qa', 1, T0);
      const { effects } = await h.run([
        {
          op: 'nack',
          agent: 'qa',
          ids: [d!.delivery_id],
          now: T0 + 1,
          retry: false,
          reason: 'cannot parse the task',
        },
      ]);
      const [dead] = await h.deadLetters();
      expect(dead).toMatchObject({
        reason: 'rejected',
        note: 'cannot parse the task',
        attempts: 1,
        recipient: 'qa',
        message: { message_id: m!.message_id },
      });
      expect(effects.alerts.map((a) => [a.kind, a.payload.reason, subjectOf(a)])).toEqual([
        ['alert/dead-letter', 'rejected', 'qa'],
      ]);
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
    });

    it('an extended lease is not handed out again past its first expiry; only leased ones extend', async () => {
      const h = await open({ leaseMs: 1000 });
      await h.send(draft({ channel: '@qa', at: T0 }), draft({ channel: '@qa', at: T0 }));
      const [d] = await h.lease('qa', 1, T0);
      const ext = await h.one({
        op: 'extend',
        agent: 'qa',
        ids: [d!.delivery_id],
        extendMs: 60_000,
        now: T0 + 500,
      });
      expect(ext).toEqual([{ delivery_id: d!.delivery_id, lease_expires_at: iso(T0 + 60_500) }]);
      await h.sweep(T0 + 1000); // the first expiry passes: nothing happens
      expect(await h.lease('qa', 10, T0 + 1001)).toEqual([]);
      expect(await h.store.nextDue(T0 + 1001)).toBe(T0 + 60_500);
      // another agent's delivery is not_leased, as an unknown one is (L8), and stays as it was;
      // a delivery no longer leased: not_leased
      for (const ids of [[d!.delivery_id], [987_654]]) {
        expect(
          errorCode(await h.settle({ op: 'extend', agent: 'pm', ids, extendMs: 1, now: T0 })),
        ).toBe('not_leased');
      }
      expect(await h.store.nextDue(T0 + 1001)).toBe(T0 + 60_500);
      await h.ack('qa', [d!.delivery_id]);
      expect(
        errorCode(
          await h.settle({
            op: 'extend',
            agent: 'qa',
            ids: [d!.delivery_id],
            extendMs: 1,
            now: T0,
          }),
        ),
      ).toBe('not_leased');
    });

    it('tells a reader the state of its own delivery of each message of a replay page', async () => {
      const h = await open({ capacity: 1 }, ['product']);
      const team = ['qa', 'growth'];
      const [a, b, c] = await h.send(
        draft({ channel: 'product', to: team, at: T0 }),
        draft({ channel: 'product', to: team, at: T0 }), // evicts a for both (capacity 1)
        draft({ channel: 'product', sender: 'qa', to: ['growth'], at: T0 }), // qa's own
      );
      const [d] = await h.lease('qa', 1, T0);
      await h.ack('qa', [d!.delivery_id]);
      expect(await h.store.pageDeliveries('qa', 'product', 0, 10)).toEqual({
        [a!.message_id]: 'dead_letter',
        [b!.message_id]: 'acked',
      });
      // the same window as channelMessages: after and limit
      expect(await h.store.pageDeliveries('qa', 'product', 1, 1)).toEqual({
        [b!.message_id]: 'acked',
      });
      expect(Object.keys(await h.store.pageDeliveries('growth', 'product', 0, 10))).toEqual([
        a!.message_id,
        b!.message_id,
        c!.message_id,
      ]);
    });

    it("tells a message's sender each recipient's state as it moves", async () => {
      const h = await open({ maxRetries: 0 }, ['product']);
      const [m] = await h.send(draft({ channel: 'product', sender: 'pm', to: ['qa', 'growth'] }));
      const states = async () => {
        const s = await h.store.messageStatus(m!.message_id);
        expect(s?.sender).toBe('pm');
        expect(JSON.parse(s!.message).message_id).toBe(m!.message_id);
        return Object.fromEntries(
          s!.recipients.map((r) => [r.agent, [r.state, r.attempts, r.reason]]),
        );
      };
      expect(await states()).toEqual({ qa: ['pending', 0, null], growth: ['pending', 0, null] });
      const [q] = await h.lease('qa', 1, T0);
      const [g] = await h.lease('growth', 1, T0);
      expect(await states()).toEqual({ qa: ['leased', 1, null], growth: ['leased', 1, null] });
      await h.ack('qa', [q!.delivery_id]);
      await h.nack('growth', [g!.delivery_id], T0); // no retries: a dead letter
      expect(await states()).toEqual({
        qa: ['acked', 1, null],
        growth: ['dead_letter', 1, 'nacked'],
      });
      expect(await h.store.messageStatus('no-such-message')).toBeUndefined();
    });
  });
}
