/**
 * Time across a SIGKILL of a real adapter process (docs/design/time.md: "a restart finds every
 * deadline and every schedule in the rows"): a scheduled message not yet due when the adapter is
 * killed fires once after the restart, with its channel's next sequence; one that fired before
 * the kill is not fired again; and an ask's reply is found after the adapter was killed between
 * the question and the answer. The adapter keeps the real clock here, so schedules are a couple
 * of seconds ahead; every wait is for an event, bounded. On SQLite and on PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type ChildAdapter, spawnAdapter } from '../helpers/cli.js';
import { call, type Json, pollAs, sendAs } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';
import { tempDir, writeTopology } from '../helpers/topology.js';
import { parkedPolls, until } from '../helpers/wait.js';

let dir: string;
let cleanup: () => void;
let db: string;
let args: string[];
let engine: 'sqlite' | 'postgresql' = 'sqlite';
let dropDb: (() => Promise<void>) | undefined;
/** Every adapter started, stopped by its pid after each test. */
const started: ChildAdapter[] = [];

/** A fresh store of the engine under test (a file, or a database), and the adapter's flags. */
async function setup(): Promise<void> {
  ({ dir, cleanup } = tempDir('agw-sched-kill-'));
  if (engine === 'postgresql') {
    const d = await testDatabase();
    dropDb = d.drop;
    db = d.url;
  } else db = join(dir, 'adapter.db');
  args = ['--topology', writeTopology(dir), '--db', db];
}

afterEach(async () => {
  for (const a of started.splice(0)) {
    if (a.child.exitCode === null && a.child.signalCode === null) process.kill(a.pid, 'SIGKILL');
    await a.exited;
  }
  cleanup();
  await dropDb?.();
  dropDb = undefined;
});

async function start(): Promise<ChildAdapter> {
  const a = await spawnAdapter(args);
  started.push(a);
  return a;
}

/** SIGKILL by pid, and wait until it is gone. */
async function kill(a: ChildAdapter): Promise<void> {
  process.kill(a.pid, 'SIGKILL');
  expect((await a.exited).signal).toBe('SIGKILL');
}

/** What the store holds of `messageId` (the adapter is down): its scheduled row, its sent rows. */
async function rowsOf(messageId: string): Promise<{ scheduled: number; sent: number }> {
  const scheduled =
    'SELECT count(*) AS n FROM scheduled WHERE message_id = $1 AND cancelled_at IS NULL';
  const sent = 'SELECT count(*) AS n FROM messages WHERE message_id = $1';
  if (engine === 'postgresql') {
    const c = new pg.Client({ connectionString: db });
    await c.connect();
    try {
      const count = async (sql: string) =>
        Number((await c.query<{ n: string }>(sql, [messageId])).rows[0]!.n);
      return { scheduled: await count(scheduled), sent: await count(sent) };
    } finally {
      await c.end();
    }
  }
  const conn = new Database(db);
  try {
    const count = (sql: string) =>
      (conn.prepare(sql.replace('$1', '?')).get(messageId) as { n: number }).n;
    return { scheduled: count(scheduled), sent: count(sent) };
  } finally {
    conn.close();
  }
}

/** pm schedules a message to @qa `aheadMs` from now: its 201. */
async function schedule(url: string, aheadMs: number): Promise<Json> {
  const deliverAt = new Date(Date.now() + aheadMs).toISOString();
  const r = await call(url, 'POST', '/v1/messages', {
    agent: 'pm',
    body: {
      idempotency_key: randomUUID(),
      to: '@qa',
      kind: 'status',
      payload: { later: true },
      deliver_at: deliverAt,
    },
  });
  expect(r.status).toBe(201);
  expect(r.body).toMatchObject({ channel_sequence_id: null, scheduled_for: deliverAt });
  return r.body;
}

/** Long polls of `agent` until something comes (bounded by `until`); what came. */
async function receive(url: string, agent: string): Promise<Json[]> {
  let got: Json[] = [];
  await until(async () => {
    got = await pollAs(url, agent, { wait: 5 });
    return got.length > 0;
  }, `a delivery for ${agent}`);
  return got;
}

async function ack(url: string, agent: string, deliveries: Json[]): Promise<void> {
  const ids = deliveries.map((d) => d.delivery_id);
  const r = await call(url, 'POST', '/v1/acks', { agent, body: { delivery_ids: ids } });
  expect(r.body.acked).toEqual(ids);
}

/** pm sends a plain message to @qa, qa receives and acks it: its sequence. */
async function exchange(url: string, payload: object): Promise<number> {
  const id = await sendAs(url, 'pm', '@qa', 'status', payload);
  const got = await receive(url, 'qa');
  expect(got.map((d) => d.message.message_id)).toEqual([id]);
  await ack(url, 'qa', got);
  return got[0].message.channel_sequence_id as number;
}

/** The message ids of @qa's channel, in sequence order, as qa replays them. */
async function channelIds(url: string): Promise<string[]> {
  const r = await call(url, 'GET', '/v1/channels/@qa/messages?after=0&limit=1000', {
    agent: 'qa',
  });
  expect(r.status).toBe(200);
  return r.body.messages.map((m: Json) => m.message_id);
}

describe.each(['sqlite', 'postgresql'] as const)('on %s', (store) => {
  beforeEach(async () => {
    engine = store;
    await setup();
  });

  it('a message scheduled before the kill, not yet due, fires once after the restart with the next sequence', {
    timeout: 120_000,
  }, async () => {
    let adapter = await start();
    expect(await exchange(adapter.url, { n: 1 })).toBe(1);
    const scheduled = await schedule(adapter.url, 2000);
    const id = scheduled.message_id as string;
    await kill(adapter);
    // the kill came before it fell due: still a scheduled row, nothing sent
    expect(await rowsOf(id)).toEqual({ scheduled: 1, sent: 0 });

    adapter = await start();
    const [fired, ...more] = await receive(adapter.url, 'qa');
    expect(more).toEqual([]);
    expect(fired.message).toMatchObject({
      message_id: id,
      channel: '@qa',
      channel_sequence_id: 2,
      scheduled_for: scheduled.scheduled_for,
      timestamp_iso8601: scheduled.timestamp_iso8601,
      payload: { later: true },
    });
    expect(fired.attempt).toBe(1);
    await ack(adapter.url, 'qa', [fired]);
    expect(await pollAs(adapter.url, 'qa')).toEqual([]);

    const status = await call(adapter.url, 'GET', `/v1/messages/${id}`, { agent: 'pm' });
    expect(status.status).toBe(200);
    expect(status.body.scheduled_for).toBeUndefined();
    expect(status.body.message.channel_sequence_id).toBe(2);
    expect(status.body.recipients).toMatchObject([{ agent: 'qa', state: 'acked', attempts: 1 }]);
    // the next message of the channel follows it: no gap, no second copy in between
    expect(await exchange(adapter.url, { n: 3 })).toBe(3);
    const ids = await channelIds(adapter.url);
    expect(ids).toHaveLength(3);
    expect(ids[1]).toBe(id);
  });

  it('a scheduled message that fired and was delivered before the kill is not fired again after the restart', {
    timeout: 120_000,
  }, async () => {
    let adapter = await start();
    const scheduled = await schedule(adapter.url, 1500);
    const id = scheduled.message_id as string;
    const [fired, ...more] = await receive(adapter.url, 'qa');
    expect(more).toEqual([]);
    expect(fired.message).toMatchObject({ message_id: id, channel_sequence_id: 1 });
    await ack(adapter.url, 'qa', [fired]);
    await kill(adapter);
    // sent in the transaction that deleted its scheduled row: nothing left to fire
    expect(await rowsOf(id)).toEqual({ scheduled: 0, sent: 1 });

    adapter = await start();
    // the restart's first sweep ran before ready; the next message of @qa is the next sequence,
    // and the only one qa is handed: no second copy of the scheduled one before or after it
    const marker = await sendAs(adapter.url, 'pm', '@qa', 'status', { marker: true });
    const got = await receive(adapter.url, 'qa');
    expect(got.map((d) => d.message.message_id)).toEqual([marker]);
    expect(got[0].message.channel_sequence_id).toBe(2);
    await ack(adapter.url, 'qa', got);
    expect(await pollAs(adapter.url, 'qa')).toEqual([]);
    expect(await channelIds(adapter.url)).toEqual([id, marker]);
    const again = await call(adapter.url, 'DELETE', `/v1/messages/${id}`, { agent: 'pm' });
    expect(again.status).toBe(409);
    expect(again.body.error).toBe('already_sent');
  });

  it('an ask survives the kill: the reply sent after the restart answers the wait for it', {
    timeout: 120_000,
  }, async () => {
    let adapter = await start();
    const asked = await sendAs(adapter.url, 'pm', '@qa', 'status', { text: 'ready?' });
    // pm's wait for the reply is parked when the adapter dies: it ends without an answer
    const reply = (url: string, wait: number) =>
      call(url, 'GET', `/v1/messages/${asked}/reply?wait=${wait}`, { agent: 'pm' });
    const lost = reply(adapter.url, 25).then(
      (r) => `answered ${r.status}`,
      () => 'connection lost',
    );
    await until(
      async () => (await parkedReplyWaits(adapter.url, 'pm')) === 1,
      'the reply wait parked',
    );
    await kill(adapter);
    expect(await lost).toBe('connection lost');

    adapter = await start();
    // the question is still qa's to receive, and pm asks again and parks
    const [question] = await receive(adapter.url, 'qa');
    expect(question.message).toMatchObject({ message_id: asked, sender: 'pm' });
    const waiting = reply(adapter.url, 25);
    await until(
      async () => (await parkedReplyWaits(adapter.url, 'pm')) === 1,
      'the reply wait parked again',
    );
    const answer = await call(adapter.url, 'POST', '/v1/messages', {
      agent: 'qa',
      body: {
        idempotency_key: randomUUID(),
        to: '@pm',
        kind: 'status',
        reply_to: asked,
        payload: { a: 'yes' },
      },
    });
    expect(answer.status).toBe(201);
    await ack(adapter.url, 'qa', [question]);
    const got = await waiting;
    expect(got.status).toBe(200);
    expect(got.body.delivery).toMatchObject({
      state: 'leased',
      attempt: 1,
      message: {
        message_id: answer.body.message_id,
        reply_to: asked,
        sender: 'qa',
        payload: { a: 'yes' },
      },
    });
    // handed to the ask, not again to pm's inbox
    expect(await parkedPolls(adapter.url, 'pm')).toBe(0);
    expect(await pollAs(adapter.url, 'pm')).toEqual([]);
  });

  /** The adapter's count of `agent`'s reply waits parked now (agw_agent_parked_reply_waits). */
  async function parkedReplyWaits(url: string, agent: string): Promise<number> {
    const text = (await call(url, 'GET', '/metrics')).body as string;
    const m = new RegExp(`^agw_agent_parked_reply_waits\\{agent="${agent}"\\} (\\d+)$`, 'm').exec(
      text,
    );
    return m === null ? 0 : Number(m[1]);
  }
});
