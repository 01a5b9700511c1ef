/** The storage conformance suite: Numbering, idempotency, replies, threads and their budgets, fan-out. */
import { describe, expect, it } from 'vitest';
import type { Assignment } from '../../../src/protocol/envelope.js';
import { uuidv7 } from '../../../src/protocol/ids.js';
import { PAGE_ITEM_OVERHEAD } from '../../../src/protocol/limits.js';
import type { Message } from '../../../src/protocol/wire.js';
import type { AppendOutcome, MessageDraft, SentAlert, StoreOp } from '../../../src/store/store.js';
import {
  ALERTS_CHANNEL,
  ALERTS_TO,
  DAY,
  type DraftSpec,
  draft,
  idsOf,
  type Open,
  outcomesOf,
  sha256,
  T0,
} from './harness.js';

export function messagesConformance(name: string, open: Open): void {
  describe(`${name}: sequences`, () => {
    it('numbers each channel 1..N without a gap across many groups, batches, repeats and refusals', async () => {
      const h = await open({}, ['product', 'ops']);
      const first = new Map<MessageDraft, Assignment>(); // each stored draft's assignment
      const stored: Record<string, Assignment[]> = { product: [], ops: [] };
      let repeats = 0;
      let refusals = 0;
      for (let g = 0; g < 20; g++) {
        const ops: StoreOp[] = [];
        for (let b = 0; b <= g % 3; b++) {
          const drafts = Array.from({ length: 1 + ((g + b) % 4) }, (_, k) =>
            draft({ channel: (g + b + k) % 2 === 0 ? 'product' : 'ops', to: ['qa'], at: T0 + g }),
          );
          // a reply to a number no channel has reached yet: refused, and takes no number
          if ((g + b) % 4 === 1) drafts.push(draft({ channel: 'ops', to: ['qa'], replyTo: 1e6 }));
          // a repeat of a stored message (an earlier group's, or this batch's own first)
          if (g % 5 === 2) drafts.push([...first.keys()][g]!);
          if (g % 7 === 3) drafts.push(drafts[0]!);
          ops.push({ op: 'append', drafts });
        }
        if (g % 2 === 0) ops.push({ op: 'lease', agent: 'qa', max: 3, now: T0 + g }); // other ops too
        const { results } = await h.run(ops);
        expect(results).toHaveLength(ops.length);
        ops.forEach((op, i) => {
          if (op.op !== 'append') return;
          const outcomes = outcomesOf(results[i]);
          expect(outcomes).toHaveLength(op.drafts.length);
          op.drafts.forEach((d, j) => {
            const o = outcomes[j]!;
            const earlier = first.get(d);
            if (earlier !== undefined) {
              repeats++;
              expect(o).toEqual({ status: 200, assignment: earlier });
            } else if (d.replyTo !== null) {
              refusals++;
              expect(o.status).toBe('rejected');
            } else {
              if (o.status !== 201) throw new Error(`not stored: ${JSON.stringify(o)}`);
              first.set(d, o.assignment);
              stored[d.channel]!.push(o.assignment);
            }
          });
        });
      }
      expect(repeats).toBeGreaterThanOrEqual(6);
      expect(refusals).toBeGreaterThanOrEqual(5);
      for (const channel of ['product', 'ops']) {
        const assigned = stored[channel]!;
        expect(assigned.length).toBeGreaterThan(20);
        const oneToN = Array.from({ length: assigned.length }, (_, i) => i + 1);
        expect(assigned.map((a) => a.channel_sequence_id)).toEqual(oneToN);
        const read = await h.messages(channel);
        expect(read.map((m) => m.channel_sequence_id)).toEqual(oneToN);
        expect(read.map((m) => m.message_id)).toEqual(assigned.map((a) => a.message_id));
      }
    });

    it('rolls a failing group back whole: its sequence numbers, messages, deliveries and leases never happened', async () => {
      const h = await open({}, ['product']);
      const before = await h.send(
        draft({ channel: 'product', to: ['qa', 'pm'] }),
        draft({ channel: 'product', to: ['qa', 'pm'] }),
      );
      const retry = draft({ channel: 'product', to: ['qa', 'pm'], at: T0 + 10 });
      // the second draft names a channel with no counter: not a refusal, a failed transaction
      await expect(
        h.run([
          { op: 'lease', agent: 'qa', max: 10, now: T0 + 10 },
          { op: 'append', drafts: [retry] },
          { op: 'append', drafts: [draft({ channel: 'no-counter', to: ['qa'], at: T0 + 10 })] },
        ]),
      ).rejects.toThrow();
      expect((await h.messages('product')).map((m) => m.message_id)).toEqual(
        before.map((a) => a.message_id),
      );
      expect(await h.messages('no-counter')).toEqual([]);
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 0 });
      expect(await h.depth('pm')).toEqual({ all: 2, critical: 0 });
      const leased = await h.lease('qa', 10, T0 + 20); // the rolled-back lease leased nothing
      expect(idsOf(leased)).toEqual(before.map((a) => a.message_id));
      expect(leased.map((d) => d.attempt)).toEqual([1, 1]);
      // the retry of the failed group is new (its key was not kept) and gets the next number
      const [again] = await h.append(retry);
      expect(again).toMatchObject({ status: 201, assignment: { channel_sequence_id: 3 } });
    });

    it('leaves the stats counters as they were when a group rolls back', async () => {
      const h = await open({ capacity: 1, maxRetries: 0 }, ['product']);
      await h.send(draft({ channel: '@qa' }), draft({ channel: 'product', to: ['pm'] }));
      const [d] = await h.lease('pm', 1, T0);
      const stats = structuredClone(h.store.stats);
      await expect(
        h.run([
          { op: 'lease', agent: 'qa', max: 1, now: T0 },
          { op: 'nack', agent: 'pm', ids: [d!.delivery_id], now: T0 }, // a dead letter, an alert
          { op: 'append', drafts: [draft({ channel: '@qa' })] }, // evicts: another dead letter
          { op: 'append', drafts: [draft({ channel: 'no-counter', to: ['qa'] })] },
        ]),
      ).rejects.toThrow();
      expect(h.store.stats).toEqual(stats);
    });
  });

  describe(`${name}: idempotency`, () => {
    it('answers a repeat of sender, key and fingerprint with 200 and the first assignment, storing nothing new', async () => {
      const h = await open();
      const d = draft({ channel: '@qa', at: T0 });
      const [stored] = await h.send(d);
      const repeat = { ...d, receivedAt: T0 + 5000 };
      const { results, effects } = await h.run([{ op: 'append', drafts: [repeat, repeat] }]);
      expect(outcomesOf(results[0])).toEqual([
        { status: 200, assignment: stored },
        { status: 200, assignment: stored },
      ]);
      expect(effects.woken.size).toBe(0);
      expect((await h.messages('@qa')).map((m) => m.message_id)).toEqual([stored!.message_id]);
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 0 });
      expect(idsOf(await h.lease('qa', 10, T0 + 5000))).toEqual([stored!.message_id]);
      // two copies of a new message in one batch: one stored, one duplicate
      const twin = draft({ channel: '@qa', at: T0 + 6000 });
      const [a, b] = await h.append(twin, twin);
      expect(a).toMatchObject({ status: 201, assignment: { channel_sequence_id: 2 } });
      expect(b).toEqual({ status: 200, assignment: a!.status === 201 ? a!.assignment : null });
      expect(await h.messages('@qa')).toHaveLength(2);
    });

    it('refuses the same key with another fingerprint as idempotency_conflict and stores nothing', async () => {
      const h = await open();
      const d = draft({ channel: '@qa', key: 'key-1' });
      await h.send(d);
      const [conflict] = await h.append({ ...d, fingerprint: sha256('another body') });
      expect(conflict?.status).toBe('rejected');
      expect(conflict?.status === 'rejected' && conflict.error.code).toBe('idempotency_conflict');
      expect(await h.messages('@qa')).toHaveLength(1);
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 0 });
      const [next] = await h.send(draft({ channel: '@qa' }));
      expect(next?.channel_sequence_id).toBe(2);
    });

    it('tells whether a key of a sender is stored: not before, nor for a refused one, nor for another sender', async () => {
      const h = await open();
      const d = draft({ channel: '@qa', sender: 'pm', key: 'asked-key' });
      expect(await h.store.isStored('pm', 'asked-key')).toBe(false);
      const [refused] = await h.append({ ...d, replyTo: 99 }); // beyond the channel's last
      expect(refused?.status).toBe('rejected');
      expect(await h.store.isStored('pm', 'asked-key')).toBe(false);
      await h.send(d);
      expect(await h.store.isStored('pm', 'asked-key')).toBe(true);
      expect(await h.store.isStored('engineering', 'asked-key')).toBe(false);
      expect(await h.store.isStored('pm', 'another-key')).toBe(false);
    });

    it('treats the same key from another sender as a different message', async () => {
      const h = await open();
      const [mine] = await h.send(draft({ channel: '@qa', sender: 'pm', key: 'shared-key' }));
      const [theirs] = await h.append(
        draft({ channel: '@qa', sender: 'engineering', key: 'shared-key' }),
      );
      expect(theirs?.status).toBe(201);
      if (theirs?.status !== 201) return;
      expect(theirs.assignment.message_id).not.toBe(mine!.message_id);
      expect(theirs.assignment.channel_sequence_id).toBe(2);
      const read = await h.messages('@qa');
      expect(read.map((m) => [m.sender, m.idempotency_key])).toEqual([
        ['pm', 'shared-key'],
        ['engineering', 'shared-key'],
      ]);
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 0 });
    });
  });

  describe(`${name}: reply_to`, () => {
    it("refuses a reply_to_sequence_id beyond the channel's last as reply_to_not_found and stores nothing", async () => {
      const h = await open({}, ['product']);
      const refusedCode = (o: AppendOutcome | undefined) =>
        o?.status === 'rejected' ? o.error.code : o?.status;
      // an empty channel has no number 1 yet
      expect(refusedCode((await h.append(draft({ channel: '@qa', replyTo: 1 })))[0])).toBe(
        'reply_to_not_found',
      );
      await h.send(draft({ channel: '@qa' }), draft({ channel: '@qa' }));
      const { results, effects } = await h.run([
        { op: 'append', drafts: [draft({ channel: '@qa', replyTo: 3 })] },
      ]);
      expect(refusedCode(outcomesOf(results[0])[0])).toBe('reply_to_not_found');
      expect(effects.woken.size).toBe(0);
      expect(await h.messages('@qa')).toHaveLength(2);
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 0 });
      // the channel's own numbers count, not another channel's
      expect(
        refusedCode((await h.append(draft({ channel: 'product', to: ['qa'], replyTo: 1 })))[0]),
      ).toBe('reply_to_not_found');
      // the last number itself is a valid target, and the refusals took no number
      const [reply] = await h.send(draft({ channel: '@qa', replyTo: 2 }));
      expect(reply?.channel_sequence_id).toBe(3);
      expect((await h.messages('@qa', 2))[0]?.reply_to_sequence_id).toBe(2);
    });
  });

  describe(`${name}: threads and budgets`, () => {
    const codeOf = (o: AppendOutcome | undefined) =>
      o?.status === 'rejected' ? o.error.code : o?.status;
    const parse = (json: string) => JSON.parse(json) as Message;

    it('puts a reply in the thread of the message it names, in any channel, one hop deeper; every reader sees thread_id and hop', async () => {
      const h = await open({}, ['product']);
      const [root] = await h.send(draft({ channel: '@qa', sender: 'pm' })); // pm to qa, direct
      expect(root).toMatchObject({ thread_id: root!.message_id, hop: 0 });
      const thread = root!.message_id;
      // qa answers the direct message in another channel, naming it by message_id
      const answerDraft = draft({
        channel: 'product',
        sender: 'qa',
        to: ['pm'],
        replyToId: thread,
      });
      const [answer] = await h.send(answerDraft);
      expect(answer).toMatchObject({ thread_id: thread, hop: 1 });
      // pm answers that by its sequence in the same channel (product #1)
      const [again] = await h.send(draft({ channel: 'product', sender: 'pm', replyTo: 1 }));
      expect(again).toMatchObject({ thread_id: thread, hop: 2 });
      // replay
      const [m1, m2] = await h.messages('product');
      expect(m1).toMatchObject({ reply_to: thread, thread_id: thread, hop: 1 });
      expect(m1).not.toHaveProperty('reply_to_sequence_id');
      expect(m2).toMatchObject({
        reply_to_sequence_id: 1,
        reply_to: answer!.message_id,
        thread_id: thread,
        hop: 2,
      });
      const [rootRead] = await h.messages('@qa');
      expect(rootRead).toMatchObject({ thread_id: thread, hop: 0 });
      expect(rootRead).not.toHaveProperty('reply_to');
      // the inbox, message status, the dead letters
      const [d] = await h.lease('pm', 10, T0);
      expect(d!.message).toMatchObject({
        message_id: answer!.message_id,
        thread_id: thread,
        hop: 1,
      });
      const status = await h.store.messageStatus(answer!.message_id);
      expect(parse(status!.message)).toMatchObject({ thread_id: thread, hop: 1 });
      await h.one({ op: 'nack', agent: 'pm', ids: [d!.delivery_id], now: T0, retry: false });
      expect((await h.deadLetters())[0]!.message).toMatchObject({ thread_id: thread, hop: 1 });
      // a repeat is answered with the same thread and hop
      const [repeat] = await h.append(answerDraft);
      expect(repeat).toEqual({ status: 200, assignment: answer });
    });

    it('refuses as reply_to_not_found a reply to a message its sender could not see or that does not exist, storing nothing', async () => {
      const h = await open({}, ['product']);
      const [dm] = await h.send(draft({ channel: '@qa', sender: 'pm' })); // private to qa
      const [group] = await h.send(draft({ channel: 'product', sender: 'pm', to: ['qa'] }));
      const reply = async (sender: string, spec: Partial<DraftSpec>) =>
        (await h.append(draft({ channel: '@pm', sender, ...spec })))[0];
      const researchSees = ['@research', 'product'];
      // research neither sent nor received the direct message, nor may replay @qa
      const hidden = await reply('research', { replyToId: dm!.message_id, readable: researchSees });
      expect(codeOf(hidden)).toBe('reply_to_not_found');
      expect(hidden?.status === 'rejected' && hidden.error.field).toBe('reply_to');
      expect(codeOf(await reply('research', { replyToId: uuidv7(T0) }))).toBe('reply_to_not_found');
      // nor a direct channel's sequence it has no part in
      const bySeq = (await h.append(draft({ channel: '@qa', sender: 'research', replyTo: 1 })))[0];
      expect(codeOf(bySeq)).toBe('reply_to_not_found');
      expect(bySeq?.status === 'rejected' && bySeq.error.field).toBe('reply_to_sequence_id');
      expect(await h.messages('@pm')).toEqual([]);
      expect(await h.messages('@qa')).toHaveLength(1);
      // who may: its sender, its recipient (a delivery), a member of its channel, alerts_to
      expect(codeOf(await reply('pm', { replyToId: dm!.message_id }))).toBe(201);
      expect(codeOf(await reply('qa', { replyToId: dm!.message_id }))).toBe(201);
      expect(codeOf(await reply('research', { replyToId: group!.message_id }))).toBe(
        'reply_to_not_found', // a member it may be, but the store was not told so
      );
      expect(
        codeOf(await reply('research', { replyToId: group!.message_id, readable: researchSees })),
      ).toBe(201);
      expect(codeOf(await reply(ALERTS_TO, { replyToId: dm!.message_id }))).toBe(201);
      // both fields, naming different messages
      const both = (
        await h.append(
          draft({ channel: '@qa', sender: 'pm', replyTo: 1, replyToId: group!.message_id }),
        )
      )[0];
      expect(codeOf(both)).toBe('invalid_envelope');
      const same = await h.append(
        draft({ channel: '@qa', sender: 'pm', replyTo: 1, replyToId: dm!.message_id }),
      );
      expect(codeOf(same[0])).toBe(201);
    });

    it('refuses a reply past the hop budget with hop_budget_exceeded, storing nothing; a continuation by alerts_to starts the chain again', async () => {
      const h = await open({}, [], {}, { hops: 3, messages: 100 });
      // pm and qa answer each other in their direct channels: hops 0, 1, 2, 3
      const chain = [(await h.send(draft({ channel: '@qa', sender: 'pm' })))[0]!];
      const thread = chain[0]!.message_id;
      const answer = (sender: string, to: Assignment) =>
        h.append(
          draft({ channel: sender === 'qa' ? '@pm' : '@qa', sender, replyToId: to.message_id }),
        );
      for (const sender of ['qa', 'pm', 'qa']) {
        const [o] = await answer(sender, chain[chain.length - 1]!);
        if (o?.status !== 201) throw new Error(`refused: ${codeOf(o)}`);
        chain.push(o.assignment);
      }
      expect(chain.map((a) => [a.thread_id, a.hop])).toEqual([0, 1, 2, 3].map((n) => [thread, n]));
      const [refused] = await answer('pm', chain[3]!);
      expect(codeOf(refused)).toBe('hop_budget_exceeded');
      expect(refused?.status === 'rejected' && refused.error.status).toBe(422);
      expect(await h.messages('@qa')).toHaveLength(2); // hops 0 and 2: the refusal took no number
      // alerts_to continues the thread: hop 0 again, and an answer to it is hop 1
      const [cont] = await h.send(
        draft({ channel: '@pm', sender: ALERTS_TO, replyToId: chain[3]!.message_id }),
      );
      expect(cont).toMatchObject({ thread_id: thread, hop: 0 });
      const [onward] = await answer('pm', cont!);
      expect(onward).toMatchObject({ status: 201, assignment: { thread_id: thread, hop: 1 } });
      // the chain it continued is as deep as before: an answer to its end is still refused
      expect(codeOf((await answer('pm', chain[3]!))[0])).toBe('hop_budget_exceeded');
    });

    it('refuses the message past the thread budget with thread_budget_exceeded; refusals do not count; a continuation by alerts_to counts as the first', async () => {
      const h = await open({}, ['product'], {}, { hops: 100, messages: 4 });
      const seen = { readable: ['product'] };
      const [root] = await h.send(draft({ channel: 'product', sender: 'pm' }));
      const thread = root!.message_id;
      const inThread = (sender: string, replyToId = thread) =>
        draft({ channel: 'product', sender, replyToId, ...seen });
      // the root and three replies: four messages of agents
      const stored = await h.send(inThread('qa'), inThread('engineering'), inThread('qa'));
      for (let i = 0; i < 2; i++) {
        expect(codeOf((await h.append(inThread('research')))[0])).toBe('thread_budget_exceeded');
      }
      expect(await h.messages('product')).toHaveLength(4);
      const later = inThread('growth'); // stored below, and repeated once the thread is full
      // alerts_to continues (in its own direct channel with pm): it counts as the first again
      const [cont] = await h.send(draft({ channel: '@pm', sender: ALERTS_TO, replyToId: thread }));
      expect(cont).toMatchObject({ thread_id: thread, hop: 0 });
      const more = await h.send(inThread('research'), inThread('qa'), later);
      expect(more.map((a) => a.thread_id)).toEqual([thread, thread, thread]);
      const refusedAgain = (await h.append(inThread('engineering', stored[0]!.message_id)))[0];
      expect(codeOf(refusedAgain)).toBe('thread_budget_exceeded');
      // a repeat of a stored reply is a duplicate, not a refusal: the key comes first
      expect(codeOf((await h.append(later))[0])).toBe(200);
      // another thread has its own count
      const [other] = await h.send(draft({ channel: 'product', sender: 'qa' }));
      expect(codeOf((await h.append(inThread('pm', other!.message_id)))[0])).toBe(201);
    });

    it('stores exactly one of 20 replies in one group to a thread one short of its budget', async () => {
      const h = await open({}, ['product'], {}, { hops: 100, messages: 3 });
      const [root] = await h.send(draft({ channel: 'product', sender: 'pm' }));
      const reply = (sender: string) =>
        draft({ channel: 'product', sender, replyToId: root!.message_id, readable: ['product'] });
      await h.send(reply('qa')); // two of three
      const senders = ['qa', 'engineering', 'research', 'growth'];
      const outcomes = await h.append(
        ...Array.from({ length: 20 }, (_, i) => reply(senders[i % 4]!)),
      );
      expect(outcomes.map(codeOf)).toEqual([201, ...Array(19).fill('thread_budget_exceeded')]);
      expect(await h.messages('product')).toHaveLength(3);
    });

    it('raises alert/budget to alerts_to for the first refusal at once, then once per sender and window with the count since, across threads', async () => {
      const h = await open(
        { alertWindowMs: 30_000 },
        ['@engineering'],
        {},
        { hops: 1, messages: 100 },
      );
      const start = async (sender: string, at: number) => {
        const [root] = await h.send(draft({ channel: '@qa', sender, at }));
        const [reply] = await h.send(
          draft({ channel: `@${sender}`, sender: 'qa', replyToId: root!.message_id, at }),
        );
        return { thread: root!.message_id, reply: reply! };
      };
      // pm opens 3 threads, engineering 1
      const [a, b, c] = [await start('pm', T0), await start('pm', T0), await start('pm', T0)];
      const e = await start('engineering', T0);
      const refuse = async (sender: string, t: { reply: Assignment }, at: number) => {
        const spec = { channel: '@qa', sender, replyToId: t.reply.message_id, at };
        const { results, effects } = await h.run([{ op: 'append', drafts: [draft(spec)] }]);
        expect(codeOf(outcomesOf(results[0])[0])).toBe('hop_budget_exceeded');
        return effects.alerts;
      };
      const alert = (
        sender: string,
        thread: string,
        count: number,
        replied: readonly { reply: Assignment }[],
      ): SentAlert => ({
        kind: 'alert/budget',
        payload: {
          reason: 'hop_budget_exceeded',
          thread_id: thread,
          sender,
          count,
          message_ids: replied.map((t) => t.reply.message_id),
        },
      });
      expect(await refuse('pm', a, T0 + 1)).toEqual([alert('pm', a.thread, 1, [a])]);
      // more of pm's refusals, in the same thread and in new ones, wait for the window
      for (let i = 0; i < 3; i++) expect(await refuse('pm', a, T0 + 2 + i)).toEqual([]);
      expect(await refuse('pm', b, T0 + 5)).toEqual([]);
      expect(await refuse('pm', c, T0 + 6)).toEqual([]);
      // another sender's first refusal goes out at once: aggregated per sender
      expect(await refuse('engineering', e, T0 + 10)).toEqual([
        alert('engineering', e.thread, 1, [e]),
      ]);
      expect((await h.sweep(T0 + 30_000)).effects.alerts).toEqual([]);
      // one alert for pm's five: the latest thread, every message replied to
      const window = alert('pm', c.thread, 5, [a, b, c]);
      expect((await h.sweep(T0 + 30_001)).effects.alerts).toEqual([window]);
      const written = await h.alerts();
      expect(written.map((m) => [m.kind, m.sender, m.priority])).toEqual(
        Array(3).fill(['alert/budget', 'adapter', 'critical']),
      );
      expect(written.map((m) => m.payload)).toEqual(
        [alert('pm', a.thread, 1, [a]), alert('engineering', e.thread, 1, [e]), window].map(
          (x) => x.payload,
        ),
      );
      expect((await h.sweep(T0 + 90_000)).effects.alerts).toEqual([]);
    });

    it('pages a thread across channels in commit order, bounded in bytes, with a cursor to go on from', async () => {
      const h = await open({}, ['product']);
      const seen = { readable: ['product', '@qa', '@pm'] };
      const [root] = await h.send(draft({ channel: '@qa', sender: 'pm' }));
      const thread = root!.message_id;
      await h.send(draft({ channel: 'product', sender: 'pm' })); // not in the thread
      const [r1] = await h.send(
        draft({ channel: 'product', sender: 'qa', replyToId: thread, ...seen }),
      );
      await h.send(draft({ channel: '@qa', sender: 'pm' })); // nor this
      const [r2] = await h.send(
        draft({ channel: '@pm', sender: ALERTS_TO, replyToId: r1!.message_id }),
      );
      const [r3] = await h.send(
        draft({ channel: ALERTS_CHANNEL, sender: 'pm', replyToId: r2!.message_id }),
      );
      const ids = [root, r1, r2, r3].map((a) => a!.message_id);
      const page = async (after: number, limit: number, maxBytes?: number) => {
        const p = await h.store.threadMessages(thread, after, limit, maxBytes);
        return { ...p, messages: p.messages.map(parse) };
      };
      const all = await page(0, 100);
      expect(all.messages.map((m) => m.message_id)).toEqual(ids);
      expect(all.messages.map((m) => m.channel)).toEqual(['@qa', 'product', '@pm', ALERTS_CHANNEL]);
      expect(all.messages.every((m) => m.thread_id === thread)).toBe(true);
      // pages of two, each going on from the last one's cursor, to an empty page
      const p1 = await page(0, 2);
      const p2 = await page(p1.nextAfter!, 2);
      const p3 = await page(p2.nextAfter!, 2);
      expect([p1, p2].map((p) => p.messages.map((m) => m.message_id))).toEqual([
        ids.slice(0, 2),
        ids.slice(2),
      ]);
      expect(p3).toEqual({ messages: [], nextAfter: null });
      // bounded in bytes: ends before passing it, and holds one however small the bound
      const raw = (await h.store.threadMessages(thread, 0, 100)).messages;
      const two = raw
        .slice(0, 2)
        .reduce((n, j) => n + Buffer.byteLength(j) + PAGE_ITEM_OVERHEAD, 0);
      expect((await page(0, 100, two)).messages.map((m) => m.message_id)).toEqual(ids.slice(0, 2));
      expect((await page(0, 100, two - 1)).messages).toHaveLength(1);
      expect((await page(0, 100, 1)).messages).toHaveLength(1);
      // a reply starts no thread of its own; an unknown thread, or no id at all, is an empty page
      for (const unknown of [r1!.message_id, uuidv7(T0), 'not-an-id']) {
        expect(await h.store.threadMessages(unknown, 0, 100)).toEqual({
          messages: [],
          nextAfter: null,
        });
      }
      // a message that fails its checksum is skipped, and the page still holds `limit`
      await h.corrupt('product', 2); // r1
      const skipped = await page(0, 2);
      expect(skipped.messages.map((m) => m.message_id)).toEqual([ids[0], ids[2]]);
    });

    it('forgets the count of a thread quiet for the retention period, with its pruned messages', async () => {
      const h = await open({}, ['product'], {}, { hops: 100, messages: 2 });
      const seen = { readable: ['product'] };
      const [root] = await h.send(
        draft({ channel: 'product', sender: 'pm', kind: 'task/request', at: T0 }),
      );
      const reply = (at: number) =>
        draft({ channel: 'product', sender: 'qa', replyToId: root!.message_id, at, ...seen });
      await h.send(reply(T0));
      expect(codeOf((await h.append(reply(T0 + 1)))[0])).toBe('thread_budget_exceeded');
      await h.one({ op: 'prune', before: T0 + DAY, keep: ['task/request'], limit: 10 });
      expect((await h.messages('product')).map((m) => m.message_id)).toEqual([root!.message_id]);
      expect(codeOf((await h.append(reply(T0 + 2 * DAY)))[0])).toBe(201);
    });
  });

  describe(`${name}: fan-out`, () => {
    it('fans one message out to every recipient, each of whom can lease it once, and wakes them all', async () => {
      const h = await open({}, ['all-agents']);
      const team = ['qa', 'engineering', 'research', 'growth', 'orchestrator'];
      const d = draft({ channel: 'all-agents', to: team });
      const { results, effects } = await h.run([{ op: 'append', drafts: [d] }]);
      const [outcome] = outcomesOf(results[0]);
      if (outcome?.status !== 201) throw new Error('not stored');
      expect([...effects.woken].sort()).toEqual([...team].sort());
      const deliveryIds = new Set<number>();
      for (const agent of team) {
        expect(await h.depth(agent)).toEqual({ all: 1, critical: 0 });
        const got = await h.lease(agent, 10, T0);
        expect(idsOf(got)).toEqual([outcome.assignment.message_id]);
        deliveryIds.add(got[0]!.delivery_id);
        expect(await h.lease(agent, 10, T0)).toEqual([]);
      }
      expect(deliveryIds.size).toBe(team.length);
      expect(await h.depth('pm')).toEqual({ all: 0, critical: 0 }); // the sender got none
      // a fan-out in a group that fails leaves no copy with anyone
      await expect(
        h.run([
          { op: 'append', drafts: [draft({ channel: 'all-agents', to: team })] },
          { op: 'append', drafts: [draft({ channel: 'no-counter', to: ['qa'] })] },
        ]),
      ).rejects.toThrow();
      for (const agent of team) {
        expect(await h.depth(agent)).toEqual({ all: 1, critical: 0 });
        expect(await h.lease(agent, 10, T0 + 1)).toEqual([]);
      }
    });
  });
}
