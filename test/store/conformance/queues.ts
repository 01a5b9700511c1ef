/** The storage conformance suite: Bounded queues (admission, eviction), storage bounds, byte-bounded pages. */

import { describe, expect, it } from 'vitest';
import type { Assignment } from '../../../src/protocol/envelope.js';
import { PAGE_ITEM_OVERHEAD } from '../../../src/protocol/limits.js';
import type { Delivery } from '../../../src/protocol/wire.js';
import { SEARCH_TEXT_CHARS } from '../../../src/store/rules/storage.js';
import type { AlertPayload, AppendOutcome } from '../../../src/store/store.js';
import { StorageFailure } from '../../../src/store/store.js';
import { until } from '../../helpers/wait.js';
import {
  ALERTS_CHANNEL,
  ALERTS_TO,
  DAY,
  type DraftSpec,
  draft,
  type Harness,
  idsOf,
  type Open,
  outcomesOf,
  T0,
} from './harness.js';

export function queuesConformance(name: string, open: Open): void {
  describe(`${name}: bounded queues`, () => {
    it('evicts the oldest normal pending delivery past the bound, never a critical or a leased one', async () => {
      const h = await open({ capacity: 3 });
      const [n1] = await h.send(draft({ channel: '@qa', at: T0 }));
      const [c1] = await h.send(draft({ channel: '@qa', priority: 'critical', at: T0 + 1 }));
      const [n2] = await h.send(draft({ channel: '@qa', at: T0 + 2 }));
      const leasedN1 = await h.lease('qa', 1, T0 + 3);
      expect(idsOf(leasedN1)).toEqual([n1!.message_id]); // n1 is leased
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 1 });
      const [n3] = await h.send(draft({ channel: '@qa', at: T0 + 4 })); // evicts n2
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 1 });
      const [c2] = await h.send(draft({ channel: '@qa', priority: 'critical', at: T0 + 5 })); // n3
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 2 });
      const dead = await h.deadLetters();
      expect(dead.map((d) => [d.reason, d.recipient, d.attempts, d.message.message_id])).toEqual([
        ['evicted', 'qa', 0, n2!.message_id],
        ['evicted', 'qa', 0, n3!.message_id],
      ]);
      // what is left: n1 (still leased) and both criticals, which wait behind n1 in their
      // channel (strict order) until it is acked
      expect(await h.lease('qa', 10, T0 + 6)).toEqual([]);
      await h.ack('qa', [leasedN1[0]!.delivery_id]);
      expect(idsOf(await h.lease('qa', 10, T0 + 6))).toEqual([c1!.message_id, c2!.message_id]);
      expect(await h.messages('@qa')).toHaveLength(5); // evicted copies, stored messages
    });

    it('dead-letters a new normal delivery at once as queue_full when only criticals are queued', async () => {
      const h = await open({ capacity: 3 });
      const crit = await h.send(
        ...[0, 1, 2].map((i) => draft({ channel: '@qa', priority: 'critical', at: T0 + i })),
      );
      const late = draft({ channel: '@qa', at: T0 + 10 });
      const { results, effects } = await h.run([{ op: 'append', drafts: [late] }]);
      const [outcome] = outcomesOf(results[0]);
      if (outcome?.status !== 201) throw new Error('the message itself must be stored');
      expect(effects.woken.has('qa')).toBe(false);
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 3 });
      const dead = await h.deadLetters();
      expect(dead.map((d) => [d.reason, d.recipient, d.attempts, d.message.message_id])).toEqual([
        ['queue_full', 'qa', 0, outcome.assignment.message_id],
      ]);
      expect(idsOf(await h.lease('qa', 10, T0 + 11))).toEqual(crit.map((a) => a.message_id));
    });

    it('takes a new critical delivery above the bound when only criticals are queued, with a critical_overrun alert', async () => {
      const h = await open({ capacity: 3 });
      await h.send(
        ...[0, 1, 2].map((i) => draft({ channel: '@qa', priority: 'critical', at: T0 + i })),
      );
      const over = draft({ channel: '@qa', priority: 'critical', at: T0 + 10 });
      const { results, effects } = await h.run([{ op: 'append', drafts: [over] }]);
      const [outcome] = outcomesOf(results[0]);
      if (outcome?.status !== 201) throw new Error('not stored');
      expect(await h.depth('qa')).toEqual({ all: 4, critical: 4 });
      const payload: AlertPayload = {
        reason: 'critical_overrun',
        recipient: 'qa',
        count: 1,
        message_ids: [outcome.assignment.message_id],
        attempts: 0,
      };
      expect(effects.alerts).toEqual([{ kind: 'alert/overrun', payload }]);
      expect(await h.alerts()).toMatchObject([
        {
          sender: 'adapter',
          to: ALERTS_CHANNEL,
          kind: 'alert/overrun',
          priority: 'critical',
          payload,
        },
      ]);
      expect(await h.deadLetters()).toEqual([]);
      expect(await h.lease('qa', 10, T0 + 11)).toHaveLength(4);
    });

    it('dead-letters a new critical delivery as queue_full with an alert past criticalCapacity, whatever room the queue has', async () => {
      const h = await open({ capacity: 10, criticalCapacity: 2 }, ['product']);
      const crit = await h.send(
        ...[0, 1].map((i) => draft({ channel: '@qa', priority: 'critical', at: T0 + i })),
      );
      const over = draft({ channel: '@qa', priority: 'critical', at: T0 + 10 });
      const { results, effects } = await h.run([{ op: 'append', drafts: [over] }]);
      const [outcome] = outcomesOf(results[0]);
      if (outcome?.status !== 201) throw new Error('the message itself must be stored');
      expect(effects.woken.has('qa')).toBe(false);
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 2 });
      const dead = await h.deadLetters();
      expect(dead.map((d) => [d.reason, d.recipient, d.attempts, d.message.message_id])).toEqual([
        ['queue_full', 'qa', 0, outcome.assignment.message_id],
      ]);
      const payload: AlertPayload = {
        reason: 'queue_full',
        recipient: 'qa',
        count: 1,
        message_ids: [outcome.assignment.message_id],
        attempts: 0,
      };
      expect(effects.alerts).toEqual([{ kind: 'alert/dead-letter', payload }]);
      expect(await h.alerts()).toMatchObject([{ kind: 'alert/dead-letter', payload }]);
      // normal copies still have room; the critical bound counts critical ones only
      await h.send(draft({ channel: 'product', to: ['qa'], at: T0 + 11 }));
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 2 });
      // once one is acked, a critical copy is taken again
      const leased = await h.lease('qa', 10, T0 + 12);
      expect(idsOf(leased).slice(0, 2)).toEqual(crit.map((a) => a.message_id));
      await h.ack('qa', [leased[0]!.delivery_id]);
      await h.send(draft({ channel: '@qa', priority: 'critical', at: T0 + 13 }));
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 2 });
      expect(await h.deadLetters()).toHaveLength(1);
    });

    it("evicts the flooding sender's own oldest copies: a sender within its share of the queue loses none", async () => {
      const h = await open({ capacity: 4 }, ['product']);
      const [pm1] = await h.send(draft({ channel: '@qa', sender: 'pm', kind: 'task/request' }));
      // engineering floods qa through product, in one group: 10 copies into a queue of 4
      const flood = await h.send(
        ...Array.from({ length: 10 }, (_, i) =>
          draft({ channel: 'product', sender: 'engineering', to: ['qa'], at: T0 + 1 + i }),
        ),
      );
      // a new copy of a sender within its share evicts the largest holder's oldest, not its own
      const [pm2] = await h.send(draft({ channel: '@qa', sender: 'pm', at: T0 + 20 }));
      expect(await h.depth('qa')).toEqual({ all: 4, critical: 0 });
      const dead = await h.deadLetters();
      expect(dead.map((d) => [d.reason, d.message.sender])).toEqual(
        Array(8).fill(['evicted', 'engineering']),
      );
      expect(dead.map((d) => d.message.message_id)).toEqual(
        flood.slice(0, 8).map((a) => a.message_id),
      );
      const got = await h.lease('qa', 10, T0 + 21);
      expect(idsOf(got).sort()).toEqual(
        [pm1!, pm2!, ...flood.slice(8)].map((a) => a.message_id).sort(),
      );
    });

    it("gives each agent an equal share of a critical capacity: past it, its own new critical copy is refused, never another sender's", async () => {
      // 4 agents, capacity 8: 2 each
      const h = await open({ capacity: 100, criticalCapacity: 8, agents: 4 }, ['product']);
      const crit = (sender: string, at: number) =>
        draft({ channel: 'product', sender, to: ['qa'], priority: 'critical', at });
      const flood = await h.send(...[0, 1, 2, 3, 4].map((i) => crit('pm', T0 + i)));
      const [mine] = await h.send(crit('engineering', T0 + 10));
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 3 });
      const dead = await h.deadLetters();
      expect(dead.map((d) => [d.reason, d.recipient, d.message.message_id])).toEqual(
        flood.slice(2).map((a) => ['queue_full', 'qa', a.message_id]),
      );
      const got = await h.lease('qa', 10, T0 + 11);
      expect(idsOf(got)).toEqual([...flood.slice(0, 2), mine!].map((a) => a.message_id));
    });

    it("keeps room for the adapter's alerts above a critical capacity agents filled", async () => {
      const h = await open({ criticalCapacity: 3 });
      const crit = (at: number) =>
        draft({ channel: ALERTS_CHANNEL, sender: 'pm', priority: 'critical', at });
      const held = await h.send(crit(T0), crit(T0 + 1), crit(T0 + 2));
      // the fourth is refused, and the alert about it still reaches alerts_to
      const [over] = await h.send(crit(T0 + 3));
      const dead = await h.deadLetters();
      expect(dead.map((d) => [d.reason, d.recipient, d.message.message_id])).toEqual([
        ['queue_full', ALERTS_TO, over!.message_id],
      ]);
      expect(await h.depth(ALERTS_TO)).toEqual({ all: 4, critical: 4 });
      const got = await h.lease(ALERTS_TO, 10, T0 + 4);
      expect(got.map((d) => [d.message.sender, d.message.kind])).toEqual([
        ...held.map(() => ['pm', 'status']),
        ['adapter', 'alert/dead-letter'],
      ]);
      expect(got[3]!.message.payload).toMatchObject({
        reason: 'queue_full',
        message_ids: [over!.message_id],
      });
    });

    it('keeps depth() in step through enqueue, lease, ack, dead letter and replay', async () => {
      const h = await open({ maxRetries: 0 });
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
      await h.send(
        draft({ channel: '@qa' }),
        draft({ channel: '@qa', priority: 'critical' }),
        draft({ channel: '@qa' }),
      );
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 1 });
      const [n1, c1, n2] = await h.lease('qa', 10, T0);
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 1 }); // leased still counts
      await h.ack('qa', [c1!.delivery_id]);
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 0 });
      await h.nack('qa', [n1!.delivery_id], T0 + 1); // no retries left: a dead letter
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 0 });
      await h.ack('qa', [n2!.delivery_id]);
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
      const [dl] = await h.deadLetters();
      await h.one({ op: 'replay_dead_letter', id: dl!.id, now: T0 + 2 });
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 0 });
      const [agent] = await h.store.agents(['qa']);
      expect(agent).toMatchObject({ queue_depth: 1, critical_depth: 0 });
    });
  });

  describe(`${name}: storage bounds`, () => {
    const KEEP: readonly string[] = [];
    /** A draft of about `kib` KiB of payload. */
    const sized = (kib: number, s: DraftSpec) =>
      draft({ ...s, payloadJson: JSON.stringify({ text: 'x'.repeat(kib * 1024) }) });
    /** What a fresh store with nothing in it uses: the bounds below are set from it. */
    const emptyUse = async () => (await (await open()).store.storageUse()).usedBytes;
    const refusal = (o: AppendOutcome | undefined) =>
      o?.status === 'rejected' ? o.error : undefined;

    /** Sends to @qa until one is refused; the stored assignments and the refused outcome. */
    async function fill(h: Harness, sender: string, kib: number) {
      const stored: Assignment[] = [];
      for (let i = 0; i < 200; i++) {
        const [o] = await h.append(sized(kib, { channel: '@qa', sender, at: T0 + i }));
        if (o?.status !== 201) return { stored, refused: o };
        stored.push(o.assignment);
      }
      throw new Error('200 messages and no refusal: the bound does not hold');
    }

    it('refuses new messages past the size bound with storage_full, storing nothing; repeats, alerts and pruning go on, and sends are taken again once space is freed', async () => {
      const maxBytes = (await emptyUse()) + 256 * 1024;
      const h = await open({}, [], { maxBytes, senderShare: 1 });
      const { stored, refused } = await fill(h, 'pm', 16);
      expect(stored.length).toBeGreaterThanOrEqual(4);
      const err = refusal(refused);
      expect(err?.code).toBe('storage_full');
      expect(err?.status).toBe(503);
      expect(err?.retryAfterS).toBeGreaterThan(0);
      expect((await h.store.storageUse()).usedBytes).toBeLessThanOrEqual(maxBytes);
      // the refusal took no number and stored nothing: the channel holds what was acknowledged
      const read = await h.messages('@qa');
      expect(read.map((m) => m.message_id)).toEqual(stored.map((a) => a.message_id));
      expect(await h.depth('qa')).toEqual({ all: stored.length, critical: 0 });
      // a repeat of a stored key is answered as before, full or not
      const again = await h.append({
        ...sized(16, { channel: '@qa', key: read[0]!.idempotency_key, at: T0 }),
      });
      expect(again[0]).toEqual({ status: 200, assignment: stored[0] });
      // alerts_to is told who was refused (the adapter's own alerts pass the bound)
      const { results, effects } = await h.run([
        { op: 'append', drafts: [sized(16, { channel: '@qa', at: T0 + 500 })] },
        { op: 'sweep', now: T0 + 31_000 },
      ]);
      expect(refusal(outcomesOf(results[0])[0])?.code).toBe('storage_full');
      expect(effects.alerts).toMatchObject([
        { kind: 'alert/storage', payload: { reason: 'storage_full', recipient: 'pm' } },
      ]);
      expect((await h.alerts()).map((m) => m.kind)).toContain('alert/storage');
      // leases and acks go on; once done with, retention prunes them and frees the space
      const got = await h.lease('qa', 500, T0 + 1000);
      expect(got).toHaveLength(stored.length);
      await h.ack(
        'qa',
        got.map((d) => d.delivery_id),
      );
      const pruned = await h.one({ op: 'prune', before: T0 + DAY, keep: KEEP, limit: 1000 });
      expect(pruned).toBe(stored.length);
      const [after] = await h.send(sized(16, { channel: '@qa', at: T0 + DAY }));
      expect(after?.channel_sequence_id).toBe(stored.length + 1);
    });

    it("counts the journey's events in the store's size", { timeout: 60_000 }, async () => {
      const h = await open({ leaseMs: 60_000 });
      const [d] = await (async () => {
        await h.send(draft({ channel: '@qa', at: T0 }));
        return h.lease('qa', 1, T0 + 1);
      })();
      const before = (await h.store.storageUse()).usedBytes;
      // 1,000 extensions: one lease_extended event each, and no other row
      for (let i = 0; i < 10; i++) {
        await h.run(
          Array.from({ length: 100 }, (_, j) => ({
            op: 'extend' as const,
            agent: 'qa',
            ids: [d!.delivery_id],
            extendMs: 60_000,
            now: T0 + 2 + i * 100 + j,
          })),
        );
      }
      const events = (await h.store.journey(d!.message.message_id))!.events;
      expect(events.filter((e) => e.event === 'lease_extended')).toHaveLength(1000);
      // each event's row and index entries take well over 32 bytes on either engine (PostgreSQL
      // counts them from its statistics, which each server backend flushes within seconds)
      let grown = 0;
      await until(
        async () => {
          grown = (await h.store.storageUse()).usedBytes - before;
          return grown > 1000 * 32;
        },
        () => `the store's size to count 1,000 events (grew by ${grown} bytes)`,
      );
    });

    it('refuses a sender past its share of the bound while others still send, and takes it again once its messages are pruned', async () => {
      const maxBytes = (await emptyUse()) + 1024 * 1024;
      const h = await open({}, [], { maxBytes, senderShare: 0.25 });
      const { stored, refused } = await fill(h, 'pm', 16);
      expect(refusal(refused)?.code).toBe('storage_full');
      expect(refusal(refused)?.message).toContain('pm');
      // a quarter of the bound, give or take one message and the store's own pages
      const pmBytes = (await h.store.storageUse()).senders.pm ?? 0;
      expect(pmBytes).toBeLessThanOrEqual(maxBytes * 0.25);
      expect(pmBytes).toBeGreaterThan(maxBytes * 0.25 - 32 * 1024);
      expect(stored.length).toBeGreaterThanOrEqual(4);
      // another sender is not held back by pm's share
      await h.send(sized(16, { channel: '@qa', sender: 'engineering', at: T0 + 300 }));
      const got = await h.lease('qa', 500, T0 + 400);
      await h.ack(
        'qa',
        got.map((d) => d.delivery_id),
      );
      await h.one({ op: 'prune', before: T0 + 250, keep: KEEP, limit: 1000 }); // pm's only
      expect((await h.store.storageUse()).senders.pm ?? 0).toBe(0);
      expect((await h.store.storageUse()).senders.engineering).toBeGreaterThan(16 * 1024);
      await h.send(sized(16, { channel: '@qa', sender: 'pm', at: T0 + DAY }));
    });

    it("refuses new messages when the volume's free space is below the reserve", async (ctx) => {
      const h = await open({}, [], { reserveBytes: 2 ** 50 }); // more than any volume has free
      // a store whose volume a client cannot see (PostgreSQL's) reports it as Infinity
      if (!Number.isFinite((await h.store.storageUse()).availableBytes)) return ctx.skip();
      const [o] = await h.append(draft({ channel: '@qa' }));
      expect(refusal(o)?.code).toBe('storage_full');
      expect(await h.messages('@qa')).toEqual([]);
      expect((await h.store.storageUse()).availableBytes).toBeLessThan(2 ** 50);
    });

    it('counts what each sender stores, and gives it back when retention prunes it', async () => {
      const h = await open();
      expect((await h.store.storageUse()).senders).toEqual({});
      await h.send(sized(8, { channel: '@qa', sender: 'pm' }), sized(8, { channel: '@qa' }));
      const pm = (await h.store.storageUse()).senders.pm!;
      expect(pm).toBeGreaterThan(2 * 8 * 1024);
      // and what the search index adds, at most its first SEARCH_TEXT_CHARS (SQLite counts it)
      expect(pm).toBeLessThan(2 * (8 * 1024 + SEARCH_TEXT_CHARS) + 4096);
      await expect(
        h.run([
          { op: 'append', drafts: [sized(8, { channel: '@qa' })] },
          { op: 'append', drafts: [draft({ channel: 'no-counter', to: ['qa'] })] },
        ]),
      ).rejects.toThrow();
      expect((await h.store.storageUse()).senders.pm).toBe(pm); // a rollback counts nothing
      const got = await h.lease('qa', 10, T0);
      await h.ack(
        'qa',
        got.map((d) => d.delivery_id),
      );
      await h.one({ op: 'prune', before: T0 + 1, keep: KEEP, limit: 10 });
      expect((await h.store.storageUse()).senders.pm).toBe(0);
    });

    it('throws StorageFailure when the storage itself refuses a write, keeps everything committed, and writes again once it has room', async (ctx) => {
      const h = await open();
      if (h.fillDisk === undefined) return ctx.skip();
      const [kept] = await h.send(draft({ channel: '@qa' }));
      await h.fillDisk(true);
      const err = await h.run([{ op: 'append', drafts: [sized(200, { channel: '@qa' })] }]).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StorageFailure);
      expect(idsOf((await h.messages('@qa')).map((message) => ({ message })))).toEqual([
        kept!.message_id,
      ]);
      await h.fillDisk(false);
      const [next] = await h.send(sized(200, { channel: '@qa' }));
      expect(next?.channel_sequence_id).toBe(2);
    });
  });
  describe(`${name}: byte-bounded pages`, () => {
    /** Five 1,000-byte payloads to qa in @qa, at T0. */
    async function five(h: Harness): Promise<Assignment[]> {
      const drafts = [1, 2, 3, 4, 5].map((n) =>
        draft({ channel: '@qa', payloadJson: JSON.stringify({ n, s: 'x'.repeat(1000) }) }),
      );
      return await h.send(...drafts);
    }
    /** What a page counts of its items: each one's bytes and the overhead beside it. */
    const bytes = (items: readonly string[]) =>
      items.reduce((sum, j) => sum + Buffer.byteLength(j) + PAGE_ITEM_OVERHEAD, 0);

    it('ends a replay page before its bytes pass maxBytes, with at least one message', async () => {
      const h = await open();
      await five(h);
      const all = await h.store.channelMessages('@qa', 0, 100);
      const two = bytes(all.slice(0, 2));
      // one byte less and only one would fit
      expect(await h.store.channelMessages('@qa', 0, 100, two - 1)).toEqual(all.slice(0, 1));
      const page = await h.store.channelMessages('@qa', 0, 100, two + 10);
      expect(page).toEqual(all.slice(0, 2));
      // going on from its last sequence
      const next = await h.store.channelMessages('@qa', 2, 100, two + 10);
      expect(next).toEqual(all.slice(2, 4));
      // a bound below one message still answers one; limit still counts
      expect(await h.store.channelMessages('@qa', 0, 100, 0)).toEqual(all.slice(0, 1));
      expect(await h.store.channelMessages('@qa', 0, 3, 1e9)).toEqual(all.slice(0, 3));
      // and the states of the same window
      const states = await h.store.pageDeliveries('qa', '@qa', 0, page.length);
      expect(Object.keys(states)).toHaveLength(2);
    });

    it('leases only the deliveries that fit in maxBytes, at least one; the rest stay pending', async () => {
      const h = await open();
      await five(h);
      // room for two deliveries: each its message and the overhead, which holds its own fields
      const room = bytes((await h.store.channelMessages('@qa', 0, 2)) as string[]);
      const got = await h.one({ op: 'lease', agent: 'qa', max: 10, now: T0, maxBytes: room });
      const leased = got.map((j) => JSON.parse(j) as Delivery);
      expect(leased.map((d) => d.message.payload.n)).toEqual([1, 2]);
      expect(got.reduce((sum, j) => sum + Buffer.byteLength(j) + 1, 0)).toBeLessThanOrEqual(room);
      await h.ack(
        'qa',
        leased.map((d) => d.delivery_id),
      );
      // had 3-5 been leased, they would wait for their leases to end; they come at once, first
      // attempts, one by one under a bound below one message
      const rest: Delivery[] = [];
      for (let i = 0; i < 3; i++) {
        const [j] = await h.one({ op: 'lease', agent: 'qa', max: 10, now: T0, maxBytes: 0 });
        const d = JSON.parse(j!) as Delivery;
        rest.push(d);
        await h.ack('qa', [d.delivery_id]);
      }
      expect(rest.map((d) => [d.message.payload.n, d.attempt])).toEqual([
        [3, 1],
        [4, 1],
        [5, 1],
      ]);
    });

    it('ends a dead-letter page before its bytes pass maxBytes, with at least one', async () => {
      const h = await open({ maxRetries: 0 });
      await five(h);
      const leased = await h.lease('qa', 10, T0);
      await h.nack(
        'qa',
        leased.map((d) => d.delivery_id),
        T0 + 1,
      );
      const all = await h.store.deadLetters(0, 100);
      expect(all).toHaveLength(5);
      const page = await h.store.deadLetters(0, 100, bytes(all.slice(0, 3)));
      expect(page).toEqual(all.slice(0, 3));
      expect(await h.store.deadLetters(0, 100, bytes(all.slice(0, 3)) - 1)).toEqual(
        all.slice(0, 2),
      );
      expect(await h.store.deadLetters(0, 100, 1)).toEqual(all.slice(0, 1));
    });
  });
}
