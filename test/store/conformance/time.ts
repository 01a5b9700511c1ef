/**
 * The storage conformance suite: time in the envelope (docs/design/time.md). Deadlines belong to
 * each copy: a copy past its deadline is never leased, the sweep dead-letters it `expired` and
 * releases its lane, a lease across it may still be acked, a lease ending or a nack past it is
 * `expired`, not retried. Scheduled messages wait out of `messages` with a null sequence, fire in
 * the sweep with the channel's next sequence in (deliver_at, id) order, keep their key taken,
 * and may be cancelled by their sender until they fire.
 */
import { describe, expect, it } from 'vitest';
import { uuidv7 } from '../../../src/protocol/ids.js';
import type {
  AlertPayload,
  AppendOutcome,
  JourneyRows,
  MessageDraft,
} from '../../../src/store/store.js';
import {
  ALERTS_CHANNEL,
  type DraftSpec,
  draft,
  errorCode,
  type Harness,
  idsOf,
  iso,
  type Open,
  T0,
} from './harness.js';

const MIN = 60_000;

/** A draft with a deadline and/or a time to be sent, absolute ms. */
const timed = (s: DraftSpec, t: { deliverAt?: number; expiresAt?: number }): MessageDraft => ({
  ...draft(s),
  ...t,
});

/** One recipient's events of a journey, as [event, attempt]. */
const eventsOf = (j: JourneyRows | undefined, recipient: string) =>
  (j?.events ?? []).filter((e) => e.recipient === recipient).map((e) => [e.event, e.attempt]);

/** The alert/dead-letter an `expired` copy of `messageId` raises, the first of its window. */
const expiredAlert = (recipient: string, messageId: string, attempts: number) => ({
  kind: 'alert/dead-letter',
  payload: {
    reason: 'expired',
    recipient,
    count: 1,
    message_ids: [messageId],
    attempts,
  } satisfies AlertPayload,
});

/** Each recipient's [state, attempts, reason], from the message's status. */
async function states(h: Harness, messageId: string) {
  const s = await h.store.messageStatus(messageId);
  return Object.fromEntries(
    (s?.recipients ?? []).map((r) => [r.agent, [r.state, r.attempts, r.reason]]),
  );
}

/** A scheduled message stored (201); its assignment. */
async function schedule(h: Harness, s: DraftSpec, deliverAt: number, expiresAt?: number) {
  const [a] = await h.send(
    timed(s, expiresAt === undefined ? { deliverAt } : { deliverAt, expiresAt }),
  );
  return a!;
}

/** Sweeps at `now` until nothing more is due by then (a full chunk re-arms at once). */
async function sweepAll(h: Harness, now: number): Promise<number> {
  for (let sweeps = 1; sweeps <= 20; sweeps++) {
    await h.sweep(now);
    const due = await h.store.nextDue(now);
    if (due === undefined || due > now) return sweeps;
  }
  throw new Error(`still due at ${iso(now)} after 20 sweeps`);
}

const cancel = (h: Harness, sender: string, messageId: string, now: number) =>
  h.settle({ op: 'cancel_scheduled', sender, messageId, now });

export function timeConformance(name: string, open: Open): void {
  describe(`${name}: deadlines`, () => {
    it('never leases a pending copy past its deadline; the sweep dead-letters it expired, with its alert, and releases the lane', async () => {
      const h = await open({}, ['product']);
      const sent = await h.run([
        { op: 'append', drafts: [timed({ channel: '@qa', at: T0 }, { expiresAt: T0 + 10_000 })] },
      ]);
      // a deadline is a moment the due timer must know of: it reads nextDue again
      expect(sent.effects.timingChanged).toBe(true);
      const m1 = (sent.results[0] as { ok: AppendOutcome[] }).ok.map((o) =>
        o.status === 'rejected' ? undefined : o.assignment,
      )[0];
      expect(m1).toMatchObject({ channel_sequence_id: 1, expires_at: iso(T0 + 10_000) });
      const [m2] = await h.send(draft({ channel: '@qa', at: T0 + 1 }));
      const [other] = await h.send(draft({ channel: 'product', to: ['qa'], at: T0 + 2 }));
      expect(await h.store.nextDue(T0 + 3)).toBe(T0 + 10_000);
      // at its deadline: its lane stops in front of it, other lanes go on
      expect(idsOf(await h.lease('qa', 10, T0 + 10_000))).toEqual([other!.message_id]);
      const { effects } = await h.sweep(T0 + 10_000);
      expect(effects.alerts).toEqual([expiredAlert('qa', m1!.message_id, 0)]);
      expect(effects.woken.has('qa')).toBe(true);
      const dead = await h.deadLetters();
      expect(dead.map((d) => [d.reason, d.recipient, d.attempts, d.message.message_id])).toEqual([
        ['expired', 'qa', 0, m1!.message_id],
      ]);
      expect(dead[0]!.message).toMatchObject({ expires_at: iso(T0 + 10_000) });
      expect(await h.alerts()).toMatchObject([
        {
          sender: 'adapter',
          to: ALERTS_CHANNEL,
          kind: 'alert/dead-letter',
          priority: 'critical',
          payload: expiredAlert('qa', m1!.message_id, 0).payload,
        },
      ]);
      const j = await h.store.journey(m1!.message_id);
      expect(eventsOf(j, 'qa')).toEqual([['dead_lettered', 0]]);
      expect(JSON.parse(j!.events[0]!.detail!)).toEqual({ reason: 'expired', note: null });
      expect(await states(h, m1!.message_id)).toEqual({ qa: ['dead_letter', 0, 'expired'] });
      // the lane is released: the next message of @qa is handed out
      expect(idsOf(await h.lease('qa', 10, T0 + 10_001))).toEqual([m2!.message_id]);
      expect(await h.depth('qa')).toEqual({ all: 2, critical: 0 });
    });

    it("arms the due timer for a pending copy's deadline when it is the earliest, not for a leased copy's", async () => {
      const h = await open({ leaseMs: 30_000 }, ['product']);
      await h.send(draft({ channel: '@qa', at: T0 }));
      await h.send(
        timed({ channel: 'product', to: ['qa'], at: T0 + 1 }, { expiresAt: T0 + 5_000 }),
      );
      expect(await h.lease('qa', 10, T0 + 2)).toHaveLength(2); // both leased until T0 + 30_002
      expect(await h.store.nextDue(T0 + 3)).toBe(T0 + 30_002);
      await h.send(timed({ channel: '@pm', sender: 'qa', at: T0 + 4 }, { expiresAt: T0 + 9_000 }));
      expect(await h.store.nextDue(T0 + 5)).toBe(T0 + 9_000);
      await h.send(timed({ channel: '@pm', sender: 'qa', at: T0 + 6 }, { expiresAt: T0 + 7_000 }));
      expect(await h.store.nextDue(T0 + 7)).toBe(T0 + 7_000);
    });

    it('takes the ack of a copy leased before its deadline after it, while its lease holds', async () => {
      const h = await open({ leaseMs: 30_000 });
      const [m] = await h.send(timed({ channel: '@qa', at: T0 }, { expiresAt: T0 + 10_000 }));
      const [d] = await h.lease('qa', 10, T0 + 1);
      expect(d).toMatchObject({
        attempt: 1,
        lease_expires_at: iso(T0 + 30_001),
        message: { message_id: m!.message_id, expires_at: iso(T0 + 10_000) },
      });
      await h.sweep(T0 + 20_000);
      expect(await h.deadLetters()).toEqual([]);
      expect(
        await h.one({ op: 'ack', agent: 'qa', ids: [d!.delivery_id], now: T0 + 20_000 }),
      ).toEqual({ acked: [d!.delivery_id], dead: [], unknown: [] });
      await h.sweep(T0 + 40_000);
      expect(await h.deadLetters()).toEqual([]);
      expect(await states(h, m!.message_id)).toEqual({ qa: ['acked', 1, null] });
      expect(eventsOf(await h.store.journey(m!.message_id), 'qa')).toEqual([
        ['leased', 1],
        ['acked', 1],
      ]);
    });

    it('dead-letters a copy whose lease ends unacked past its deadline as expired, not retried; before it, retried', async () => {
      const h = await open({ leaseMs: 30_000, retryBaseMs: 1000, maxRetries: 3 }, ['product']);
      const [late] = await h.send(timed({ channel: '@qa', at: T0 }, { expiresAt: T0 + 10_000 }));
      const [early] = await h.send(
        timed({ channel: 'product', to: ['qa'], at: T0 + 1 }, { expiresAt: T0 + 100_000 }),
      );
      expect(await h.lease('qa', 10, T0 + 2)).toHaveLength(2);
      const { effects } = await h.sweep(T0 + 30_002);
      expect(effects.alerts).toEqual([expiredAlert('qa', late!.message_id, 1)]);
      expect(
        (await h.deadLetters()).map((d) => [d.reason, d.attempts, d.message.message_id]),
      ).toEqual([['expired', 1, late!.message_id]]);
      expect(eventsOf(await h.store.journey(late!.message_id), 'qa')).toEqual([
        ['leased', 1],
        ['lease_expired', 1],
        ['dead_lettered', 1],
      ]);
      // the one whose deadline is still ahead waits out its backoff and comes back
      const again = await h.lease('qa', 10, T0 + 31_002);
      expect(again).toMatchObject([{ attempt: 2, message: { message_id: early!.message_id } }]);
      expect(await h.depth('qa')).toEqual({ all: 1, critical: 0 });
    });

    it('dead-letters a copy nacked past its deadline as expired, not retried', async () => {
      const h = await open({ leaseMs: 30_000, maxRetries: 3 });
      const [m] = await h.send(timed({ channel: '@qa', at: T0 }, { expiresAt: T0 + 10_000 }));
      const [d] = await h.lease('qa', 10, T0 + 1);
      const { results, effects } = await h.run([
        { op: 'nack', agent: 'qa', ids: [d!.delivery_id], now: T0 + 10_001 },
      ]);
      expect(results[0]).toEqual({ ok: { nacked: [d!.delivery_id], ignored: [], unknown: [] } });
      expect(effects.alerts).toEqual([expiredAlert('qa', m!.message_id, 1)]);
      expect((await h.deadLetters()).map((x) => [x.reason, x.attempts])).toEqual([['expired', 1]]);
      expect(await h.lease('qa', 10, T0 + 100_000)).toEqual([]);
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
      expect(eventsOf(await h.store.journey(m!.message_id), 'qa')).toEqual([
        ['leased', 1],
        ['nacked', 1],
        ['dead_lettered', 1],
      ]);
    });

    it('refuses a deadline already past at receipt (400 naming expires_at), but answers a retry of a stored message as its duplicate after its deadline', async () => {
      const h = await open();
      for (const expiresAt of [T0, T0 - 1]) {
        const [out] = await h.append(timed({ channel: '@qa', key: 'past', at: T0 }, { expiresAt }));
        if (out?.status !== 'rejected') throw new Error(`not refused: ${JSON.stringify(out)}`);
        expect([out.error.code, out.error.status, out.error.field]).toEqual([
          'invalid_envelope',
          400,
          'expires_at',
        ]);
      }
      expect(await h.messages('@qa')).toEqual([]);
      expect(await h.store.isStored('pm', 'past')).toBe(false);
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
      // stored before its deadline, sent again after it: the same message, 200
      const [first] = await h.send(
        timed({ channel: '@qa', key: 'k', at: T0 }, { expiresAt: T0 + 1000 }),
      );
      expect(first!.channel_sequence_id).toBe(1);
      const [again] = await h.append(
        timed({ channel: '@qa', key: 'k', at: T0 + 5000 }, { expiresAt: T0 + 1000 }),
      );
      expect(again).toMatchObject({
        status: 200,
        assignment: {
          message_id: first!.message_id,
          channel_sequence_id: 1,
          timestamp_iso8601: iso(T0),
        },
      });
      expect(await h.messages('@qa')).toHaveLength(1);
    });

    it("expires each copy on its own: one recipient's ack leaves the other's copy to expire", async () => {
      const h = await open({}, ['product']);
      const [m] = await h.send(
        timed({ channel: 'product', to: ['qa', 'dev'], at: T0 }, { expiresAt: T0 + 10_000 }),
      );
      const [d] = await h.lease('qa', 10, T0 + 1);
      await h.ack('qa', [d!.delivery_id]);
      expect(await h.store.nextDue(T0 + 2)).toBe(T0 + 10_000);
      const { effects } = await h.sweep(T0 + 10_000);
      expect(effects.alerts).toEqual([expiredAlert('dev', m!.message_id, 0)]);
      expect((await h.deadLetters()).map((x) => [x.reason, x.recipient])).toEqual([
        ['expired', 'dev'],
      ]);
      expect(await states(h, m!.message_id)).toEqual({
        qa: ['acked', 1, null],
        dev: ['dead_letter', 0, 'expired'],
      });
      expect(await h.store.nextDue(T0 + 10_000)).toBeUndefined();
    });

    it("keeps a replayed dead letter's deadline: replayed after it, it expires again at once", async () => {
      const h = await open();
      const [m] = await h.send(timed({ channel: '@qa', at: T0 }, { expiresAt: T0 + 10_000 }));
      await h.sweep(T0 + 10_000);
      const [dl] = await h.deadLetters();
      const replay = await h.one({ op: 'replay_dead_letter', id: dl!.id, now: T0 + 20_000 });
      expect(replay).toEqual({ delivery_id: expect.any(Number), replayed: true });
      expect(await h.lease('qa', 10, T0 + 20_001)).toEqual([]);
      expect(await h.store.nextDue(T0 + 20_001)).toBeLessThanOrEqual(T0 + 20_001);
      await h.sweep(T0 + 20_001);
      const open_ = await h.deadLetters();
      expect(open_.map((x) => [x.reason, x.message.message_id])).toEqual([
        ['expired', m!.message_id],
      ]);
      expect(open_[0]!.id).not.toBe(dl!.id);
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
    });
  });

  describe(`${name}: scheduled messages`, () => {
    it('acknowledges a scheduled message with a null sequence and scheduled_for; no reader sees it and nothing is leasable', async () => {
      const h = await open();
      const { results, effects } = await h.run([
        {
          op: 'append',
          drafts: [timed({ channel: '@qa', key: 'later', at: T0 }, { deliverAt: T0 + MIN })],
        },
      ]);
      const [out] = (results[0] as { ok: { status: number; assignment: { message_id: string } }[] })
        .ok;
      const id = out!.assignment.message_id;
      expect(out).toEqual({
        status: 201,
        assignment: {
          message_id: expect.any(String),
          channel: '@qa',
          channel_sequence_id: null,
          timestamp_iso8601: iso(T0),
          scheduled_for: iso(T0 + MIN),
          idempotency_key: 'later',
          priority: 'normal',
          thread_id: id,
          hop: 0,
        },
      });
      expect(effects.timingChanged).toBe(true);
      expect(effects.woken.size).toBe(0);
      expect(await h.lease('qa', 10, T0 + 1)).toEqual([]);
      expect(await h.messages('@qa')).toEqual([]);
      expect(await h.store.threadMessages(id, 0, 10)).toEqual({ messages: [], nextAfter: null });
      expect(await h.depth('qa')).toEqual({ all: 0, critical: 0 });
      expect((await h.store.lastSequences())['@qa']).toBe(0);
      expect(await h.store.nextDue(T0 + 1)).toBe(T0 + MIN);
    });

    it("tells a scheduled message's status: scheduled_for, no sequence, no recipients' rows yet", async () => {
      const h = await open({}, ['product']);
      const a = await schedule(h, { channel: 'product', to: ['qa', 'dev'], at: T0 }, T0 + MIN);
      const s = await h.store.messageStatus(a.message_id);
      expect(s).toMatchObject({
        sender: 'pm',
        scheduled_for: iso(T0 + MIN),
        scheduledTo: ['qa', 'dev'],
        recipients: [],
      });
      expect(s!.cancelled_at).toBeUndefined();
      expect(JSON.parse(s!.message)).toMatchObject({
        message_id: a.message_id,
        channel: 'product',
        channel_sequence_id: null,
        timestamp_iso8601: iso(T0),
        scheduled_for: iso(T0 + MIN),
      });
    });

    it("fires at deliver_at with the channel's next sequence, gap-free and in commit order", async () => {
      const h = await open();
      const s = await schedule(h, { channel: '@qa', at: T0 }, T0 + MIN);
      const [o1] = await h.send(draft({ channel: '@qa', at: T0 + 1 }));
      expect(o1!.channel_sequence_id).toBe(1);
      await h.sweep(T0 + MIN - 1);
      expect((await h.messages('@qa')).map((m) => m.message_id)).toEqual([o1!.message_id]);
      const { effects } = await h.sweep(T0 + MIN);
      expect(effects.woken.has('qa')).toBe(true);
      const [o2] = await h.send(draft({ channel: '@qa', at: T0 + MIN + 1 }));
      expect(o2!.channel_sequence_id).toBe(3);
      const got = await h.messages('@qa');
      expect(got.map((m) => [m.message_id, m.channel_sequence_id])).toEqual([
        [o1!.message_id, 1],
        [s.message_id, 2],
        [o2!.message_id, 3],
      ]);
      // sent with its receipt time and its scheduled_for
      expect(got[1]).toMatchObject({ timestamp_iso8601: iso(T0), scheduled_for: iso(T0 + MIN) });
      expect((await h.store.lastSequences())['@qa']).toBe(3);
      const status = await h.store.messageStatus(s.message_id);
      expect(status?.scheduled_for).toBeUndefined();
      expect(status?.recipients).toMatchObject([{ agent: 'qa', state: 'pending', attempts: 0 }]);
      expect(idsOf(await h.lease('qa', 10, T0 + MIN + 2))).toEqual([
        o1!.message_id,
        s.message_id,
        o2!.message_id,
      ]);
      // fired once: a later sweep sends it no more
      await h.sweep(T0 + 2 * MIN);
      expect(await h.messages('@qa')).toHaveLength(3);
    });

    it('fires messages due together in (deliver_at, id) order', async () => {
      const h = await open();
      // b is stored after a, though received (and so its message_id made) before it
      const a = await schedule(h, { channel: '@qa', at: T0 + 1 }, T0 + 2 * MIN);
      const b = await schedule(h, { channel: '@qa', at: T0 }, T0 + 2 * MIN);
      const c = await schedule(h, { channel: '@qa', at: T0 + 2 }, T0 + MIN);
      expect(await h.store.nextDue(T0 + 3)).toBe(T0 + MIN);
      await h.sweep(T0 + 3 * MIN);
      expect((await h.messages('@qa')).map((m) => [m.message_id, m.channel_sequence_id])).toEqual([
        [c.message_id, 1],
        [a.message_id, 2],
        [b.message_id, 3],
      ]);
      expect(await h.store.nextDue(T0 + 3 * MIN)).toBeUndefined();
    });

    it('answers a repeat of the key as its duplicate, null sequence before it fires and its sequence after, and schedules it once', async () => {
      const h = await open();
      const first = await schedule(h, { channel: '@qa', key: 'k', at: T0 }, T0 + MIN);
      // the key is taken while it waits: a repeat takes no send-rate token (isStored)
      expect(await h.store.isStored('pm', 'k')).toBe(true);
      expect(await h.store.messageIdOf('pm', 'k')).toBe(first.message_id);
      const [before] = await h.append(
        timed({ channel: '@qa', key: 'k', at: T0 + 10 }, { deliverAt: T0 + MIN }),
      );
      expect(before).toMatchObject({
        status: 200,
        assignment: {
          message_id: first.message_id,
          channel_sequence_id: null,
          timestamp_iso8601: iso(T0),
          scheduled_for: iso(T0 + MIN),
        },
      });
      const [conflict] = await h.append({
        ...timed({ channel: '@qa', key: 'k', at: T0 + 20 }, { deliverAt: T0 + MIN }),
        fingerprint: Buffer.alloc(32, 7),
      });
      expect(conflict?.status === 'rejected' && conflict.error.code).toBe('idempotency_conflict');
      await sweepAll(h, T0 + MIN);
      expect((await h.messages('@qa')).map((m) => m.message_id)).toEqual([first.message_id]);
      expect(await h.lease('qa', 10, T0 + MIN + 1)).toHaveLength(1);
      const [after] = await h.append(
        timed({ channel: '@qa', key: 'k', at: T0 + 2 * MIN }, { deliverAt: T0 + MIN }),
      );
      expect(after).toMatchObject({
        status: 200,
        assignment: { message_id: first.message_id, channel_sequence_id: 1 },
      });
      await h.sweep(T0 + 4 * MIN);
      expect(await h.messages('@qa')).toHaveLength(1);
    });

    it('cancels a scheduled message before it fires: it never fires, a repeated cancel answers alike, its key stays taken', async () => {
      const h = await open();
      const s = await schedule(h, { channel: '@qa', key: 'k', at: T0 }, T0 + MIN);
      expect(await cancel(h, 'pm', s.message_id, T0 + 10)).toEqual({
        ok: { cancelled: true, changed: true },
      });
      // a repeat answers as the first, and says it changed nothing
      expect(await cancel(h, 'pm', s.message_id, T0 + 20)).toEqual({
        ok: { cancelled: true, changed: false },
      });
      expect(await h.store.nextDue(T0 + 30)).toBeUndefined();
      await h.sweep(T0 + MIN);
      await h.sweep(T0 + 2 * MIN);
      expect(await h.messages('@qa')).toEqual([]);
      expect(await h.lease('qa', 10, T0 + 2 * MIN)).toEqual([]);
      expect((await h.store.lastSequences())['@qa']).toBe(0);
      expect(await h.store.messageStatus(s.message_id)).toMatchObject({
        sender: 'pm',
        scheduled_for: iso(T0 + MIN),
        cancelled_at: iso(T0 + 10),
        recipients: [],
      });
      const [again] = await h.append(
        timed({ channel: '@qa', key: 'k', at: T0 + 2 * MIN }, { deliverAt: T0 + MIN }),
      );
      expect(again).toMatchObject({
        status: 200,
        assignment: { message_id: s.message_id, channel_sequence_id: null },
      });
      await h.sweep(T0 + 4 * MIN);
      expect(await h.messages('@qa')).toEqual([]);
      expect(await h.store.nextDue(T0 + 4 * MIN)).toBeUndefined();
    });

    it('refuses a cancel after the fire (already_sent), by anyone else (not_your_message), of an unknown id (not_found)', async () => {
      const h = await open();
      const s = await schedule(h, { channel: '@qa', at: T0 }, T0 + MIN);
      expect(errorCode(await cancel(h, 'dev', s.message_id, T0 + 1))).toBe('not_your_message');
      expect(errorCode(await cancel(h, 'pm', uuidv7(T0), T0 + 1))).toBe('not_found');
      expect(errorCode(await cancel(h, 'pm', 'not-a-message-id', T0 + 1))).toBe('not_found');
      await h.sweep(T0 + MIN);
      const late = await cancel(h, 'pm', s.message_id, T0 + MIN + 1);
      expect(late).toMatchObject({ err: { code: 'already_sent', status: 409 } });
      expect(errorCode(await cancel(h, 'dev', s.message_id, T0 + MIN + 1))).toBe(
        'not_your_message',
      );
      // the refusals changed nothing: it was sent once, and its copy waits
      expect((await h.messages('@qa')).map((m) => m.message_id)).toEqual([s.message_id]);
      expect(idsOf(await h.lease('qa', 10, T0 + MIN + 2))).toEqual([s.message_id]);
    });

    it('counts the deadline of a scheduled message from its fire: its copies expire after being sendable', async () => {
      const h = await open({}, ['product']);
      const s = await schedule(
        h,
        { channel: 'product', to: ['qa', 'dev'], at: T0 },
        T0 + MIN,
        T0 + MIN + 10_000,
      );
      expect(s.expires_at).toBe(iso(T0 + MIN + 10_000));
      expect(await h.store.nextDue(T0 + 1)).toBe(T0 + MIN);
      await h.sweep(T0 + MIN);
      expect(await h.store.nextDue(T0 + MIN)).toBe(T0 + MIN + 10_000);
      const [d] = await h.lease('qa', 10, T0 + MIN + 5_000);
      expect(d).toMatchObject({
        message: { message_id: s.message_id, expires_at: iso(T0 + MIN + 10_000) },
      });
      await h.ack('qa', [d!.delivery_id]);
      const { effects } = await h.sweep(T0 + MIN + 10_000);
      expect(effects.alerts).toEqual([expiredAlert('dev', s.message_id, 0)]);
      expect(await states(h, s.message_id)).toEqual({
        qa: ['acked', 1, null],
        dev: ['dead_letter', 0, 'expired'],
      });
    });

    it('fires a scheduled message once across a reopen of the store', async () => {
      const h = await open();
      if (h.reopen === undefined) return; // this store cannot be reopened by the suite
      const s = await schedule(h, { channel: '@qa', at: T0 }, T0 + MIN);
      await h.reopen();
      expect(await h.store.nextDue(T0 + 1)).toBe(T0 + MIN);
      await h.sweep(T0 + MIN);
      await h.reopen();
      await h.sweep(T0 + 2 * MIN);
      expect((await h.messages('@qa')).map((m) => [m.message_id, m.channel_sequence_id])).toEqual([
        [s.message_id, 1],
      ]);
      expect(idsOf(await h.lease('qa', 10, T0 + 2 * MIN))).toEqual([s.message_id]);
      expect(await h.store.messageStatus(s.message_id)).toMatchObject({
        recipients: [{ agent: 'qa', state: 'leased', attempts: 1 }],
      });
    });

    it('fires more than a chunk of due messages in order, with gap-free sequences', async () => {
      const h = await open();
      const count = 450;
      const at = (i: number) => T0 + MIN + (i % 3) * 1000;
      const drafts = Array.from({ length: count }, (_, i) =>
        timed({ channel: '@qa', key: `s-${i}`, at: T0 }, { deliverAt: at(i) }),
      );
      for (let i = 0; i < count; i += 50) await h.send(...drafts.slice(i, i + 50));
      const [o] = await h.send(draft({ channel: '@qa', key: 'ordinary', at: T0 + 1 }));
      expect(o!.channel_sequence_id).toBe(1);
      expect(await h.store.nextDue(T0 + 2)).toBe(T0 + MIN);
      await sweepAll(h, T0 + MIN + 2000);
      const expected = [...Array(count).keys()]
        .sort((a, b) => at(a) - at(b) || a - b)
        .map((i) => `s-${i}`);
      const got = await h.messages('@qa');
      expect(got.map((m) => m.idempotency_key)).toEqual(['ordinary', ...expected]);
      expect(got.map((m) => m.channel_sequence_id)).toEqual(
        Array.from({ length: count + 1 }, (_, i) => i + 1),
      );
      expect(await h.depth('qa')).toEqual({ all: count + 1, critical: 0 });
      expect(await h.store.nextDue(T0 + MIN + 2000)).toBeUndefined();
    });
  });
}
