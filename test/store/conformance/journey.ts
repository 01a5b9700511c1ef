/**
 * The storage conformance suite: a message's journey (docs/design/journey.md). Each change of a
 * delivery leaves its event, written with the change; each recipient's latest copy is read with
 * the lane it waits in and its agent's last poll; retention takes the events with the message.
 */
import { describe, expect, it } from 'vitest';
import { recipientJourneys } from '../../../src/store/rules/journey.js';
import type { JourneyRows } from '../../../src/store/store.js';
import { DAY, draft, type Open, T0 } from './harness.js';

/** Each recipient's events as [recipient, event, attempt], the derived `queued` left out. */
const eventsOf = (j: JourneyRows | undefined) =>
  j!.events.map((e) => [e.recipient, e.event, e.attempt]);

export function journeyConformance(name: string, open: Open): void {
  describe(`${name}: journeys`, () => {
    it('records leases, extensions, acks and the last poll, each with its time and attempt', async () => {
      const h = await open({ leaseMs: 10_000 }, ['product']);
      const [m] = await h.send(draft({ channel: 'product', to: ['qa', 'engineering'], at: T0 }));
      expect(await h.store.journey(m!.message_id)).toMatchObject({
        acceptedAt: T0,
        events: [],
        copies: [
          { recipient: 'qa', state: 'pending', attempts: 0, lastPoll: null, head: null },
          { recipient: 'engineering', state: 'pending', attempts: 0, head: null },
        ],
      });
      const [d] = await h.lease('qa', 1, T0 + 100);
      await h.one({
        op: 'extend',
        agent: 'qa',
        ids: [d!.delivery_id, d!.delivery_id],
        extendMs: 60_000,
        now: T0 + 200,
      });
      await h.one({ op: 'ack', agent: 'qa', ids: [d!.delivery_id], now: T0 + 300 });
      const j = await h.store.journey(m!.message_id);
      expect(eventsOf(j)).toEqual([
        ['qa', 'leased', 1],
        ['qa', 'lease_extended', 1],
        ['qa', 'acked', 1],
      ]);
      expect(j!.events.map((e) => e.at)).toEqual([T0 + 100, T0 + 200, T0 + 300]);
      const leased = JSON.parse(j!.events[0]!.detail!);
      expect(leased.lease_expires_at).toBe(new Date(T0 + 10_100).toISOString());
      expect(typeof leased.replica).toBe('string');
      expect(JSON.parse(j!.events[1]!.detail!)).toEqual({
        lease_expires_at: new Date(T0 + 60_200).toISOString(),
      });
      expect(j!.copies[0]).toMatchObject({ recipient: 'qa', state: 'acked', lastPoll: T0 + 100 });
      const [qa] = recipientJourneys(j!, { maxAttempts: 4, now: T0 + 400, only: 'qa' });
      expect(qa).toMatchObject({ cause: 'acked', last_poll: new Date(T0 + 100).toISOString() });
      expect(qa!.events.map((e) => e.event)).toEqual([
        'queued',
        'leased',
        'lease_extended',
        'acked',
      ]);
    });

    it('records a nack, an expired lease and the dead letter they end in, with the reasons', async () => {
      const h = await open({ leaseMs: 10_000, maxRetries: 1, retryBaseMs: 1000 });
      const [m] = await h.send(draft({ channel: '@qa', at: T0 }));
      const [d] = await h.lease('qa', 1, T0 + 1);
      await h.one({ op: 'nack', agent: 'qa', ids: [d!.delivery_id], now: T0 + 2, reason: 'busy' });
      let j = await h.store.journey(m!.message_id);
      expect(j!.copies[0]).toMatchObject({ state: 'pending', attempts: 1, availableAt: T0 + 1002 });
      expect(JSON.parse(j!.events[1]!.detail!)).toEqual({ retry: true, reason: 'busy' });
      const [qa] = recipientJourneys(j!, { maxAttempts: 2, now: T0 + 500 });
      expect(qa).toMatchObject({ cause: 'retry_backoff' });
      expect(qa!.explanation).toContain('nacked by qa ("busy")');
      await h.lease('qa', 1, T0 + 1002);
      await h.sweep(T0 + 20_000); // the lease of attempt 2, the last, expires
      j = await h.store.journey(m!.message_id);
      expect(eventsOf(j)).toEqual([
        ['qa', 'leased', 1],
        ['qa', 'nacked', 1],
        ['qa', 'leased', 2],
        ['qa', 'lease_expired', 2],
        ['qa', 'dead_lettered', 2],
      ]);
      expect(JSON.parse(j!.events[4]!.detail!)).toEqual({ reason: 'lease_expired', note: null });
      expect(j!.copies[0]).toMatchObject({
        state: 'dead_letter',
        reason: 'lease_expired',
        deadAt: T0 + 20_000,
      });
    });

    it('records a rejection with its note, an eviction, and a redriven copy as the latest', async () => {
      const h = await open({ capacity: 1 });
      const [m1] = await h.send(draft({ channel: '@qa', at: T0 }));
      const [d] = await h.lease('qa', 1, T0 + 1);
      await h.one({
        op: 'nack',
        agent: 'qa',
        ids: [d!.delivery_id],
        now: T0 + 2,
        retry: false,
        reason: 'no T-9',
      });
      const [m2] = await h.send(draft({ channel: '@qa', at: T0 + 3 }));
      await h.send(draft({ channel: '@qa', at: T0 + 4 })); // a full queue of one: m2 evicted
      expect(eventsOf(await h.store.journey(m1!.message_id))).toEqual([
        ['qa', 'leased', 1],
        ['qa', 'nacked', 1],
        ['qa', 'dead_lettered', 1],
      ]);
      const evicted = await h.store.journey(m2!.message_id);
      expect(eventsOf(evicted)).toEqual([['qa', 'evicted', 0]]);
      expect(evicted!.copies[0]).toMatchObject({ state: 'dead_letter', reason: 'evicted' });
      // m1's dead letter redriven: a new copy, which the journey now follows
      const [dl] = (await h.deadLetters()).filter((x) => x.message.message_id === m1!.message_id);
      await h.one({ op: 'replay_dead_letter', id: dl!.id, now: T0 + 10 });
      const j = await h.store.journey(m1!.message_id);
      expect(eventsOf(j)).toEqual([
        ['qa', 'leased', 1],
        ['qa', 'nacked', 1],
        ['qa', 'dead_lettered', 1],
        ['qa', 'redriven', 0],
      ]);
      expect(JSON.parse(j!.events[3]!.detail!)).toEqual({ dead_letter: dl!.id });
      expect(j!.copies).toHaveLength(1);
      expect(j!.copies[0]).toMatchObject({ state: 'pending', attempts: 0, reason: null });
    });

    it('keeps the order of the changes of one commit: a nack, then the lease that hands the copy out again', async () => {
      const h = await open({ maxRetries: 3, retryBaseMs: 0 });
      const [m] = await h.send(draft({ channel: '@qa', at: T0 }));
      const [d] = await h.lease('qa', 1, T0 + 1);
      const { results } = await h.store.commit([
        { op: 'nack', agent: 'qa', ids: [d!.delivery_id], now: T0 + 2 },
        { op: 'lease', agent: 'qa', max: 1, now: T0 + 2 },
      ]);
      expect(results[1]).toEqual({ ok: [expect.any(String)] });
      expect(eventsOf(await h.store.journey(m!.message_id))).toEqual([
        ['qa', 'leased', 1],
        ['qa', 'nacked', 1],
        ['qa', 'leased', 2],
      ]);
    });

    it("names the copy that holds a recipient's lane, with when it was leased", async () => {
      const h = await open({ leaseMs: 60_000 }, ['product']);
      const [first] = await h.send(
        draft({ channel: 'product', to: ['qa'], kind: 'task/request', at: T0 }),
      );
      const [second] = await h.send(draft({ channel: 'product', to: ['qa'], at: T0 + 1 }));
      await h.lease('qa', 1, T0 + 5);
      const j = await h.store.journey(second!.message_id);
      expect(j!.copies[0]).toMatchObject({
        recipient: 'qa',
        state: 'pending',
        waiting: 2,
        head: {
          messageId: first!.message_id,
          seq: 1,
          kind: 'task/request',
          state: 'leased',
          attempts: 1,
          leasedAt: T0 + 5,
          leaseExpiresAt: T0 + 60_005,
        },
      });
      const [qa] = recipientJourneys(j!, { maxAttempts: 4, now: T0 + 10 });
      expect(qa).toMatchObject({
        cause: 'waiting_behind',
        waiting_behind: { message_id: first!.message_id, channel_sequence_id: 1, cause: 'leased' },
      });
      // the lane's head itself has none
      expect((await h.store.journey(first!.message_id))!.copies[0]!.head).toBeNull();
    });

    it("finds a message by its sender's idempotency key, and only its sender's", async () => {
      const h = await open({});
      const [m] = await h.send(draft({ channel: '@qa', sender: 'pm', key: 'k-1', at: T0 }));
      expect(await h.store.messageIdOf('pm', 'k-1')).toBe(m!.message_id);
      expect(await h.store.messageIdOf('qa', 'k-1')).toBeUndefined();
      expect(await h.store.messageIdOf('pm', 'k-2')).toBeUndefined();
    });

    it('knows no journey of an unknown message, and none once retention took it', async () => {
      const h = await open({});
      expect(await h.store.journey('0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11')).toBeUndefined();
      expect(await h.store.journey('not-a-message-id')).toBeUndefined();
      const [m] = await h.send(draft({ channel: '@qa', at: T0 }));
      const [d] = await h.lease('qa', 1, T0 + 1);
      await h.one({ op: 'ack', agent: 'qa', ids: [d!.delivery_id], now: T0 + 2 });
      await h.one({ op: 'prune', before: T0 + DAY, keep: [], limit: 10 });
      expect(await h.store.journey(m!.message_id)).toBeUndefined();
    });
  });
}
