/** The storage conformance suite: Alerts, retention, agents, integrity. */
import { describe, expect, it } from 'vitest';
import type { Assignment } from '../../../src/protocol/envelope.js';
import type { Delivery, Message } from '../../../src/protocol/wire.js';
import type { SentAlert } from '../../../src/store/store.js';
import {
  ALERTS_CHANNEL,
  ALERTS_TO,
  byRecipient,
  DAY,
  draft,
  idsOf,
  iso,
  type Open,
  outcomesOf,
  subjectOf,
  T0,
} from './harness.js';

export function operationsConformance(name: string, open: Open): void {
  describe(`${name}: alerts`, () => {
    it('aggregates a burst of 1,000 dead letters into one alert per recipient and reason per window, with the counts since', async () => {
      const h = await open({ capacity: 1, alertWindowMs: 30_000 });
      await h.send(
        draft({ channel: '@qa', priority: 'critical' }),
        draft({ channel: '@pm', priority: 'critical' }),
      );
      // both queues (capacity 1) hold a critical: every normal copy is dead-lettered at once
      const qa = Array.from({ length: 600 }, (_, i) => draft({ channel: '@qa', at: T0 + i }));
      const pm = Array.from({ length: 400 }, (_, i) => draft({ channel: '@pm', at: T0 + i }));
      const burst = await h.run([{ op: 'append', drafts: [...qa, ...pm] }]);
      const stored = outcomesOf(burst.results[0]).map((o) =>
        o.status === 201 ? o.assignment.message_id : 'not stored',
      );
      const qaIds = stored.slice(0, 600);
      const pmIds = stored.slice(600);
      const alert = (recipient: string, count: number, ids: string[]): SentAlert => ({
        kind: 'alert/dead-letter',
        payload: { reason: 'queue_full', recipient, count, message_ids: ids, attempts: 0 },
      });
      expect(byRecipient(burst.effects.alerts)).toEqual([
        alert('pm', 1, [pmIds[0]!]),
        alert('qa', 1, [qaIds[0]!]),
      ]);
      const written = await h.alerts();
      expect(written).toHaveLength(2);
      for (const m of written) {
        expect(m).toMatchObject({
          sender: 'adapter',
          channel: ALERTS_CHANNEL,
          to: ALERTS_CHANNEL,
          kind: 'alert/dead-letter',
          priority: 'critical',
        });
      }
      expect(byRecipient(written as unknown as SentAlert[]).map((m) => m.payload)).toEqual(
        byRecipient(burst.effects.alerts).map((a) => a.payload),
      );
      expect(burst.effects.woken.has(ALERTS_TO)).toBe(true);
      expect(await h.store.nextDue(T0 + 1000)).toBe(T0 + 30_000);

      const inside = await h.sweep(T0 + 29_999);
      expect(inside.effects.alerts).toEqual([]);
      expect(await h.alerts()).toHaveLength(2);

      const end = await h.sweep(T0 + 30_000);
      const sent = byRecipient(end.effects.alerts);
      expect(sent.map((a) => [a.kind, a.payload.reason, subjectOf(a), a.payload.count])).toEqual([
        ['alert/dead-letter', 'queue_full', 'pm', 399],
        ['alert/dead-letter', 'queue_full', 'qa', 599],
      ]);
      const [pmIdsListed, qaIdsListed] = sent.map((a) => a.payload.message_ids);
      for (const [listed, ids] of [
        [pmIdsListed!, pmIds.slice(1)],
        [qaIdsListed!, qaIds.slice(1)],
      ] as const) {
        expect(listed.length).toBe(20);
        expect(new Set(listed).size).toBe(20);
        expect(listed.every((id) => ids.includes(id))).toBe(true);
      }
      const after = await h.alerts();
      expect(after).toHaveLength(4);
      expect(byRecipient(after.slice(2) as unknown as SentAlert[]).map((m) => m.payload)).toEqual(
        sent.map((a) => a.payload),
      );
      expect(await h.store.nextDue(T0 + 30_000)).toBeUndefined();
      expect((await h.sweep(T0 + 90_000)).effects.alerts).toEqual([]); // nothing more to say
      expect(await h.alerts()).toHaveLength(4);
      expect(await h.deadLetters()).toHaveLength(1000);
      expect(h.store.stats.deadLetters.queue_full).toBe(1000);
      expect(h.store.stats.alerts).toBe(4);
    });
  });

  describe(`${name}: retention`, () => {
    it('prunes old messages with their deliveries and dead letters, within the limit, keeping kept kinds and messages still awaited', async () => {
      const h = await open({ maxRetries: 0 }, ['product']);
      const leaseOne = async (at: number) => (await h.lease('qa', 1, at))[0]!;
      const aDraft = draft({ channel: '@qa', at: T0 });
      const [a] = await h.send(aDraft); // acked: goes
      const la = await leaseOne(T0);
      await h.ack('qa', [la.delivery_id]);
      const [b] = await h.send(draft({ channel: '@qa', kind: 'task/request', at: T0 + 1 }));
      await h.ack('qa', [(await leaseOne(T0 + 1)).delivery_id]); // a kept kind: stays
      const [c] = await h.send(draft({ channel: 'product', to: ['qa', 'pm'], at: T0 + 2 }));
      await h.ack('qa', [(await leaseOne(T0 + 2)).delivery_id]); // pm's copy pending: stays
      const [d] = await h.send(draft({ channel: '@qa', at: T0 + 3 }));
      await h.nack('qa', [(await leaseOne(T0 + 3)).delivery_id], T0 + 3); // dead-lettered: goes
      const [deadD] = await h.deadLetters();
      const [e] = await h.send(draft({ channel: '@qa', at: T0 + 4 }));
      await leaseOne(T0 + 4); // leased, never acked: stays
      const [f] = await h.send(draft({ channel: '@qa', at: T0 + 2 * DAY })); // young: stays
      const before = T0 + DAY;
      const keep = ['task/request', 'policy/update'];

      expect(await h.one({ op: 'prune', before, keep, limit: 1 })).toBe(1);
      expect(await h.one({ op: 'prune', before, keep, limit: 100 })).toBe(1);
      expect(await h.one({ op: 'prune', before, keep, limit: 100 })).toBe(0);

      const ids = (as: (Assignment | undefined)[]) => as.map((x) => x!.message_id);
      expect((await h.messages('@qa')).map((m) => m.message_id)).toEqual(ids([b, e, f]));
      expect((await h.messages('product')).map((m) => m.message_id)).toEqual(ids([c]));
      expect(await h.deadLetters()).toEqual([]); // d's dead letter went with it
      expect(await h.one({ op: 'replay_dead_letter', id: deadD!.id, now: T0 })).toBeUndefined();
      expect(await h.ack('qa', [la.delivery_id])).toEqual({
        acked: [],
        dead: [],
        unknown: [la.delivery_id], // a's delivery went with it
      });
      expect(await h.depth('pm')).toEqual({ all: 1, critical: 0 });
      expect(idsOf(await h.lease('pm', 10, T0 + 2 * DAY))).toEqual(ids([c]));
      // a's key went too: the same message again is new, with a new number (never a reused one)
      const [reused] = await h.append({ ...aDraft, receivedAt: T0 + 3 * DAY });
      expect(reused?.status).toBe(201);
      if (reused?.status !== 201) return;
      expect(reused.assignment.message_id).not.toBe(a!.message_id);
      expect(reused.assignment.channel_sequence_id).toBe(6);
      expect(d!.channel_sequence_id).toBe(3); // (sanity: @qa had 1..5)
    });
  });

  describe(`${name}: agents`, () => {
    it('answers a heartbeat with the depths and shows last_seen as ISO in agents()', async () => {
      const h = await open();
      await h.send(draft({ channel: '@qa' }), draft({ channel: '@qa', priority: 'critical' }));
      expect(await h.store.agents(['qa', 'pm'])).toMatchObject([
        {
          id: 'qa',
          last_seen: null,
          queue_depth: 2,
          critical_depth: 1,
          last_poll: null,
          pending: 2,
          critical_pending: 1,
          leased: 0,
          dead_letters: 0,
          paused: false,
        },
        { id: 'pm', last_seen: null, queue_depth: 0, critical_depth: 0, pending: 0 },
      ]);
      expect(await h.one({ op: 'heartbeat', agent: 'qa', now: T0 + 500 })).toEqual({
        pending: 2,
        critical_pending: 1,
      });
      expect(await h.store.agents(['pm', 'qa'])).toMatchObject([
        { id: 'pm', last_seen: null, queue_depth: 0, critical_depth: 0 },
        { id: 'qa', last_seen: iso(T0 + 500), queue_depth: 2, critical_depth: 1 },
      ]);
      const [first] = await h.lease('qa', 1, T0 + 600);
      await h.ack('qa', [first!.delivery_id]);
      // the normal one went first (one channel: sequence order); the critical one is left
      expect(await h.one({ op: 'heartbeat', agent: 'qa', now: T0 + 900 })).toEqual({
        pending: 1,
        critical_pending: 1,
      });
      expect(await h.store.agents(['qa'])).toMatchObject([
        { id: 'qa', last_seen: iso(T0 + 900), queue_depth: 1, critical_depth: 1 },
      ]);
    });

    it('tells when the oldest pending delivery of an agent was ready, critical or normal', async () => {
      const h = await open({ retryBaseMs: 1000 });
      expect(await h.store.oldestPendingAt('qa')).toBeUndefined();
      await h.send(
        draft({ channel: '@qa', at: T0 + 100 }),
        draft({ channel: '@qa', at: T0 + 200 }),
      );
      await h.send(draft({ channel: '@pm', at: T0 + 300, sender: 'qa', priority: 'critical' }));
      expect(await h.store.oldestPendingAt('qa')).toBe(T0 + 100);
      expect(await h.store.oldestPendingAt('pm')).toBe(T0 + 300);
      // a critical one that arrived first is the oldest, though normal ones are indexed apart
      await h.send(draft({ channel: '@pm', at: T0 + 350, sender: 'qa' }));
      expect(await h.store.oldestPendingAt('pm')).toBe(T0 + 300);
      // leased is not pending: the next one is the oldest
      const [first] = await h.lease('qa', 1, T0 + 400);
      expect(await h.store.oldestPendingAt('qa')).toBe(T0 + 200);
      // nacked, the first is pending again and the oldest, ready once its backoff has passed
      // (1 s, jitter ×1.0)
      await h.nack('qa', [first!.delivery_id], T0 + 500);
      expect(await h.store.oldestPendingAt('qa')).toBe(T0 + 1500);
      // acked, all of them: none pending
      const all = await h.lease('qa', 10, T0 + 1500);
      expect(all).toHaveLength(2);
      await h.ack(
        'qa',
        all.map((d) => d.delivery_id),
      );
      expect(await h.store.oldestPendingAt('qa')).toBeUndefined();
      expect(await h.store.oldestPendingAt('pm')).toBe(T0 + 300);
    });
  });

  describe(`${name}: integrity`, () => {
    it('never serves a corrupt row: replay skips it and still fills its page, and the next sweep raises one alert/integrity', async () => {
      const h = await open();
      const [m1, m2, m3] = await h.send(
        draft({ channel: '@qa' }),
        draft({ channel: '@qa' }),
        draft({ channel: '@qa' }),
      );
      await h.corrupt('@qa', 2);
      const ids = (ms: Message[]) => ms.map((m) => m.message_id);
      // the first read to meet it, a page of two, reaches past it: a short page is the
      // channel's end, never a corrupt row
      expect(ids(await h.messages('@qa', 0, 2))).toEqual([m1!.message_id, m3!.message_id]);
      expect(ids(await h.messages('@qa'))).toEqual([m1!.message_id, m3!.message_id]);
      expect(ids(await h.messages('@qa', 1, 1))).toEqual([m3!.message_id]);
      expect(await h.messages('@qa', 3, 10)).toEqual([]);
      // the reader's delivery states cover the same window
      expect(Object.keys(await h.store.pageDeliveries('qa', '@qa', 0, 2))).toEqual([
        m1!.message_id,
        m3!.message_id,
      ]);
      // its sender is told its recipients' states, never its bytes
      const status = await h.store.messageStatus(m2!.message_id);
      expect(status?.message).toBe('null');
      expect(status?.recipients).toMatchObject([{ agent: 'qa', state: 'pending' }]);
      // a read hands nothing out: the next sweep tells alerts_to, once
      const { effects } = await h.sweep(T0 + 1);
      expect(effects.alerts).toEqual([
        {
          kind: 'alert/integrity',
          payload: {
            reason: 'checksum_mismatch',
            recipient: '@qa',
            count: 1,
            message_ids: [m2!.message_id],
            attempts: 0,
          },
        },
      ]);
      await h.messages('@qa');
      expect((await h.sweep(T0 + 2)).effects.alerts).toEqual([]);
      expect(JSON.stringify(await h.alerts())).not.toContain('"jind"');
    });

    it('quarantines a delivery whose message fails its checksum: a dead letter (integrity) with an alert, and the channel flows on', async () => {
      const h = await open({}, ['ops']);
      const [bad, next, last] = await h.send(
        draft({ channel: '@qa', at: T0 }),
        draft({ channel: '@qa', at: T0 }),
        draft({ channel: '@qa', at: T0 }),
      );
      const [crit] = await h.send(draft({ channel: 'ops', to: ['qa'], priority: 'critical' }));
      await h.corrupt('@qa', 1);
      const { results, effects } = await h.run([
        { op: 'lease', agent: 'qa', max: 10, now: T0 + 10 },
        { op: 'append', drafts: [draft({ channel: '@pm' })] }, // the rest of the group commits
      ]);
      const handed = (results[0] as { ok: string[] }).ok.map((j) => JSON.parse(j) as Delivery);
      // the corrupt one is never handed out, and the messages behind it in its channel are
      expect(idsOf(handed)).toEqual([crit!.message_id, next!.message_id, last!.message_id]);
      expect(JSON.stringify(handed)).not.toContain('"jind"');
      expect(outcomesOf(results[1])[0]?.status).toBe(201);
      expect(effects.alerts).toEqual([
        {
          kind: 'alert/integrity',
          payload: {
            reason: 'integrity',
            recipient: 'qa',
            count: 1,
            message_ids: [bad!.message_id],
            attempts: 0,
          },
        },
      ]);
      const dead = await h.deadLetters();
      expect(dead).toMatchObject([{ reason: 'integrity', recipient: 'qa', attempts: 0 }]);
      expect(dead[0]!.message).toBeNull(); // the dead letter names it; its bytes are not served
      expect(h.store.stats.deadLetters.integrity).toBe(1);
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 1 });
      const status = await h.store.messageStatus(bad!.message_id);
      expect(status?.recipients).toMatchObject([
        { agent: 'qa', state: 'dead_letter', reason: 'integrity' },
      ]);
      // an ack of the ones handed out works as ever; nothing of the quarantined comes back
      await h.ack(
        'qa',
        handed.map((d) => d.delivery_id),
      );
      expect(await h.lease('qa', 10, T0 + 100_000)).toEqual([]);
    });

    it('hands out what waits behind corrupt rows when they were all a poll met', async () => {
      const h = await open();
      const sent = await h.send(
        draft({ channel: '@qa' }),
        draft({ channel: '@qa' }),
        draft({ channel: '@qa' }),
      );
      await h.corrupt('@qa', 1);
      await h.corrupt('@qa', 2);
      expect(idsOf(await h.lease('qa', 1, T0))).toEqual([sent[2]!.message_id]);
      expect((await h.deadLetters()).map((d) => d.reason)).toEqual(['integrity', 'integrity']);
    });

    it('resolves checkIntegrity with no problems on a healthy store', async () => {
      const h = await open({}, ['product']);
      await h.send(draft({ channel: 'product', to: ['qa', 'pm'] }), draft({ channel: '@qa' }));
      const got = await h.lease('qa', 10, T0);
      await h.ack(
        'qa',
        got.map((d) => d.delivery_id),
      );
      expect(await h.store.checkIntegrity()).toEqual([]);
    });
  });
}
