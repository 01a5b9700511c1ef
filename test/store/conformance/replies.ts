/**
 * The storage conformance suite: an ask's reply (take_reply; docs/design/time.md, "Asking"). The
 * first copy held by the asker of a message answering the asked one is leased out of its lane's
 * order, renewed when leased, answered as it is when acked or dead-lettered; the asked message
 * must be the asker's own.
 */
import { describe, expect, it } from 'vitest';
import { uuidv7 } from '../../../src/protocol/ids.js';
import type { Delivery } from '../../../src/protocol/wire.js';
import type { JourneyRows } from '../../../src/store/store.js';
import { draft, errorCode, type Harness, iso, type Open, T0 } from './harness.js';

/** take_reply's answer, parsed: a delivery with its state (undefined: none yet). */
type Reply = Omit<Delivery, 'lease_expires_at'> & {
  lease_expires_at: string | null;
  state: 'leased' | 'acked' | 'dead_letter';
};

async function take(h: Harness, agent: string, messageId: string, now: number) {
  const got = await h.one({ op: 'take_reply', agent, messageId, now });
  return got === undefined ? undefined : (JSON.parse(got) as Reply);
}

/** One recipient's events of a journey, as [event, attempt]. */
const eventsOf = (j: JourneyRows | undefined, recipient: string) =>
  (j?.events ?? []).filter((e) => e.recipient === recipient).map((e) => [e.event, e.attempt]);

export function repliesConformance(name: string, open: Open): void {
  describe(`${name}: an ask's reply`, () => {
    it("leases the asker's pending reply at once, ahead of its lane, which then waits behind it", async () => {
      const h = await open({ leaseMs: 10_000 });
      // pm asks qa; dev's message reaches @pm before qa's answer, and another after it
      const [asked] = await h.send(draft({ channel: '@qa', sender: 'pm', at: T0 }));
      const [before] = await h.send(draft({ channel: '@pm', sender: 'dev', at: T0 + 1 }));
      expect(await take(h, 'pm', asked!.message_id, T0 + 2)).toBeUndefined();
      const [reply] = await h.send(
        draft({ channel: '@pm', sender: 'qa', replyToId: asked!.message_id, at: T0 + 3 }),
      );
      const [after] = await h.send(draft({ channel: '@pm', sender: 'dev', at: T0 + 4 }));
      const { results, effects } = await h.run([
        { op: 'take_reply', agent: 'pm', messageId: asked!.message_id, now: T0 + 5 },
      ]);
      const got = JSON.parse((results[0] as { ok: string }).ok) as Reply;
      expect(got).toMatchObject({
        attempt: 1,
        state: 'leased',
        lease_expires_at: iso(T0 + 5 + 10_000),
        message: {
          message_id: reply!.message_id,
          reply_to: asked!.message_id,
          channel: '@pm',
          channel_sequence_id: 2,
        },
      });
      expect(effects.timingChanged).toBe(true);
      expect(await h.store.nextDue(T0 + 5)).toBe(T0 + 5 + 10_000);
      // the lane goes on from its head as far as the taken reply, and waits for its ack there
      const polled = await h.lease('pm', 10, T0 + 6);
      expect(polled.map((d) => d.message.message_id)).toEqual([before!.message_id]);
      await h.ack('pm', [polled[0]!.delivery_id]);
      expect(await h.lease('pm', 10, T0 + 7)).toEqual([]);
      expect(await h.ack('pm', [got.delivery_id])).toMatchObject({ acked: [got.delivery_id] });
      const next = await h.lease('pm', 10, T0 + 8);
      expect(next.map((d) => d.message.message_id)).toEqual([after!.message_id]);
      expect(eventsOf(await h.store.journey(reply!.message_id), 'pm')).toEqual([
        ['leased', 1],
        ['acked', 1],
      ]);
    });

    it('renews a leased reply from now, same attempt, with lease_extended in its journey', async () => {
      const h = await open({ leaseMs: 10_000 });
      const [asked] = await h.send(draft({ channel: '@qa', sender: 'pm', at: T0 }));
      const [reply] = await h.send(
        draft({ channel: '@pm', sender: 'qa', replyToId: asked!.message_id, at: T0 + 1 }),
      );
      // handed over by an inbox poll first: the ask that comes later takes it over
      const [polled] = await h.lease('pm', 10, T0 + 2);
      expect(polled!.message.message_id).toBe(reply!.message_id);
      const got = await take(h, 'pm', asked!.message_id, T0 + 4_000);
      expect(got).toMatchObject({
        delivery_id: polled!.delivery_id,
        attempt: 1,
        state: 'leased',
        lease_expires_at: iso(T0 + 4_000 + 10_000),
      });
      // the lease ends at its new end, not at the first
      await h.sweep(T0 + 2 + 10_000);
      expect(await take(h, 'pm', asked!.message_id, T0 + 13_000)).toMatchObject({
        state: 'leased',
        attempt: 1,
        lease_expires_at: iso(T0 + 23_000),
      });
      const j = await h.store.journey(reply!.message_id);
      expect(eventsOf(j, 'pm')).toEqual([
        ['leased', 1],
        ['lease_extended', 1],
        ['lease_extended', 1],
      ]);
      expect(JSON.parse(j!.events[2]!.detail!)).toEqual({ lease_expires_at: iso(T0 + 23_000) });
    });

    it('answers an acked or dead-lettered reply as it is, with its state and no lease', async () => {
      const h = await open();
      const [a1] = await h.send(draft({ channel: '@qa', sender: 'pm', at: T0 }));
      const [a2] = await h.send(draft({ channel: '@qa', sender: 'pm', at: T0 + 1 }));
      const [r1] = await h.send(
        draft({ channel: '@pm', sender: 'qa', replyToId: a1!.message_id, at: T0 + 2 }),
      );
      const [r2] = await h.send(
        draft({ channel: '@pm', sender: 'qa', replyToId: a2!.message_id, at: T0 + 3 }),
      );
      const [d1, d2] = await h.lease('pm', 10, T0 + 4);
      await h.ack('pm', [d1!.delivery_id]);
      await h.one({
        op: 'nack',
        agent: 'pm',
        ids: [d2!.delivery_id],
        now: T0 + 5,
        retry: false,
        reason: 'no',
      });
      expect(await take(h, 'pm', a1!.message_id, T0 + 6)).toMatchObject({
        delivery_id: d1!.delivery_id,
        attempt: 1,
        state: 'acked',
        lease_expires_at: null,
        message: { message_id: r1!.message_id },
      });
      expect(await take(h, 'pm', a2!.message_id, T0 + 6)).toMatchObject({
        delivery_id: d2!.delivery_id,
        state: 'dead_letter',
        lease_expires_at: null,
        message: { message_id: r2!.message_id },
      });
      // nothing of theirs changed
      expect(eventsOf(await h.store.journey(r1!.message_id), 'pm')).toEqual([
        ['leased', 1],
        ['acked', 1],
      ]);
    });

    it("takes the first reply's copy held by the asker, and no one else's copy", async () => {
      const h = await open({}, ['product']);
      const [asked] = await h.send(draft({ channel: 'product', to: ['qa', 'dev'], sender: 'pm' }));
      // qa answers in the channel: copies for pm and dev; then dev answers pm directly
      const [first] = await h.send(
        draft({
          channel: 'product',
          to: ['pm', 'dev'],
          sender: 'qa',
          replyToId: asked!.message_id,
          at: T0 + 1,
        }),
      );
      const [second] = await h.send(
        draft({ channel: '@pm', sender: 'dev', replyToId: asked!.message_id, at: T0 + 2 }),
      );
      const got = await take(h, 'pm', asked!.message_id, T0 + 3);
      expect(got?.message.message_id).toBe(first!.message_id);
      expect(await take(h, 'pm', asked!.message_id, T0 + 4)).toMatchObject({
        delivery_id: got!.delivery_id,
        state: 'leased',
      });
      // dev's copy of qa's answer is dev's to poll; pm's direct answer waits in @pm
      expect((await h.lease('dev', 10, T0 + 5)).map((d) => d.message.message_id)).toEqual([
        asked!.message_id,
        first!.message_id,
      ]);
      expect((await h.lease('pm', 10, T0 + 5)).map((d) => d.message.message_id)).toEqual([
        second!.message_id,
      ]);
    });

    it('refuses an ask about a message the asker did not send, and answers none for its own not yet answered', async () => {
      const h = await open({}, ['@dev']);
      const [theirs] = await h.send(draft({ channel: '@qa', sender: 'dev', at: T0 }));
      const [mine] = await h.send(draft({ channel: '@qa', sender: 'pm', at: T0 + 1 }));
      await h.send(
        draft({ channel: '@dev', sender: 'qa', replyToId: theirs!.message_id, at: T0 + 2 }),
      );
      const ask = (messageId: string) =>
        h.settle({ op: 'take_reply', agent: 'pm', messageId, now: T0 + 3 });
      expect(errorCode(await ask(theirs!.message_id))).toBe('not_found');
      expect(errorCode(await ask(uuidv7(T0)))).toBe('not_found');
      expect(errorCode(await ask('not-a-message-id'))).toBe('not_found');
      expect(await ask(mine!.message_id)).toEqual({ ok: undefined });
    });

    it('answers none, not an error, for a scheduled message of the asker not sent yet', async (ctx) => {
      const h = await open();
      const [out] = await h.append({
        ...draft({ channel: '@qa', sender: 'pm', at: T0 }),
        deliverAt: T0 + 60_000,
      });
      // scheduled messages are the other half of issue 35: until the store keeps them (it
      // refuses deliver_at, or sends at once), there is no scheduled row to ask about
      if (out?.status === 'rejected' && out.error.field === 'deliver_at') ctx.skip();
      if (out?.status !== 201) throw new Error(`not stored: ${JSON.stringify(out)}`);
      if (out.assignment.channel_sequence_id !== null) ctx.skip();
      const id = out.assignment.message_id;
      expect(await take(h, 'pm', id, T0 + 1)).toBeUndefined();
      // and another agent's scheduled message is not its own to ask about
      const theirs = await h.settle({ op: 'take_reply', agent: 'qa', messageId: id, now: T0 + 1 });
      expect(errorCode(theirs)).toBe('not_found');
    });

    it('leaves a pending reply of a paused asker where it is, and hands over one already leased', async () => {
      const h = await open({ leaseMs: 10_000 });
      const [asked] = await h.send(draft({ channel: '@qa', sender: 'pm', at: T0 }));
      await h.send(
        draft({ channel: '@pm', sender: 'qa', replyToId: asked!.message_id, at: T0 + 1 }),
      );
      await h.one({ op: 'pause', agent: 'pm', by: 'operator:alice', now: T0 + 2 });
      expect(await take(h, 'pm', asked!.message_id, T0 + 3)).toBeUndefined();
      await h.one({ op: 'resume', agent: 'pm', by: 'operator:alice', now: T0 + 4 });
      const got = await take(h, 'pm', asked!.message_id, T0 + 5);
      expect(got).toMatchObject({ state: 'leased', attempt: 1 });
      await h.one({ op: 'pause', agent: 'pm', by: 'operator:alice', now: T0 + 6 });
      expect(await take(h, 'pm', asked!.message_id, T0 + 7)).toMatchObject({
        delivery_id: got!.delivery_id,
        state: 'leased',
        lease_expires_at: iso(T0 + 7 + 10_000),
      });
    });

    it('quarantines a reply whose message fails its checksum: a dead letter, never its bytes', async () => {
      const h = await open();
      const [asked] = await h.send(draft({ channel: '@qa', sender: 'pm', at: T0 }));
      await h.send(
        draft({ channel: '@pm', sender: 'qa', replyToId: asked!.message_id, at: T0 + 1 }),
      );
      await h.corrupt('@pm', 1);
      const { results, effects } = await h.run([
        { op: 'take_reply', agent: 'pm', messageId: asked!.message_id, now: T0 + 2 },
      ]);
      expect(JSON.parse((results[0] as { ok: string }).ok)).toMatchObject({
        state: 'dead_letter',
        lease_expires_at: null,
        message: null,
      });
      expect(effects.alerts.map((a) => [a.kind, a.payload.reason])).toEqual([
        ['alert/integrity', 'integrity'],
      ]);
      const [dl] = await h.deadLetters();
      expect(dl).toMatchObject({ reason: 'integrity', recipient: 'pm' });
      expect(await take(h, 'pm', asked!.message_id, T0 + 3)).toMatchObject({
        state: 'dead_letter',
        message: null,
      });
    });
  });
}
