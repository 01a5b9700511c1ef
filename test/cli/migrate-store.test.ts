/**
 * `agent-gateway migrate-store`, run as a real child process of the built CLI, moves a SQLite
 * adapter's store into PostgreSQL so that a PostgreSQL adapter carries on where the SQLite one
 * stopped: every channel's messages byte for byte, the same delivery ids in the same states
 * (a pending one is leased and acked, a leased one stays leased until its lease runs out), the
 * dead letters, the depths, threads and stored bytes, each message's journey (its delivery events
 * and each agent's last poll), and each channel's next number is its last
 * + 1 with no id colliding. It refuses (exit 2, one line) a database that already holds messages,
 * a file another process holds open, and bad arguments; a failure (exit 1) leaves nothing behind.
 */
import { createHash, randomUUID } from 'node:crypto';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Priority } from '../../src/protocol/envelope.js';
import type { Delivery } from '../../src/protocol/wire.js';
import { openStore } from '../../src/store/open.js';
import { newRedriveId } from '../../src/store/rules/operators.js';
import type {
  DeliveryConfig,
  MessageDraft,
  OpResults,
  StorageLimits,
  Store,
  StoreOp,
} from '../../src/store/store.js';
import { runCli } from '../helpers/cli.js';
import { testDatabase } from '../helpers/pg.js';
import { tempDir } from '../helpers/topology.js';

const T0 = Date.UTC(2031, 0, 1);
const ALERTS_TO = 'orchestrator';
const AGENTS = ['orchestrator', 'pm', 'engineering', 'qa', 'research'];
const CHANNELS = ['product', '@orchestrator', '@pm', '@qa', '@engineering'];
const DELIVERY: DeliveryConfig = {
  capacity: 500,
  criticalCapacity: 5000,
  leaseMs: 30_000,
  maxRetries: 3,
  retryBaseMs: 1000,
  alertsTo: ALERTS_TO,
  alertWindowMs: 30_000,
  random: () => 0.5,
};
const NO_BOUNDS: StorageLimits = { maxBytes: 2 ** 40, senderShare: 1, reserveBytes: 0 };
const OPTIONS = { sync: 'full' as const, delivery: DELIVERY, storage: NO_BOUNDS };

function draft(s: {
  channel: string;
  sender: string;
  to?: readonly string[];
  kind?: string;
  priority?: Priority;
  replyToId?: string;
  readable?: readonly string[];
  payload?: unknown;
  at?: number;
}): MessageDraft {
  const key = randomUUID();
  return {
    sender: s.sender,
    idempotencyKey: key,
    fingerprint: createHash('sha256').update(key).digest(),
    channel: s.channel,
    kind: s.kind ?? 'task/update',
    priority: s.priority ?? 'normal',
    replyTo: null,
    ...(s.replyToId === undefined ? {} : { replyToId: s.replyToId }),
    ...(s.readable === undefined ? {} : { readable: new Set(s.readable) }),
    payloadJson: JSON.stringify(s.payload ?? { n: key.slice(0, 8) }),
    receivedAt: s.at ?? T0,
    recipients: s.to ?? (s.channel.startsWith('@') ? [s.channel.slice(1)] : []),
  };
}

async function one<O extends StoreOp>(store: Store, op: O): Promise<OpResults[O['op']]> {
  const { results } = await store.commit([op]);
  const r = results[0]!;
  if ('err' in r) throw r.err;
  return r.ok as OpResults[O['op']];
}

async function send(store: Store, ...drafts: MessageDraft[]) {
  const outcomes = await one(store, { op: 'append', drafts });
  return outcomes.map((o) => {
    if (o.status !== 201) throw new Error(`not stored: ${JSON.stringify(o)}`);
    return o.assignment;
  });
}

async function lease(store: Store, agent: string, max: number, now: number) {
  const got = await one(store, { op: 'lease', agent, max, now });
  return got.map((j) => JSON.parse(j) as Delivery);
}

/** Everything a reader of the store sees, to compare the two stores by. */
async function snapshot(store: Store, threadId: string, messageIds: readonly string[]) {
  const channels: Record<string, string[]> = {};
  for (const c of CHANNELS) channels[c] = await store.channelMessages(c, 0, 10_000);
  const depths: Record<string, { all: number; critical: number }> = {};
  for (const a of AGENTS) depths[a] = await store.depth(a);
  const statuses = [];
  for (const id of messageIds) statuses.push(await store.messageStatus(id));
  const journeys = [];
  for (const id of messageIds) journeys.push(await store.journey(id));
  const pages: Record<string, Record<string, string>> = {};
  for (const a of AGENTS) pages[a] = await store.pageDeliveries(a, 'product', 0, 10_000);
  return {
    channels,
    depths,
    statuses,
    journeys,
    pages,
    agents: await store.agents(AGENTS),
    deadLetters: await store.deadLetters(0, 1000),
    // (its cursor is the store's own: only the messages are compared)
    thread: (await store.threadMessages(threadId, 0, 1000)).messages,
    senders: (await store.storageUse()).senders,
    // the operators' reads (docs/design/operators.md)
    search: await store.searchMessages({ after: 0, limit: 100 }),
    searchKind: await store.searchMessages({ q: 'escalation', after: 0, limit: 100 }),
    openDeadLetters: await store.deadLetters(0, 100, undefined, { recipient: 'qa', q: 'task' }),
    redrives: await Promise.all((await store.runningRedrives()).map((id) => store.redrive(id))),
    audit: await store.audit(0, 100),
    lastSequences: await store.lastSequences(),
  };
}

const { dir, cleanup } = tempDir('agw-migrate-');
const file = join(dir, 'adapter.db');
const databases: { drop(): Promise<void> }[] = [];
let before: Awaited<ReturnType<typeof snapshot>>;
let root: string; // the thread's root message_id
let messageIds: string[];
/** SQLite's delivery ids: qa's pending product #2, engineering's leased product #2. */
let qaPending: number;
let engineeringLeased: number;
let last: { product: number; orchestrator: number };
let rows: Record<string, number>;

beforeAll(async () => {
  const store = await openStore(file, OPTIONS);
  await store.ensureChannels(CHANNELS);
  const product = ['engineering', 'qa', 'research'];
  const [m1] = await send(
    store,
    draft({ channel: 'product', sender: 'pm', to: product, kind: 'task/request', at: T0 }),
  );
  root = m1!.message_id;
  // qa answers pm in pm's direct channel: a thread of two (its row in threads)
  const [m2] = await send(
    store,
    draft({ channel: '@pm', sender: 'qa', replyToId: root, readable: ['product'], at: T0 + 1 }),
  );
  const [m3] = await send(
    store,
    draft({ channel: 'product', sender: 'pm', to: product, at: T0 + 2 }),
  );
  const [m4] = await send(
    store,
    draft({ channel: '@qa', sender: 'pm', kind: 'escalation', priority: 'critical', at: T0 + 3 }),
  );
  // qa: the critical one first, acked; product #1 rejected for good (a dead letter, and its
  // alert to the orchestrator); product #2 left pending
  const [crit] = await lease(store, 'qa', 1, T0 + 10);
  expect(crit!.message.message_id).toBe(m4!.message_id);
  await one(store, { op: 'ack', agent: 'qa', ids: [crit!.delivery_id] });
  const [q1] = await lease(store, 'qa', 1, T0 + 11);
  expect(q1!.message.message_id).toBe(root);
  await one(store, {
    op: 'nack',
    agent: 'qa',
    ids: [q1!.delivery_id],
    now: T0 + 12,
    retry: false,
    reason: 'cannot do this',
  });
  // a second count towards qa's rejected alert inside its 30 s window: kept in alert_state,
  // to go out when the window ends
  await one(store, {
    op: 'alert',
    recipient: 'qa',
    reason: 'rejected',
    messageId: m3!.message_id,
    now: T0 + 12,
  });
  // engineering: product #1 acked, #2 leased (until T0 + 13 + 30 s)
  const [e1] = await lease(store, 'engineering', 1, T0 + 13);
  await one(store, { op: 'ack', agent: 'engineering', ids: [e1!.delivery_id] });
  const [e2] = await lease(store, 'engineering', 1, T0 + 13);
  expect(e2!.message.message_id).toBe(m3!.message_id);
  engineeringLeased = e2!.delivery_id;
  await one(store, { op: 'heartbeat', agent: 'pm', now: T0 + 14 });
  // an operator's acts: pm paused (its journeys say so), a redrive of qa's dead letter
  // made and not stepped yet, and their audit entries
  const by = 'operator:alice';
  await one(store, { op: 'pause', agent: 'pm', by, now: T0 + 15 });
  const made = await one(store, {
    op: 'redrive_create',
    id: newRedriveId(),
    by,
    selection: { filter: { recipient: 'qa' } },
    rate: 10,
    now: T0 + 16,
  });
  expect(made.count).toBe(1);
  for (const [action, target] of [
    ['pause', 'pm'],
    ['redrive', made.redrive_id],
  ] as const) {
    await one(store, {
      op: 'audit',
      entry: { at: T0 + 17, actor: by, action, target, detail: {} },
    });
  }
  messageIds = [root, m2!.message_id, m3!.message_id, m4!.message_id];
  before = await snapshot(store, root, messageIds);
  await store.close();

  // what the file holds, read as the copy must see it
  const db = new Database(file, { readonly: true });
  const count = (table: string) =>
    (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
  rows = Object.fromEntries(
    [
      'channels',
      'messages',
      'deliveries',
      'dead_letters',
      'threads',
      'alert_state',
      'delivery_events',
      'agent_polls',
      'agent_pauses',
      'redrives',
      'audit_log',
    ].map((t) => [t, count(t)]),
  );
  const seq = (c: string) =>
    (db.prepare('SELECT last_seq FROM channels WHERE name = ?').get(c) as { last_seq: number })
      .last_seq;
  last = { product: seq('product'), orchestrator: seq('@orchestrator') };
  qaPending = (
    db
      .prepare(
        `SELECT d.id FROM deliveries d JOIN messages m ON m.id = d.message
         WHERE d.recipient = 'qa' AND m.message_id = ?`,
      )
      .get(m3!.message_id) as { id: number }
  ).id;
  db.close();
  // the scenario is what it says: one of each, and an alert message in @orchestrator
  expect(rows).toMatchObject({ messages: 5, dead_letters: 1, threads: 1, alert_state: 1 });
  // 4 leases, 2 acks, a rejection (nacked, dead_lettered); qa and engineering polled
  expect(rows).toMatchObject({ delivery_events: 8, agent_polls: 2 });
  expect(rows).toMatchObject({ agent_pauses: 1, redrives: 1, audit_log: 2 });
  expect(last).toEqual({ product: 2, orchestrator: 1 });
  expect(before.deadLetters).toHaveLength(1);
  expect(before.thread).toHaveLength(2);
  expect(before.depths.engineering).toEqual({ all: 1, critical: 0 });
  expect(before.depths.qa).toEqual({ all: 1, critical: 0 });
  expect(before.depths.orchestrator).toEqual({ all: 1, critical: 1 });
});

afterAll(async () => {
  for (const d of databases.splice(0)) await d.drop();
  cleanup();
});

async function freshDatabase() {
  const d = await testDatabase();
  databases.push(d);
  return d.url;
}

/** Every row of each copied table, in key order, as each engine answers it. */
const TABLES: Record<string, string> = {
  channels: 'name',
  messages: 'id',
  deliveries: 'id',
  dead_letters: 'id',
  threads: 'thread_id',
  alert_state: 'recipient, reason',
  delivery_events: 'id',
  agent_polls: 'agent',
  agent_pauses: 'id',
  redrives: 'id',
  audit_log: 'seq',
  scheduled: 'id',
};

function sqliteTables(path: string): Record<string, unknown[]> {
  const db = new Database(path, { readonly: true });
  try {
    return Object.fromEntries(
      Object.entries(TABLES).map(([t, key]) => [
        t,
        db.prepare(`SELECT * FROM ${t} ORDER BY ${key}`).all(),
      ]),
    );
  } finally {
    db.close();
  }
}

async function pgTables(url: string): Promise<Record<string, unknown[]>> {
  // bigint columns as numbers, as SQLite answers them
  const client = new pg.Client({
    connectionString: url,
    types: {
      getTypeParser: (oid: number, format?: string) =>
        oid === 20
          ? (v: string) => Number(v)
          : (pg.types.getTypeParser as (o: number, f?: string) => unknown)(oid, format),
    } as pg.CustomTypesConfig,
  });
  await client.connect();
  try {
    const out: Record<string, unknown[]> = {};
    for (const [t, key] of Object.entries(TABLES))
      out[t] = (await client.query(`SELECT * FROM ${t} ORDER BY ${key}`)).rows;
    return out;
  } finally {
    await client.end();
  }
}

async function rowsIn(url: string, table: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows: r } = await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`);
    return Number(r[0]!.n);
  } finally {
    await client.end();
  }
}

const migrate = (from: string, to: string) => runCli(['migrate-store', '--from', from, '--to', to]);

function expectRefusal(res: Awaited<ReturnType<typeof migrate>>, code: number, part: string) {
  expect(res.code, res.stderr).toBe(code);
  const lines = res.stderr.trim().split('\n');
  expect(lines, res.stderr).toHaveLength(1);
  expect(lines[0]).toContain(part);
  expect(lines[0]).toMatch(/^agent-gateway migrate-store: /);
  expect(res.stdout).toBe('');
}

describe('migrate-store', () => {
  let url: string;
  let pgStore: Store;

  beforeAll(async () => {
    url = await freshDatabase();
    // an adapter already started on it once: its schema, channel counters at 0, a heartbeat of
    // research (who never polled the SQLite adapter), and no message: taken as empty
    const early = await openStore(url, OPTIONS);
    await early.ensureChannels(CHANNELS);
    await one(early, { op: 'heartbeat', agent: 'research', now: T0 + 5 });
    await early.close();
    const res = await migrate(file, url);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toBe('');
    // the agents: the five, and "adapter", the sender of the alert
    expect(res.stdout.trim().split('\n')).toEqual([
      `migrate-store: copied ${rows.channels} channels, ${rows.messages} messages, ` +
        `${rows.deliveries} deliveries, ${rows.dead_letters} dead letters, 6 agents, ` +
        `${rows.threads} threads, ${rows.alert_state} alert states, ` +
        `${rows.delivery_events} delivery events, ${rows.agent_polls} agent polls, ` +
        `0 scheduled messages from ${file} into ` +
        `${url.replace(/:[^:@/]+@/, ':***@')}`,
    ]);
    pgStore = await openStore(url, OPTIONS);
  });
  afterAll(async () => {
    await pgStore?.close();
  });

  it('copies every row of every table, every column, ids kept', async () => {
    const want = sqliteTables(file);
    const got = await pgTables(url);
    for (const t of Object.keys(TABLES)) {
      expect(got[t]!.length, t).toBe(want[t]!.length);
      expect(got[t], t).toEqual(want[t]);
    }
  });

  it('copies what every reader sees: messages byte for byte, statuses, journeys, dead letters, depths, threads, stored bytes', async () => {
    const after = await snapshot(pgStore, root, messageIds);
    expect(after.channels).toEqual(before.channels);
    expect(after.statuses).toEqual(before.statuses);
    expect(after.journeys).toEqual(before.journeys);
    expect(after.deadLetters).toEqual(before.deadLetters);
    expect(after.depths).toEqual(before.depths);
    // the later contact of each agent: research's heartbeat to the PostgreSQL adapter
    expect(before.agents.find((a) => a.id === 'research')?.last_seen).toBeNull();
    expect(after.agents).toEqual(
      before.agents.map((a) =>
        a.id === 'research' ? { ...a, last_seen: new Date(T0 + 5).toISOString() } : a,
      ),
    );
    expect(after.pages).toEqual(before.pages);
    expect(after.thread).toEqual(before.thread);
    expect(after.senders).toEqual(before.senders);
    expect(before.search.messages).toHaveLength(5);
    expect(after.search).toEqual(before.search);
    expect(before.searchKind.messages).toHaveLength(1);
    expect(after.searchKind).toEqual(before.searchKind);
    expect(before.openDeadLetters).toHaveLength(1);
    expect(after.openDeadLetters).toEqual(before.openDeadLetters);
    expect(before.redrives).toHaveLength(1);
    expect(after.redrives).toEqual(before.redrives);
    expect(before.audit).toHaveLength(2);
    expect(after.audit).toEqual(before.audit);
    expect(after.lastSequences).toEqual(before.lastSequences);
    expect(before.agents.find((a) => a.id === 'pm')).toMatchObject({ paused: true });
  });

  it('carries on: the pending delivery is leased and acked, the leased one stays leased until its lease ends', async () => {
    const [d] = await lease(pgStore, 'qa', 10, T0 + 20);
    expect(d!.delivery_id).toBe(qaPending);
    expect(d!.attempt).toBe(1);
    expect(await one(pgStore, { op: 'ack', agent: 'qa', ids: [qaPending] })).toMatchObject({
      acked: [qaPending],
    });
    expect(await pgStore.depth('qa')).toEqual({ all: 0, critical: 0 });
    // engineering's product #2 is still leased: nothing of product is handed out before it ends
    expect(await lease(pgStore, 'engineering', 10, T0 + 20)).toEqual([]);
    const { effects } = await pgStore.commit([{ op: 'sweep', now: T0 + 13 + 30_000 }]);
    // and the alert counted in SQLite's last window goes out from PostgreSQL when it ends
    expect(effects.alerts).toEqual([
      {
        kind: 'alert/dead-letter',
        payload: {
          reason: 'rejected',
          recipient: 'qa',
          count: 1,
          message_ids: [messageIds[2]],
          attempts: 0,
        },
      },
    ]);
    const [again] = await lease(pgStore, 'engineering', 10, T0 + 13 + 30_000 + 5000);
    expect(again).toMatchObject({ delivery_id: engineeringLeased, attempt: 2 });
  });

  it('numbers on from the last number, with fresh ids past the copied ones', async () => {
    const [next] = await send(
      pgStore,
      draft({ channel: 'product', sender: 'pm', to: ['research'], at: T0 + 40_000 }),
    );
    expect(next!.channel_sequence_id).toBe(last.product + 1);
    const messages = await pgStore.channelMessages('product', 0, 100);
    expect(messages.map((m) => JSON.parse(m).channel_sequence_id)).toEqual(
      Array.from({ length: last.product + 1 }, (_, i) => i + 1),
    );
    // a new delivery, and a new dead letter (with its alert message): their ids follow too
    const got = await lease(pgStore, 'research', 10, T0 + 40_001);
    // research's product #1 and #2 (copied, pending) come first, in order, then the new one
    expect(got.map((d) => d.message.channel_sequence_id)).toEqual([1, 2, 3]);
    const newDelivery = got[2]!;
    expect(newDelivery.message.message_id).toBe(next!.message_id);
    expect(newDelivery.delivery_id).toBeGreaterThan(rows.deliveries!);
    await one(pgStore, {
      op: 'nack',
      agent: 'research',
      ids: [newDelivery.delivery_id],
      now: T0 + 40_002,
      retry: false,
    });
    const dead = (await pgStore.deadLetters(0, 100)).map((j) => JSON.parse(j) as { id: number });
    expect(dead.map((d) => d.id)).toEqual([1, 2]);
    expect(await pgStore.depth('research')).toEqual({ all: 2, critical: 0 });
  });

  it('refuses a database that already holds messages, and changes nothing in it', async () => {
    const messages = await rowsIn(url, 'messages');
    expectRefusal(await migrate(file, url), 2, 'already holds messages');
    expect(await rowsIn(url, 'messages')).toBe(messages);
  });
});

describe('migrate-store refuses', () => {
  // five child processes one after another: a loaded machine takes seconds to start each
  it('bad arguments, with exit 2 and one line', { timeout: 60_000 }, async () => {
    const url = 'postgresql://postgres@127.0.0.1:5432/postgres';
    expectRefusal(await runCli(['migrate-store', '--from', file]), 2, '--to is required');
    expectRefusal(await runCli(['migrate-store', '--to', url]), 2, '--from is required');
    expectRefusal(await migrate(file, join(dir, 'other.db')), 2, 'postgres:// or postgresql://');
    expectRefusal(await migrate(join(dir, 'none.db'), url), 2, 'no such file');
    expectRefusal(
      await runCli(['migrate-store', '--from', file, '--to', url, '--force']),
      2,
      "Unknown option '--force'",
    );
  });

  it('a file another process holds open (an adapter still running on it)', async () => {
    const url = await freshDatabase();
    const store = await openStore(file, OPTIONS);
    try {
      expectRefusal(await migrate(file, url), 2, `is open in process ${process.pid}`);
    } finally {
      await store.close();
    }
    expect(await rowsIn(url, 'pg_tables')).toBeGreaterThan(0); // the database answers
  });

  it('a file that is no adapter store', async () => {
    const url = await freshDatabase();
    const other = join(dir, 'other.db');
    new Database(other).exec('CREATE TABLE t (x)').close();
    expectRefusal(await migrate(other, url), 2, "is not an adapter's store");
  });
});

describe('migrate-store carries time', () => {
  it("copies scheduled messages (to fire and cancelled) and copies' deadlines: PostgreSQL fires the one once, keeps the other's key, expires the copy", async () => {
    const timed = join(dir, 'timed.db');
    copyFileSync(file, timed);
    const T1 = T0 + 100_000;
    const store = await openStore(timed, OPTIONS);
    const gone = draft({ channel: '@qa', sender: 'pm', at: T1 });
    let later = '';
    let expiring = '';
    let lastQa = 0;
    try {
      [later = ''] = (
        await send(store, {
          ...draft({ channel: '@qa', sender: 'pm', at: T1 }),
          deliverAt: T1 + 60_000,
        })
      ).map((a) => a.message_id);
      const [g] = await send(store, { ...gone, deliverAt: T1 + 60_000 });
      await one(store, { op: 'cancel_scheduled', sender: 'pm', messageId: g!.message_id, now: T1 });
      [expiring = ''] = (
        await send(store, {
          ...draft({ channel: '@pm', sender: 'qa', at: T1 }),
          expiresAt: T1 + 30_000,
        })
      ).map((a) => a.message_id);
      lastQa = (await store.lastSequences())['@qa'] ?? 0;
    } finally {
      await store.close();
    }
    const url = await freshDatabase();
    const res = await migrate(timed, url);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toContain(', 2 scheduled messages ');
    const pgStore = await openStore(url, OPTIONS);
    try {
      expect(await pgStore.isStored('pm', gone.idempotencyKey)).toBe(true);
      await one(pgStore, { op: 'sweep', now: T1 + 30_000 });
      expect((await pgStore.messageStatus(expiring))?.recipients).toEqual([
        { agent: 'pm', state: 'dead_letter', attempts: 0, reason: 'expired' },
      ]);
      await one(pgStore, { op: 'sweep', now: T1 + 60_000 });
      await one(pgStore, { op: 'sweep', now: T1 + 70_000 });
      const fired = (await pgStore.channelMessages('@qa', lastQa, 100)).map(
        (j) => JSON.parse(j) as { message_id: string; channel_sequence_id: number },
      );
      expect(fired).toMatchObject([{ message_id: later, channel_sequence_id: lastQa + 1 }]);
    } finally {
      await pgStore.close();
    }
  });
});

describe('migrate-store fails', () => {
  it('with exit 1 and nothing copied when a row cannot be copied (one transaction)', async () => {
    // a copy of the store whose last delivery holds what PostgreSQL's integer column refuses
    const broken = join(dir, 'broken.db');
    copyFileSync(file, broken);
    const db = new Database(broken);
    db.exec("UPDATE deliveries SET attempt = 'x' WHERE id = (SELECT max(id) FROM deliveries)");
    db.close();
    const url = await freshDatabase();
    const res = await migrate(broken, url);
    expectRefusal(res, 1, 'failed, nothing was copied');
    for (const table of ['channels', 'messages', 'deliveries', 'agents'])
      expect(await rowsIn(url, table), table).toBe(0);
    // and the intact file still goes in afterwards
    expect((await migrate(file, url)).code).toBe(0);
    expect(await rowsIn(url, 'messages')).toBe(rows.messages);
  });

  it('with exit 1 when the database cannot be reached', async () => {
    const res = await migrate(file, 'postgresql://postgres@127.0.0.1:1/none');
    expectRefusal(res, 1, 'failed, nothing was copied');
  });
});
