/**
 * The storage conformance suite: what operators do to a store (docs/design/operators.md).
 * Pauses (durable, seen by leases, woken on resume), the agents' counts, full-text search of
 * messages, filtered dead letters, bulk redrives in message order with their counts, the
 * audit log's hash chain, and each channel's last sequence.
 */
import { describe, expect, it } from 'vitest';
import { type AuditAnchorSource, verifyAuditChain } from '../../../src/store/rules/audit-chain.js';
import { recipientJourneys } from '../../../src/store/rules/journey.js';
import { auditEntry, GENESIS_HASH, newRedriveId } from '../../../src/store/rules/operators.js';
import type {
  AuditDraft,
  AuditEntry,
  DeadLetterFilter,
  MessageQuery,
  OpResults,
  Store,
} from '../../../src/store/store.js';
import { type DeadLetter, draft, type Harness, idsOf, type Open, T0 } from './harness.js';

const ALICE = 'operator:alice';
const iso = (ms: number): string => new Date(ms).toISOString();

/** The message_ids a search answers, and its cursor. */
async function search(
  h: Harness,
  q: Partial<MessageQuery>,
): Promise<{ ids: string[]; nextAfter: number | null }> {
  const page = await h.store.searchMessages({ after: 0, limit: 100, ...q });
  return {
    ids: page.messages.map((m) => (JSON.parse(m) as { message_id: string }).message_id),
    nextAfter: page.nextAfter,
  };
}

/** The open dead letters matching `filter`, parsed. */
async function deadLetters(h: Harness, filter: DeadLetterFilter = {}): Promise<DeadLetter[]> {
  const got = await h.store.deadLetters(0, 1000, undefined, filter);
  return got.map((j) => JSON.parse(j) as DeadLetter);
}

/** Leases `agent`'s next delivery and rejects it (no retry): its dead letter's id. */
async function rejectNext(h: Harness, agent: string, now: number): Promise<number> {
  const [d] = await h.lease(agent, 1, now);
  if (d === undefined) throw new Error(`${agent} has nothing to lease`);
  await h.one({ op: 'nack', agent, ids: [d.delivery_id], now, retry: false, reason: 'no' });
  return dlOf(h, d.message.message_id);
}

/** The id of the open dead letter of a message. */
async function dlOf(h: Harness, messageId: string): Promise<number> {
  const dl = (await deadLetters(h)).find((d) => d.message.message_id === messageId);
  if (dl === undefined) throw new Error(`no open dead letter of ${messageId}`);
  return dl.id;
}

const pause = (agent: string, now: number, op: 'pause' | 'resume' = 'pause') =>
  ({ op, agent, by: ALICE, now }) as const;

export function operatorsConformance(name: string, open: Open): void {
  describe(`${name}: operators`, () => {
    it('pauses an agent: its leases hand out nothing, its messages are still accepted; a resume hands them out and wakes it', async () => {
      const h = await open();
      const [m1] = await h.send(draft({ channel: '@qa', at: T0 }));
      expect(await h.one(pause('qa', T0 + 1))).toEqual({
        paused: { since: T0 + 1, by: ALICE },
        changed: true,
      });
      // a repeat changes nothing, not even the time
      expect(await h.one(pause('qa', T0 + 2))).toEqual({
        paused: { since: T0 + 1, by: ALICE },
        changed: false,
      });
      const [m2] = await h.send(draft({ channel: '@qa', at: T0 + 3 }));
      expect(await h.lease('qa', 10, T0 + 4)).toEqual([]);
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 0 });
      // another agent is not held
      const [p1] = await h.send(draft({ channel: '@pm', sender: 'qa', at: T0 + 5 }));
      expect(idsOf(await h.lease('pm', 10, T0 + 6))).toEqual([p1!.message_id]);

      const resumed = await h.run([pause('qa', T0 + 7, 'resume')]);
      expect(resumed.results[0]).toEqual({ ok: { paused: null, changed: true } });
      expect(resumed.effects.woken.has('qa')).toBe(true);
      const again = await h.run([pause('qa', T0 + 8, 'resume')]);
      expect(again.results[0]).toEqual({ ok: { paused: null, changed: false } });
      expect(again.effects.woken.has('qa')).toBe(false);
      expect(idsOf(await h.lease('qa', 10, T0 + 9))).toEqual([m1!.message_id, m2!.message_id]);
    });

    it('reads a pause in the group it is made in: a lease after it hands out nothing', async () => {
      const h = await open();
      await h.send(draft({ channel: '@qa', at: T0 }));
      const { results } = await h.run([
        pause('qa', T0 + 1),
        { op: 'lease', agent: 'qa', max: 10, now: T0 + 2 },
        pause('qa', T0 + 3, 'resume'),
        { op: 'lease', agent: 'qa', max: 10, now: T0 + 4 },
      ]);
      expect(results.map((r) => ('ok' in r ? r.ok : r.err.code))).toMatchObject([
        { changed: true },
        [],
        { changed: true },
        [expect.any(String)],
      ]);
    });

    it('keeps a pause across a restart of the store', async () => {
      const h = await open();
      if (h.reopen === undefined) return; // this store cannot be reopened by the suite
      await h.send(draft({ channel: '@qa', at: T0 }));
      await h.one(pause('qa', T0 + 1));
      await h.reopen();
      expect(await h.lease('qa', 10, T0 + 2)).toEqual([]);
      const [qa] = await h.store.agents(['qa']);
      expect(qa).toMatchObject({ paused: true, paused_by: ALICE });
      expect(await h.one(pause('qa', T0 + 3))).toMatchObject({ changed: false });
      expect(await h.one(pause('qa', T0 + 4, 'resume'))).toMatchObject({ changed: true });
      await h.reopen();
      expect(await h.lease('qa', 10, T0 + 5)).toHaveLength(1);
    });

    it("tells each agent's pending, leased, critical and dead-lettered copies, its last poll and its pause", async () => {
      const h = await open({}, ['product']);
      await h.send(draft({ channel: '@qa', at: T0 }), draft({ channel: '@qa', at: T0 + 1 }));
      await h.send(
        draft({ channel: 'product', to: ['qa'], priority: 'critical', at: T0 + 2 }),
        draft({ channel: 'product', to: ['qa'], priority: 'critical', at: T0 + 3 }),
      );
      // critical lanes first: the first critical is leased, the second waits behind it
      expect(await h.lease('qa', 1, T0 + 5)).toHaveLength(1);
      await h.send(draft({ channel: '@pm', sender: 'qa', at: T0 + 6 }));
      const dead = await rejectNext(h, 'pm', T0 + 7);
      await h.send(draft({ channel: '@pm', sender: 'qa', at: T0 + 8 }));
      const replayed = await rejectNext(h, 'pm', T0 + 9);
      await h.one({ op: 'replay_dead_letter', id: replayed, now: T0 + 10, by: ALICE });
      await h.one(pause('pm', T0 + 11));
      await h.one({ op: 'heartbeat', agent: 'qa', now: T0 + 12 });

      const [qa, pm, nobody] = await h.store.agents(['qa', 'pm', 'nobody']);
      expect(qa).toEqual({
        id: 'qa',
        last_seen: new Date(T0 + 12).toISOString(),
        last_poll: new Date(T0 + 5).toISOString(),
        queue_depth: 4,
        critical_depth: 2,
        pending: 3,
        critical_pending: 1,
        leased: 1,
        dead_letters: 0,
        paused: false,
        paused_since: null,
        paused_by: null,
      });
      expect(pm).toMatchObject({
        id: 'pm',
        last_poll: new Date(T0 + 7).toISOString(),
        queue_depth: 1, // the replayed copy
        pending: 1,
        leased: 0,
        dead_letters: 1, // the replayed one is not open any more
        paused: true,
        paused_since: new Date(T0 + 11).toISOString(),
        paused_by: ALICE,
      });
      expect(dead).not.toBe(replayed);
      expect(nobody).toEqual({
        id: 'nobody',
        last_seen: null,
        last_poll: null,
        queue_depth: 0,
        critical_depth: 0,
        pending: 0,
        critical_pending: 0,
        leased: 0,
        dead_letters: 0,
        paused: false,
        paused_since: null,
        paused_by: null,
      });
    });

    it("tells a paused agent's pending copy as held by the pause, with the pause and the resume among its events", async () => {
      const h = await open({}, ['product']);
      const [m] = await h.send(draft({ channel: 'product', to: ['qa', 'pm'], at: T0 }));
      await h.one(pause('qa', T0 + 10));
      let j = await h.store.journey(m!.message_id);
      expect(j!.pauses).toEqual([{ agent: 'qa', at: T0 + 10, event: 'paused', by: ALICE }]);
      expect(j!.pausedNow?.qa).toEqual({ since: T0 + 10, by: ALICE });
      expect(j!.pausedNow?.pm).toBeUndefined();
      const byAgent = (now: number) =>
        Object.fromEntries(
          recipientJourneys(j!, { maxAttempts: 4, now }).map((r) => [r.agent, r] as const),
        );
      let r = byAgent(T0 + 20);
      expect(r.qa!.cause).toBe('paused');
      expect(r.qa!.explanation).toContain(ALICE);
      expect(r.qa!.events.map((e) => e.event)).toEqual(['queued', 'paused']);
      expect(r.pm!.cause).not.toBe('paused');
      expect(r.pm!.events.map((e) => e.event)).toEqual(['queued']);

      await h.one(pause('qa', T0 + 30, 'resume'));
      j = await h.store.journey(m!.message_id);
      expect(j!.pausedNow?.qa).toBeUndefined();
      r = byAgent(T0 + 40);
      expect(r.qa!.cause).not.toBe('paused');
      expect(r.qa!.events.map((e) => [e.event, e.detail])).toEqual([
        ['queued', null],
        ['paused', { by: ALICE }],
        ['resumed', { by: ALICE }],
      ]);
      // a pause before the message was accepted is not part of its journey
      await h.one(pause('qa', T0 + 50));
      const [later] = await h.send(draft({ channel: '@qa', at: T0 + 60 }));
      const jl = await h.store.journey(later!.message_id);
      expect(jl!.pauses ?? []).toEqual([]);
      expect(jl!.pausedNow?.qa).toEqual({ since: T0 + 50, by: ALICE });
    });

    it('finds messages by the words of their payload strings (nested, in arrays) and their kind, newest first', async () => {
      const h = await open({}, ['product']);
      const [a, b, c, d] = await h.send(
        draft({
          channel: 'product',
          kind: 'task',
          payloadJson: JSON.stringify({ text: 'Deploy the billing service', tags: ['urgent'] }),
          at: T0,
        }),
        draft({
          channel: 'product',
          sender: 'qa',
          payloadJson: JSON.stringify({
            nested: { deep: { note: 'Billing report ready' } },
            n: 42,
          }),
          at: T0 + 1,
        }),
        draft({
          channel: '@qa',
          kind: 'code-review',
          payloadJson: JSON.stringify({ text: 'lunch at the café' }),
          at: T0 + 2,
        }),
        draft({
          channel: '@qa',
          payloadJson: JSON.stringify({ url: 'https://example.com/setup-v2', who: 'a@b.org' }),
          at: T0 + 3,
        }),
      );
      const [A, B, C, D] = [a, b, c, d].map((x) => x!.message_id);
      expect((await search(h, { q: 'billing' })).ids).toEqual([B, A]);
      expect((await search(h, { q: 'BILLING report' })).ids).toEqual([B]);
      expect((await search(h, { q: 'report billing' })).ids).toEqual([B]);
      expect((await search(h, { q: 'urgent' })).ids).toEqual([A]); // in an array
      expect((await search(h, { q: 'ready' })).ids).toEqual([B]); // nested
      expect((await search(h, { q: 'review' })).ids).toEqual([C]); // the kind's words
      expect((await search(h, { q: 'task' })).ids).toEqual([A]);
      // words are runs of letters and digits, whatever the punctuation around them
      expect((await search(h, { q: 'example' })).ids).toEqual([D]);
      expect((await search(h, { q: 'setup v2' })).ids).toEqual([D]);
      expect((await search(h, { q: 'org' })).ids).toEqual([D]);
      // diacritics do not matter
      expect((await search(h, { q: 'cafe' })).ids).toEqual([C]);
      expect((await search(h, { q: 'CAFÉ' })).ids).toEqual([C]);
      // keys and numbers are not text
      expect((await search(h, { q: 'nested' })).ids).toEqual([]);
      expect((await search(h, { q: '42' })).ids).toEqual([]);
      expect((await search(h, { q: 'billing lunch' })).ids).toEqual([]);
      // no words: every message (the alerts channel has none here)
      expect((await search(h, {})).ids).toEqual([D, C, B, A]);
      expect((await search(h, { q: '  ' })).ids).toEqual([D, C, B, A]);
      // filters, ANDed with the words
      expect((await search(h, { q: 'billing', sender: 'qa' })).ids).toEqual([B]);
      expect((await search(h, { q: 'billing', channel: 'product' })).ids).toEqual([B, A]);
      expect((await search(h, { channel: '@qa' })).ids).toEqual([D, C]);
      expect((await search(h, { kind: 'task' })).ids).toEqual([A]);
      expect((await search(h, { q: 'billing', kind: 'code-review' })).ids).toEqual([]);
    });

    it("takes a search's words as text: FTS syntax typed by a person neither throws nor means anything", async () => {
      const h = await open({}, ['product']);
      const [a, b] = await h.send(
        draft({ channel: 'product', payloadJson: '{"t":"billing and more"}', at: T0 }),
        draft({ channel: 'product', payloadJson: '{"t":"billing report"}', at: T0 + 1 }),
      );
      const [A, B] = [a!.message_id, b!.message_id];
      for (const q of ['"billing', 'billing*', 'billing"', "billing'", '(billing)', 'billing:']) {
        expect((await search(h, { q })).ids, q).toEqual([B, A]);
      }
      expect((await search(h, { q: 'billing AND report' })).ids).toEqual([]); // "and" is a word
      expect((await search(h, { q: 'billing AND more' })).ids).toEqual([A]);
      expect((await search(h, { q: 'billing OR lunch' })).ids).toEqual([]);
      expect((await search(h, { q: 'NOT billing' })).ids).toEqual([]);
      expect((await search(h, { q: 't:billing' })).ids).toEqual([]); // "t" is no word of them
      expect((await search(h, { q: 'report & !billing | <-> NEAR(x y)' })).ids).toEqual([]);
      expect((await search(h, { q: '* " : ^ -' })).ids).toEqual([B, A]); // no words at all
    });

    it('pages a search newest first with its cursor', async () => {
      const h = await open({}, ['product']);
      const sent = await h.send(
        ...[0, 1, 2, 3, 4].map((i) =>
          draft({ channel: 'product', payloadJson: `{"t":"word${i % 2} common"}`, at: T0 + i }),
        ),
      );
      const ids = sent.map((s) => s.message_id);
      const p1 = await search(h, { q: 'common', limit: 2 });
      expect(p1.ids).toEqual([ids[4], ids[3]]);
      const p2 = await search(h, { q: 'common', limit: 2, after: p1.nextAfter! });
      expect(p2.ids).toEqual([ids[2], ids[1]]);
      const p3 = await search(h, { q: 'common', limit: 2, after: p2.nextAfter! });
      expect(p3.ids).toEqual([ids[0]]);
      const p4 = await search(h, { q: 'common', limit: 2, after: p3.nextAfter! });
      expect(p4).toEqual({ ids: [], nextAfter: null });
      const w0 = await search(h, { q: 'word0', limit: 1 });
      expect(w0.ids).toEqual([ids[4]]);
      expect((await search(h, { q: 'word0', after: w0.nextAfter! })).ids).toEqual([ids[2], ids[0]]);
      // a byte bound: the first always, then what fits
      const one = await h.store.searchMessages({ q: 'common', after: 0, limit: 10 }, 1);
      expect(one.messages).toHaveLength(1);
    });

    it('lists the open dead letters only, filtered by reason, recipient, channel and words (ANDed)', async () => {
      const h = await open({ leaseMs: 1000, maxRetries: 0 }, ['product']);
      await h.send(draft({ channel: '@qa', payloadJson: '{"t":"billing failed"}', at: T0 }));
      const dl1 = await rejectNext(h, 'qa', T0 + 1);
      await h.send(draft({ channel: '@pm', sender: 'qa', payloadJson: '{"t":"lunch"}', at: T0 }));
      const dl2 = await rejectNext(h, 'pm', T0 + 2);
      const [m3] = await h.send(
        draft({ channel: 'product', to: ['qa'], payloadJson: '{"t":"billing retry"}', at: T0 }),
      );
      await h.lease('qa', 1, T0 + 3);
      await h.sweep(T0 + 10_000); // its only attempt's lease expires
      const dl3 = await dlOf(h, m3!.message_id);
      const ids = async (f: DeadLetterFilter) => (await deadLetters(h, f)).map((d) => d.id);
      expect(await ids({})).toEqual([dl1, dl2, dl3]);
      expect(await ids({ reason: 'rejected' })).toEqual([dl1, dl2]);
      expect(await ids({ reason: 'lease_expired' })).toEqual([dl3]);
      expect(await ids({ recipient: 'qa' })).toEqual([dl1, dl3]);
      expect(await ids({ channel: 'product' })).toEqual([dl3]);
      expect(await ids({ channel: '@pm' })).toEqual([dl2]);
      expect(await ids({ q: 'billing' })).toEqual([dl1, dl3]);
      expect(await ids({ q: 'billing', reason: 'lease_expired', recipient: 'qa' })).toEqual([dl3]);
      expect(await ids({ q: 'billing', recipient: 'pm' })).toEqual([]);
      expect(await ids({ reason: '', recipient: '', channel: '', q: '' })).toEqual([dl1, dl2, dl3]);
      // paged by id
      const after = (await h.store.deadLetters(dl1, 1, undefined, { recipient: 'qa' })).map(
        (j) => (JSON.parse(j) as DeadLetter).id,
      );
      expect(after).toEqual([dl3]);
      // replayed: no longer open, no longer listed
      await h.one({ op: 'replay_dead_letter', id: dl1, now: T0 + 20_000 });
      expect(await ids({})).toEqual([dl2, dl3]);
      expect(await ids({ recipient: 'qa' })).toEqual([dl3]);
    });

    it('redrives dead letters by id in message order, whatever order they died in, in steps that never replay one twice', async () => {
      const h = await open({}, ['product']);
      const sent = await h.send(
        ...[0, 1, 2].map((i) => draft({ channel: 'product', to: ['qa'], at: T0 + i })),
      );
      const [m1, m2, m3] = sent.map((s) => s.message_id);
      const leased = await h.lease('qa', 3, T0 + 5);
      expect(idsOf(leased)).toEqual([m1, m2, m3]);
      // dead in the order 3, 2, 1: their dead letters' ids run the other way round
      for (const [i, d] of [...leased.entries()].reverse()) {
        await h.one({
          op: 'nack',
          agent: 'qa',
          ids: [d.delivery_id],
          now: T0 + 10 + (2 - i),
          retry: false,
        });
      }
      const [dl1, dl2, dl3] = [await dlOf(h, m1!), await dlOf(h, m2!), await dlOf(h, m3!)];
      expect(dl3).toBeLessThan(dl2);
      expect(dl2).toBeLessThan(dl1);
      // one replayed already (skipped), one unknown id (skipped)
      await h.send(draft({ channel: '@pm', sender: 'qa', at: T0 + 20 }));
      const replayed = await rejectNext(h, 'pm', T0 + 21);
      await h.one({ op: 'replay_dead_letter', id: replayed, now: T0 + 22 });

      const id = newRedriveId();
      const created = await h.one({
        op: 'redrive_create',
        id,
        by: ALICE,
        selection: { ids: [dl3, dl1, dl2, replayed, 9_999_999, dl1] },
        rate: 20,
        now: T0 + 30,
      });
      // the ids, each once; the redrive is known by the id it was made with
      expect(created).toEqual({ redrive_id: id, count: 5 });
      expect(await h.store.redrive(id)).toEqual({
        redrive_id: id,
        total: 5,
        done: 0,
        skipped: 0,
        state: 'running',
        rate: 20,
        by: ALICE,
        created_at: new Date(T0 + 30).toISOString(),
      });
      expect(await h.store.runningRedrives()).toContain(id);
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });

      const step = async (max: number, now: number) =>
        (await h.one({ op: 'redrive_step', id, max, now })) as OpResults['redrive_step'];
      expect(await step(2, T0 + 31)).toMatchObject({ done: 2, skipped: 0, state: 'running' });
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 0 });
      expect(await step(2, T0 + 32)).toMatchObject({
        total: 5,
        done: 3,
        skipped: 2,
        state: 'done',
      });
      expect(await h.store.runningRedrives()).not.toContain(id);
      // a step after the last replays nothing
      expect(await step(2, T0 + 33)).toMatchObject({ done: 3, skipped: 2, state: 'done' });
      expect(await h.depth('qa')).toEqual({ all: 3, critical: 0 });
      expect(await h.store.redrive(id)).toMatchObject({ done: 3, skipped: 2, state: 'done' });
      // handed out in the channel's sequence order
      expect(idsOf(await h.lease('qa', 10, T0 + 40))).toEqual([m1, m2, m3]);
      expect(await deadLetters(h, { recipient: 'qa' })).toEqual([]);
      // each copy's journey starts with `redriven`: its dead letter, who and which redrive
      for (const [m, dl] of [
        [m1, dl1],
        [m2, dl2],
        [m3, dl3],
      ] as const) {
        const j = await h.store.journey(m!);
        const copy = j!.copies.find((c) => c.recipient === 'qa')!;
        const first = j!.events.find((e) => e.delivery === copy.delivery)!;
        expect(first.event).toBe('redriven');
        expect(JSON.parse(first.detail!)).toEqual({ dead_letter: dl, by: ALICE, redrive: id });
      }
      expect(await h.store.redrive('rd_0000000000000000')).toBeUndefined();
      expect(
        await h.one({ op: 'redrive_step', id: 'rd_0000000000000000', max: 1, now: T0 }),
      ).toBeUndefined();
    });

    it('redrives by filter only the dead letters that existed when it was made', async () => {
      const h = await open({}, ['product']);
      for (const i of [0, 1, 2]) {
        await h.send(draft({ channel: '@qa', payloadJson: `{"t":"batch ${i}"}`, at: T0 + i }));
      }
      await h.send(draft({ channel: '@pm', sender: 'qa', payloadJson: '{"t":"batch"}', at: T0 }));
      const qa = [await rejectNext(h, 'qa', T0 + 5), await rejectNext(h, 'qa', T0 + 6)];
      const pm = await rejectNext(h, 'pm', T0 + 7);
      const created = await h.one({
        op: 'redrive_create',
        id: newRedriveId(),
        by: ALICE,
        selection: { filter: { recipient: 'qa', q: 'batch' } },
        rate: 10,
        now: T0 + 10,
      });
      expect(created.count).toBe(2);
      const later = await rejectNext(h, 'qa', T0 + 11); // after the redrive was made
      const state = await h.one({
        op: 'redrive_step',
        id: created.redrive_id,
        max: 10,
        now: T0 + 12,
      });
      expect(state).toMatchObject({ total: 2, done: 2, skipped: 0, state: 'done' });
      expect((await deadLetters(h)).map((d) => d.id)).toEqual([pm, later]);
      expect(qa).not.toContain(later);
      // the replayed copies wait in qa's queue, the later dead letter does not
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 0 });
    });

    it('counts a redrive of nothing as done at its first step', async () => {
      const h = await open();
      const { redrive_id, count } = await h.one({
        op: 'redrive_create',
        id: newRedriveId(),
        by: ALICE,
        selection: { filter: { reason: 'evicted' } },
        rate: 5,
        now: T0,
      });
      expect(count).toBe(0);
      expect(
        await h.one({ op: 'redrive_step', id: redrive_id, max: 1, now: T0 + 1 }),
      ).toMatchObject({ total: 0, done: 0, skipped: 0, state: 'done' });
    });

    it("says who replayed a single dead letter on its copy's `redriven` event", async () => {
      const h = await open();
      const [m] = await h.send(draft({ channel: '@qa', at: T0 }));
      const dl = await rejectNext(h, 'qa', T0 + 1);
      await h.one({ op: 'replay_dead_letter', id: dl, now: T0 + 2, by: ALICE });
      const j = await h.store.journey(m!.message_id);
      const redriven = j!.events.find((e) => e.event === 'redriven')!;
      expect(JSON.parse(redriven.detail!)).toEqual({ dead_letter: dl, by: ALICE });
    });

    it('appends audit entries as one hash chain, paged oldest first', async () => {
      const h = await open();
      const drafts: AuditDraft[] = [
        { at: T0, actor: ALICE, action: 'pause', target: 'qa', detail: {} },
        { at: T0 + 1, actor: ALICE, action: 'resume', target: 'qa', detail: { note: 'é "x"' } },
        {
          at: T0 + 2,
          actor: 'orchestrator',
          action: 'replay',
          target: 'dead_letter:7',
          detail: { z: 1, a: [1, { b: 2 }] },
        },
      ];
      const first = await h.one({ op: 'audit', entry: drafts[0]! });
      // two in one group: still one chain
      const { results } = await h.run(drafts.slice(1).map((entry) => ({ op: 'audit', entry })));
      const entries = [first, ...results.map((r) => ('ok' in r ? r.ok : r.err))];
      expect(entries.map((e) => (e as { seq: number }).seq)).toEqual([1, 2, 3]);
      let prev = GENESIS_HASH;
      for (const [i, e] of entries.entries()) {
        expect(e).toEqual(auditEntry(i + 1, drafts[i]!, prev));
        prev = (e as { hash: string }).hash;
      }
      expect(first.prev_hash).toBe('0'.repeat(64));
      expect(await h.store.audit(0, 10)).toEqual(entries);
      expect(await h.store.audit(0, 2)).toEqual(entries.slice(0, 2));
      expect(await h.store.audit(2, 10)).toEqual(entries.slice(2));
      expect(await h.store.audit(3, 10)).toEqual([]);
      if (h.reopen === undefined) return;
      await h.reopen();
      const next = await h.one({
        op: 'audit',
        entry: { at: T0 + 3, actor: ALICE, action: 'redrive', target: 'rd_1', detail: {} },
      });
      expect(next).toMatchObject({ seq: 4, prev_hash: prev });
    });

    it('keeps the audit log anchor beside it: the newest entry, and where retention pruned', async () => {
      const h = await open();
      const anchor = async () => {
        const s = h.store as Store & Partial<AuditAnchorSource>;
        expect(s.auditAnchor, 'the store keeps an audit anchor').toBeTypeOf('function');
        return s.auditAnchor!();
      };
      expect(await anchor()).toEqual({
        seq: 0,
        hash: GENESIS_HASH,
        prunedSeq: 0,
        prunedHash: GENESIS_HASH,
      });
      const entries: AuditEntry[] = [];
      for (let i = 0; i < 4; i++) {
        entries.push(
          (await h.one({
            op: 'audit',
            entry: { at: T0 + i, actor: ALICE, action: 'pause', target: 'qa', detail: { i } },
          })) as AuditEntry,
        );
      }
      // moved by each append, in its commit
      expect(await anchor()).toEqual({
        seq: 4,
        hash: entries[3]!.hash,
        prunedSeq: 0,
        prunedHash: GENESIS_HASH,
      });
      // and by each prune: the last entry pruned, whose hash the first kept one links to
      expect(await h.one({ op: 'prune_audit', before: T0 + 2, limit: 100 })).toBe(2);
      expect(await anchor()).toEqual({
        seq: 4,
        hash: entries[3]!.hash,
        prunedSeq: 2,
        prunedHash: entries[1]!.hash,
      });
      const read = (after: number, limit: number) => h.store.audit(after, limit);
      expect(await verifyAuditChain(read, { anchor })).toEqual({
        entries: 2,
        first: 3,
        last: 4,
        broken: undefined,
      });
      if (h.reopen === undefined) return;
      await h.reopen();
      expect(await anchor()).toMatchObject({ seq: 4, prunedSeq: 2 });
      const next = await h.one({
        op: 'audit',
        entry: { at: T0 + 5, actor: ALICE, action: 'resume', target: 'qa', detail: {} },
      });
      expect(next).toMatchObject({ seq: 5, prev_hash: entries[3]!.hash });
      expect(await anchor()).toMatchObject({ seq: 5, hash: next.hash });
    });

    it('audits an act marked audited in its own commit, from its result; nothing for the unmarked', async () => {
      const h = await open();
      await h.send(draft({ channel: '@qa', at: T0 }));
      const dl = await rejectNext(h, 'qa', T0 + 1);
      // unmarked (a redrive's step, a test): no entry
      await h.one(pause('qa', T0 + 2));
      await h.one(pause('qa', T0 + 3, 'resume'));
      expect(await h.store.audit(0, 10)).toEqual([]);
      await h.one({ ...pause('qa', T0 + 4), audited: true });
      const replayed = await h.one({
        op: 'replay_dead_letter',
        id: dl,
        now: T0 + 5,
        by: ALICE,
        audited: true,
      });
      // a second replay of it replays nothing: no act, no entry
      await h.one({ op: 'replay_dead_letter', id: dl, now: T0 + 6, by: ALICE, audited: true });
      // the agent was paused: the redrive's count is of what exists, not what is handed out
      const made = await h.one({
        op: 'redrive_create',
        id: newRedriveId(),
        by: ALICE,
        selection: { filter: { recipient: 'qa' } },
        rate: 5,
        now: T0 + 7,
        audited: true,
      });
      // an operator's message stored by the same group as its entry
      const [sent] = await h.send({
        ...draft({ channel: '@qa', sender: ALICE, at: T0 + 8 }),
        audited: 'message',
      });
      const entries = await h.store.audit(0, 10);
      expect(
        entries.map(({ seq, at, actor, action, target, detail }) => ({
          seq,
          at,
          actor,
          action,
          target,
          detail,
        })),
      ).toEqual([
        { seq: 1, at: iso(T0 + 4), actor: ALICE, action: 'pause', target: 'qa', detail: {} },
        {
          seq: 2,
          at: iso(T0 + 5),
          actor: ALICE,
          action: 'replay',
          target: `dead_letter:${dl}`,
          detail: { delivery_id: replayed!.delivery_id },
        },
        {
          seq: 3,
          at: iso(T0 + 7),
          actor: ALICE,
          action: 'redrive',
          target: made.redrive_id,
          detail: { filter: { recipient: 'qa' }, rate: 5, count: made.count },
        },
        {
          seq: 4,
          at: iso(T0 + 8),
          actor: ALICE,
          action: 'message',
          target: sent!.message_id,
          detail: { channel: '@qa', thread_id: sent!.thread_id },
        },
      ]);
    });

    it("tells each channel's last sequence number", async () => {
      const h = await open({}, ['product', 'empty']);
      await h.send(
        draft({ channel: 'product', at: T0 }),
        draft({ channel: 'product', at: T0 + 1 }),
        draft({ channel: '@qa', at: T0 + 2 }),
      );
      expect(await h.store.lastSequences()).toMatchObject({
        product: 2,
        '@qa': 1,
        '@pm': 0,
        empty: 0,
      });
    });
  });
}
