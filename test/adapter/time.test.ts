/**
 * Time in the envelope through a real adapter on SQLite and on PostgreSQL (docs/design/time.md): deadlines per
 * copy (`expires_at`, `ttl_ms`), scheduled messages (`deliver_at`) and their cancel. The clock is
 * the adapter's own, moved by the test; the due timer's sweep is run as the timer runs it.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/store.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';
import { until } from '../helpers/wait.js';

let t: TestAdapter | undefined;
let dropDb: (() => Promise<void>) | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await dropDb?.();
  dropDb = undefined;
});

const T0 = Date.parse('2026-12-06T12:00:00Z');
let clock = T0;

let engine: 'sqlite' | 'postgresql' = 'sqlite';

/** An adapter on the test's clock (`real`: on the real one, its due timer left to itself). */
async function start(
  overrides: Record<string, string> = {},
  { real = false, wrapStore }: { real?: boolean; wrapStore?: (s: Store) => Store } = {},
): Promise<TestAdapter> {
  clock = T0;
  const db: Record<string, string> = {};
  if (engine === 'postgresql') {
    const pg = await testDatabase();
    dropDb = pg.drop;
    db.db = pg.url;
  }
  t = await startTestAdapter(
    { ...overrides, ...db },
    { ...(real ? {} : { now: () => clock }), ...(wrapStore === undefined ? {} : { wrapStore }) },
  );
  return t;
}

function send(from: string, body: object) {
  return call(t!.url, 'POST', '/v1/messages', {
    agent: from,
    body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: {}, ...body },
  });
}

/** What the due timer does when it fires at `clock`. */
async function sweep(): Promise<void> {
  await t!.store.commit([{ op: 'sweep', now: clock }]);
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

describe.each(['sqlite', 'postgresql'] as const)('on %s', (store) => {
  beforeEach(() => {
    engine = store;
  });

  it('expires an unacked copy at its deadline: never handed over, a dead letter `expired` with its alert, the lane released', async () => {
    await start();
    const late = await send('pm', { ttl_ms: 60_000, payload: { n: 1 } });
    expect(late.status).toBe(201);
    expect(late.body.expires_at).toBe(iso(T0 + 60_000));
    const behind = await send('pm', { payload: { n: 2 } });
    clock += 60_000;
    // past the deadline and before the sweep: the expired head is not handed over, and holds
    // its lane only until the sweep armed for it
    expect(await pollAs(t!.url, 'qa')).toEqual([]);
    await sweep();
    const got = await pollAs(t!.url, 'qa');
    expect(got.map((d: Json) => d.message.message_id)).toEqual([behind.body.message_id]);
    const status = await call(t!.url, 'GET', `/v1/messages/${late.body.message_id}`, {
      agent: 'pm',
    });
    expect(status.body.recipients).toEqual([
      { agent: 'qa', state: 'dead_letter', attempts: 0, reason: 'expired' },
    ]);
    const [alert] = await pollAs(t!.url, 'orchestrator');
    expect(alert.message).toMatchObject({
      kind: 'alert/dead-letter',
      payload: { reason: 'expired', recipient: 'qa', message_ids: [late.body.message_id] },
    });
    const journey = await call(t!.url, 'GET', `/v1/messages/${late.body.message_id}/journey`, {
      agent: 'pm',
    });
    expect(journey.body.recipients[0]).toMatchObject({ cause: 'dead_letter', reason: 'expired' });
  });

  it('takes the ack of a lease that runs across the deadline; past it, a lease that ends unacked is expired, not retried', async () => {
    await start({ leaseMs: '30000' });
    const a = await send('pm', { expires_at: iso(T0 + 10_000), payload: { n: 1 } });
    const b = await send('pm', { expires_at: iso(T0 + 10_000), to: '@engineering' });
    expect([a.status, b.status]).toEqual([201, 201]);
    const [forQa] = await pollAs(t!.url, 'qa');
    const [forEng] = await pollAs(t!.url, 'engineering');
    clock += 20_000; // past the deadline, inside both leases
    await sweep();
    const ack = await call(t!.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: [forQa.delivery_id] },
    });
    expect(ack.body.acked).toEqual([forQa.delivery_id]);
    clock += 20_000; // engineering's lease ends unacked
    await sweep();
    const status = await call(t!.url, 'GET', `/v1/messages/${b.body.message_id}`, { agent: 'pm' });
    expect(status.body.recipients).toEqual([
      { agent: 'engineering', state: 'dead_letter', attempts: 1, reason: 'expired' },
    ]);
    expect(forEng.message.expires_at).toBe(iso(T0 + 10_000));
  });

  it('refuses a deadline already past, both forms at once, and a deadline before deliver_at, naming the field; a retry after the deadline is still its duplicate', async () => {
    await start();
    const past = await send('pm', { expires_at: iso(T0 - 1) });
    expect(past.status).toBe(400);
    expect(past.body).toMatchObject({ error: 'invalid_envelope', field: 'expires_at' });
    const both = await send('pm', { expires_at: iso(T0 + 1000), ttl_ms: 1000 });
    expect(both.body).toMatchObject({ error: 'invalid_envelope', field: 'ttl_ms' });
    const before = await send('pm', { deliver_at: iso(T0 + 5000), expires_at: iso(T0 + 5000) });
    expect(before.body).toMatchObject({ error: 'invalid_envelope', field: 'expires_at' });
    const bad = await send('pm', { expires_at: 'tomorrow' });
    expect(bad.body).toMatchObject({ error: 'invalid_envelope', field: 'expires_at' });
    const far = await send('pm', { deliver_at: iso(T0 + 366 * 86_400_000) });
    expect(far.body).toMatchObject({ error: 'invalid_envelope', field: 'deliver_at' });

    const body = {
      idempotency_key: randomUUID(),
      to: '@qa',
      kind: 'status',
      payload: {},
      expires_at: iso(T0 + 1000),
    };
    const first = await call(t!.url, 'POST', '/v1/messages', { agent: 'pm', body });
    clock += 5000;
    const again = await call(t!.url, 'POST', '/v1/messages', { agent: 'pm', body });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ message_id: first.body.message_id, duplicate: true });
  });

  it('schedules a message: 201 with no sequence, invisible until due, then sent with the next sequence of its channel', async () => {
    await start();
    const key = randomUUID();
    const body = {
      idempotency_key: key,
      to: '@qa',
      kind: 'status',
      payload: { later: true },
      deliver_at: iso(T0 + 60_000),
    };
    const later = await call(t!.url, 'POST', '/v1/messages', { agent: 'pm', body });
    expect(later.status).toBe(201);
    expect(later.body).toMatchObject({
      channel: '@qa',
      channel_sequence_id: null,
      scheduled_for: iso(T0 + 60_000),
    });
    const id = later.body.message_id;
    const now = await send('pm', { payload: { now: true } });
    expect(now.body.channel_sequence_id).toBe(1);
    const status = await call(t!.url, 'GET', `/v1/messages/${id}`, { agent: 'pm' });
    expect(status.body).toMatchObject({ scheduled_for: iso(T0 + 60_000), recipients: [] });
    expect(status.body.message.channel_sequence_id).toBeNull();
    const journey = await call(t!.url, 'GET', `/v1/messages/${id}/journey`, { agent: 'pm' });
    expect(journey.body.recipients).toMatchObject([{ agent: 'qa', cause: 'scheduled' }]);
    expect((await call(t!.url, 'GET', `/v1/messages/${id}`, { agent: 'qa' })).status).toBe(403);
    // a repeat before it fires: the same answer, nothing new
    const repeat = await call(t!.url, 'POST', '/v1/messages', { agent: 'pm', body });
    expect(repeat.status).toBe(200);
    expect(repeat.body).toMatchObject({ message_id: id, channel_sequence_id: null });

    const first = await pollAs(t!.url, 'qa');
    expect(first.map((d: Json) => d.message.payload)).toEqual([{ now: true }]);
    await call(t!.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: [first[0].delivery_id] },
    });
    clock += 59_999;
    await sweep();
    expect(await pollAs(t!.url, 'qa')).toEqual([]);
    clock += 1;
    await sweep();
    const [fired] = await pollAs(t!.url, 'qa');
    expect(fired.message).toMatchObject({
      message_id: id,
      channel_sequence_id: 2,
      scheduled_for: iso(T0 + 60_000),
      timestamp_iso8601: iso(T0),
      payload: { later: true },
    });
    const replay = await call(t!.url, 'GET', '/v1/channels/@qa/messages?after=0', { agent: 'qa' });
    expect(replay.body.messages.map((m: Json) => m.channel_sequence_id)).toEqual([1, 2]);
    const after = await call(t!.url, 'POST', '/v1/messages', { agent: 'pm', body });
    expect(after.body).toMatchObject({ message_id: id, channel_sequence_id: 2, duplicate: true });
    const cancel = await call(t!.url, 'DELETE', `/v1/messages/${id}`, { agent: 'pm' });
    expect(cancel.status).toBe(409);
    expect(cancel.body.error).toBe('already_sent');
  });

  it('cancels a scheduled message for its sender only; it never fires and its key stays taken', async () => {
    await start();
    const body = {
      idempotency_key: randomUUID(),
      to: 'product',
      kind: 'status',
      payload: {},
      deliver_at: iso(T0 + 1000),
    };
    const later = await call(t!.url, 'POST', '/v1/messages', { agent: 'pm', body });
    const id = later.body.message_id;
    const theirs = await call(t!.url, 'DELETE', `/v1/messages/${id}`, { agent: 'engineering' });
    expect(theirs.status).toBe(403);
    expect(theirs.body.error).toBe('not_your_message');
    expect((await call(t!.url, 'DELETE', `/v1/messages/${id}`, { agent: 'pm' })).status).toBe(204);
    expect((await call(t!.url, 'DELETE', `/v1/messages/${id}`, { agent: 'pm' })).status).toBe(204);
    const unknown = await call(t!.url, 'DELETE', `/v1/messages/${randomUUID()}`, { agent: 'pm' });
    expect(unknown.status).toBe(404);
    clock += 5000;
    await sweep();
    expect(await pollAs(t!.url, 'engineering')).toEqual([]);
    const status = await call(t!.url, 'GET', `/v1/messages/${id}`, { agent: 'pm' });
    expect(status.body).toMatchObject({ cancelled_at: iso(T0), recipients: [] });
    const repeat = await call(t!.url, 'POST', '/v1/messages', { agent: 'pm', body });
    expect(repeat.body).toMatchObject({
      message_id: id,
      channel_sequence_id: null,
      duplicate: true,
    });
  });
  it('expires a copy by its own due timer: the lane behind it flows with no sweep run by hand', async () => {
    await start({}, { real: true });
    const late = await send('pm', { ttl_ms: 300, payload: { n: 1 } });
    const behind = await send('pm', { payload: { n: 2 } });
    expect([late.status, behind.status]).toEqual([201, 201]);
    // no poll before: the deadline alone must arm the timer, whose sweep dead-letters the head
    const statusOf = async () =>
      (await call(t!.url, 'GET', `/v1/messages/${late.body.message_id}`, { agent: 'pm' })).body;
    await until(
      async () => (await statusOf()).recipients[0].state === 'dead_letter',
      'the copy past its deadline dead-lettered by the due timer',
    );
    expect((await statusOf()).recipients).toMatchObject([
      { state: 'dead_letter', reason: 'expired', attempts: 0 },
    ]);
    const got = await pollAs(t!.url, 'qa', { wait: 5 });
    expect(got.map((d) => d.message.message_id)).toEqual([behind.body.message_id]);
  });

  it('keeps its timer quiet for a message scheduled past what a Node timer can wait (24.8 days)', async () => {
    let reads = 0;
    const counting = (s: Store): Store =>
      new Proxy(s, {
        get(target, key) {
          const v = Reflect.get(target, key, target);
          if (typeof v !== 'function') return v;
          // the store's methods on the store itself (its private fields are its own)
          if (key !== 'nextDue') return v.bind(target);
          return (now: number) => {
            reads++;
            return (v as Store['nextDue']).call(target, now);
          };
        },
      });
    await start({}, { real: true, wrapStore: counting });
    const far = await send('pm', {
      deliver_at: new Date(Date.now() + 300 * 86_400_000).toISOString(),
    });
    expect(far.status).toBe(201);
    const before = reads;
    // a poll that waits out a second: a timer that fired at once would read the next due time
    // again each millisecond meanwhile (hundreds of reads); an armed one reads it not at all
    expect(await pollAs(t!.url, 'qa', { wait: 1 })).toEqual([]);
    expect(reads - before).toBeLessThan(20);
  });
});
