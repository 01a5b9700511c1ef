/**
 * Two PostgreSQL stores on one database, as two adapter replicas would have them (each its own
 * connections), driven at once: what must hold across replicas (docs/design/postgres.md), at the
 * store's level. A fresh database per test (test/helpers/pg.ts), dropped after.
 */
import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { Assignment } from '../../src/protocol/envelope.js';
import type { Delivery } from '../../src/protocol/wire.js';
import {
  openPgStore,
  type PgStore,
  type PgStoreOptions,
} from '../../src/store/postgres/pg-store.js';
import type { PgForeignEffects } from '../../src/store/postgres/pg-wake.js';
import { newRedriveId } from '../../src/store/rules/operators.js';
import type { AppendOutcome, MessageDraft, Settled, StoreOp } from '../../src/store/store.js';
import { testDatabase } from '../helpers/pg.js';

const T0 = Date.UTC(2031, 0, 1);
const ALERTS_TO = 'orchestrator';
const TEAM = ['qa', 'pm', 'engineering', 'research', 'growth'];
const CHANNELS = ['product', 'ops', 'all', '@qa', '@pm', `@${ALERTS_TO}`];

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Two stores ("replicas") on one fresh database. */
async function replicas(
  opts: PgStoreOptions = {},
): Promise<{ a: PgStore; b: PgStore; url: string }> {
  const db = await testDatabase();
  cleanups.push(() => db.drop());
  const o: PgStoreOptions = {
    sync: 'full',
    storage: { maxBytes: 2 ** 40, senderShare: 1, reserveBytes: 0 },
    ...opts,
    delivery: { alertsTo: ALERTS_TO, random: () => 0.5, ...opts.delivery },
  };
  // started together: the migrations run once, under their advisory lock
  const [a, b] = await Promise.all([openPgStore(db.url, o), openPgStore(db.url, o)]);
  cleanups.push(
    () => a.close(),
    () => b.close(),
  );
  await a.ensureChannels(CHANNELS);
  return { a, b, url: db.url };
}

const sha256 = (text: string) => createHash('sha256').update(text).digest();

function draft(channel: string, to: string[], over: Partial<MessageDraft> = {}): MessageDraft {
  const key = over.idempotencyKey ?? randomUUID();
  return {
    sender: 'pm',
    idempotencyKey: key,
    fingerprint: sha256(key),
    channel,
    kind: 'status',
    priority: 'normal',
    replyTo: null,
    payloadJson: '{}',
    receivedAt: T0,
    recipients: to,
    ...over,
  };
}

function ok<T>(s: Settled | undefined): T {
  if (s === undefined || 'err' in s) throw new Error(`refused: ${JSON.stringify(s)}`);
  return s.ok as T;
}

async function append(store: PgStore, ...drafts: MessageDraft[]): Promise<AppendOutcome[]> {
  return ok<AppendOutcome[]>((await store.commit([{ op: 'append', drafts }])).results[0]);
}

async function lease(store: PgStore, agent: string, max: number, now: number) {
  const { results } = await store.commit([{ op: 'lease', agent, max, now }]);
  return ok<string[]>(results[0]).map((j) => JSON.parse(j) as Delivery);
}

async function sql<R extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<R>(text, values)).rows;
  } finally {
    await c.end();
  }
}

/** Resolves with the first foreign effects `store` is told that satisfy `want`. */
function told(
  store: PgStore,
  want: (fx: PgForeignEffects) => boolean,
  timeoutMs = 5000,
): Promise<PgForeignEffects> {
  return new Promise((resolve, reject) => {
    let done = false;
    const timer = setTimeout(() => {
      done = true;
      reject(new Error(`not told within ${timeoutMs} ms`));
    }, timeoutMs);
    store.watch((fx) => {
      if (done || !want(fx)) return;
      done = true;
      clearTimeout(timer);
      resolve(fx);
    });
  });
}

describe('PostgreSQL store, two replicas on one database', () => {
  it('stores a key committed through both at once once: one 201, one 200 with the same assignment, in one channel or two', async () => {
    const { a, b } = await replicas();
    for (let i = 0; i < 20; i++) {
      const key = `key-${i}`;
      // even rounds: the same channel; odd: two channels. Either way the sender's agents row,
      // locked by every append of its, orders them, and the second finds the key (the unique
      // index, with the group tried again on 23505, is only the backstop)
      const da = draft(i % 2 === 0 ? 'product' : 'ops', ['qa'], { idempotencyKey: key });
      const db = { ...da, channel: 'product' };
      const [[x], [y]] = await Promise.all([append(a, da), append(b, db)]);
      expect([x!.status, y!.status].sort()).toEqual([200, 201]);
      const first = x!.status === 201 ? x! : y!;
      const second = x!.status === 201 ? y! : x!;
      if (first.status === 'rejected' || second.status === 'rejected') throw new Error('refused');
      expect(second.assignment.message_id).toBe(first.assignment.message_id);
      expect(second.assignment.channel_sequence_id).toBe(first.assignment.channel_sequence_id);
    }
    // 20 messages, 20 deliveries to qa, and every channel's numbers 1..N without a gap
    expect(await a.depth('qa')).toEqual({ all: 20, critical: 0 });
    for (const channel of ['product', 'ops']) {
      const seqs = (await b.channelMessages(channel, 0, 100)).map(
        (j) => (JSON.parse(j) as { channel_sequence_id: number }).channel_sequence_id,
      );
      expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    }
    const all = [
      ...(await a.channelMessages('product', 0, 100)),
      ...(await a.channelMessages('ops', 0, 100)),
    ];
    expect(all).toHaveLength(20);
  });

  it('numbers one channel gap-free when both append to it at once, in commit order', async () => {
    const { a, b } = await replicas();
    const sendMany = async (store: PgStore, sender: string) => {
      const got: Assignment[] = [];
      for (let i = 0; i < 40; i++) {
        const drafts = Array.from({ length: 1 + (i % 3) }, () =>
          draft('product', ['qa', 'engineering'], { sender }),
        );
        for (const o of await append(store, ...drafts)) {
          if (o.status !== 201) throw new Error(`not stored: ${JSON.stringify(o)}`);
          got.push(o.assignment);
        }
      }
      return got;
    };
    const [fromA, fromB] = await Promise.all([sendMany(a, 'pm'), sendMany(b, 'research')]);
    // each replica's own numbers rise in the order its commits returned
    for (const own of [fromA, fromB]) {
      const seqs = own.map((x) => x.channel_sequence_id ?? 0); // none is scheduled: never null
      expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
    }
    const all = [...fromA, ...fromB].map((x) => x.channel_sequence_id ?? 0).sort((x, y) => x - y);
    expect(all).toEqual(all.map((_, i) => i + 1));
    const read = (await a.channelMessages('product', 0, 1000)).map(
      (j) => JSON.parse(j) as { channel_sequence_id: number; sender: string },
    );
    expect(read.map((m) => m.channel_sequence_id)).toEqual(all);
    // both replicas interleaved: the test raced them
    expect(new Set(read.slice(0, 20).map((m) => m.sender)).size).toBe(2);
    // the depths, kept in rows under the agents' locks, count every delivery
    expect(await b.depth('qa')).toEqual({ all: all.length, critical: 0 });
    expect(await a.depth('engineering')).toEqual({ all: all.length, critical: 0 });
  });

  it('never leases one delivery to polls on both at once, and keeps each channel in order', async () => {
    const { a, b } = await replicas({ delivery: { leaseMs: 60_000 } });
    const sent: Assignment[] = [];
    for (let i = 0; i < 30; i++) {
      const channel = ['product', 'ops', '@qa'][i % 3]!;
      for (const o of await append(a, draft(channel, ['qa']), draft(channel, ['qa']))) {
        if (o.status === 201) sent.push(o.assignment);
      }
    }
    const handed: Delivery[] = [];
    const poll = async (store: PgStore) => {
      let idle = 0;
      while (idle < 3) {
        const got = await lease(store, 'qa', 3, T0 + 1);
        if (got.length === 0) {
          idle++;
          await new Promise((r) => setTimeout(r, 5));
          continue;
        }
        idle = 0;
        handed.push(...got);
        await store.commit([{ op: 'ack', agent: 'qa', ids: got.map((d) => d.delivery_id) }]);
      }
    };
    await Promise.all([poll(a), poll(b), poll(a), poll(b)]);
    const ids = handed.map((d) => d.delivery_id);
    expect(new Set(ids).size).toBe(ids.length); // no delivery handed out twice
    expect(ids).toHaveLength(sent.length); // and every one handed out
    expect(handed.every((d) => d.attempt === 1)).toBe(true);
    // per channel, in the order they were handed out: sequence order
    for (const channel of ['product', 'ops', '@qa']) {
      const seqs = handed
        .filter((d) => d.message.channel === channel)
        .map((d) => d.message.channel_sequence_id);
      expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
    }
    expect(await a.depth('qa')).toEqual({ all: 0, critical: 0 });
  });

  it("wakes the other replica's watchers through LISTEN/NOTIFY, never a store's own", async () => {
    const { a, b } = await replicas();
    const own: PgForeignEffects[] = [];
    a.watch((fx) => own.push(fx));
    const atB = told(b, (fx) => fx.woken.has('qa'));
    await append(a, draft('product', ['qa', 'engineering']));
    const fx = await atB;
    expect([...fx.woken].sort()).toEqual(['engineering', 'qa']);
    // a lease changes timing: told too
    const timing = told(b, (fx) => fx.timingChanged && fx.woken.size === 0);
    await lease(a, 'qa', 1, T0);
    await timing;
    await new Promise((r) => setTimeout(r, 100));
    expect(own).toEqual([]);
  });

  it('keeps waking after its LISTEN connection is killed: it reconnects and tells its watchers everyone, timing changed', async () => {
    const { a, b, url } = await replicas();
    const pid = b.listener.pid;
    expect(pid).toBeTypeOf('number');
    const everyone = told(b, (fx) => fx.everyone === true && fx.timingChanged);
    const [killed] = await sql<{ ok: boolean }>(url, 'SELECT pg_terminate_backend($1) AS ok', [
      pid,
    ]);
    expect(killed?.ok).toBe(true);
    await everyone;
    expect(b.listener.reconnects).toBe(1);
    expect(b.listener.pid).not.toBe(pid);
    // notifications flow again
    const atB = told(b, (fx) => fx.woken.has('pm'));
    await append(a, draft('@pm', ['pm']));
    await atB;
    // and B's own commits and reads never noticed
    expect(await b.depth('pm')).toEqual({ all: 1, critical: 0 });
    expect(b.safetyPollMs).toBe(1000);
  });

  it('handles each expired lease once when both sweep at once, and aggregates their alerts once', async () => {
    const { a, b } = await replicas({ delivery: { leaseMs: 1000, maxRetries: 0 } });
    let n = 0;
    for (const agent of TEAM) {
      for (let i = 0; i < 4; i++) {
        await append(a, draft('all', [agent]));
        n++;
      }
      expect(await lease(i2(agent) ? a : b, agent, 10, T0)).toHaveLength(4);
    }
    // every lease expired: each is a dead letter (no retries), exactly once across replicas
    const sweep: StoreOp = { op: 'sweep', now: T0 + 1000 };
    const [ra, rb] = await Promise.all([a.commit([sweep]), b.commit([sweep])]);
    const expired = a.stats.deadLetters.lease_expired + b.stats.deadLetters.lease_expired;
    expect(expired).toBe(n);
    const dead = await a.deadLetters(0, 1000);
    expect(dead).toHaveLength(n);
    // one alert per recipient (the first of its window), written once, by whichever folded it
    const alerts = [...ra.effects.alerts, ...rb.effects.alerts];
    expect(alerts.map((x) => x.kind === 'alert/dead-letter' && x.payload.recipient).sort()).toEqual(
      [...TEAM].sort(),
    );
    expect(alerts.every((x) => x.kind === 'alert/dead-letter' && x.payload.count === 1)).toBe(true);
    expect(await a.channelMessages(`@${ALERTS_TO}`, 0, 100)).toHaveLength(TEAM.length);
    // the rest of each window's count goes out once too, when it ends
    const [la, lb] = await Promise.all([
      a.commit([{ op: 'sweep', now: T0 + 31_000 }]),
      b.commit([{ op: 'sweep', now: T0 + 31_000 }]),
    ]);
    const late = [...la.effects.alerts, ...lb.effects.alerts];
    expect(late).toHaveLength(TEAM.length);
    expect(late.every((x) => x.kind === 'alert/dead-letter' && x.payload.count === 3)).toBe(true);
    for (const agent of TEAM) expect(await b.depth(agent)).toEqual({ all: 0, critical: 0 });
  });

  it('fires each scheduled message once when both sweep at once, gap-free in its channel; a cancel racing the firing either cancels it or is told it was sent', async () => {
    const { a, b } = await replicas();
    const scheduled: string[] = [];
    for (let i = 0; i < 450; i += 50) {
      // 450: more than two of a sweep's chunks (SWEEP_SCHEDULED), due in five instants
      const drafts = Array.from({ length: 50 }, (_, j) =>
        draft('product', ['qa', 'engineering'], { deliverAt: T0 + 1000 + ((i + j) % 5) }),
      );
      for (const o of await append(i % 100 === 0 ? a : b, ...drafts)) {
        if (o.status !== 201) throw new Error(`not scheduled: ${JSON.stringify(o)}`);
        expect(o.assignment.channel_sequence_id).toBeNull();
        scheduled.push(o.assignment.message_id);
      }
    }
    const [now] = await append(a, draft('product', ['qa']));
    expect(now).toMatchObject({ status: 201, assignment: { channel_sequence_id: 1 } });
    expect(await a.nextDue(T0)).toBe(T0 + 1000);
    const sweep: StoreOp = { op: 'sweep', now: T0 + 2000 };
    const cancels = scheduled.filter((_, i) => i % 23 === 0);
    const [, , cancelled] = await Promise.all([
      a.commit([sweep]),
      b.commit([sweep]),
      b.commit(
        cancels.map((messageId) => ({
          op: 'cancel_scheduled' as const,
          sender: 'pm',
          messageId,
          now: T0 + 2000,
        })),
      ),
    ]);
    const kept = new Set<string>();
    for (const [i, r] of cancelled.results.entries()) {
      if ('ok' in r) kept.add(cancels[i]!);
      else expect(r.err.code).toBe('already_sent');
    }
    const read = (await a.channelMessages('product', 0, 1000)).map(
      (j) => JSON.parse(j) as { channel_sequence_id: number; message_id: string },
    );
    expect(read.map((m) => m.channel_sequence_id)).toEqual(read.map((_, i) => i + 1));
    const fired = read.slice(1).map((m) => m.message_id);
    // once each, in (deliver_at, id) order, and every one not cancelled
    expect(new Set(fired).size).toBe(fired.length);
    // (the rows' ids follow the order they were scheduled in: the appends ran one by one)
    const at = (id: string) => scheduled.indexOf(id);
    const order = [...fired].sort((x, y) => (at(x) % 5) - (at(y) % 5) || at(x) - at(y));
    expect(fired).toEqual(order);
    expect(fired.sort()).toEqual(scheduled.filter((id) => !kept.has(id)).sort());
    expect(await b.depth('engineering')).toEqual({ all: fired.length, critical: 0 });
    expect(await a.nextDue(T0 + 2000)).toBeUndefined();
  });

  it('dead-letters each pending copy past its deadline once when both sweep at once, and releases its lane', async () => {
    const { a, b } = await replicas();
    for (const agent of TEAM) {
      await append(a, draft('all', [agent], { expiresAt: T0 + 500 }), draft('all', [agent]));
    }
    expect(await a.nextDue(T0)).toBe(T0 + 500);
    // past the deadline, before the sweep: the head is not handed over, nor what waits behind it
    expect(await lease(a, 'qa', 10, T0 + 500)).toEqual([]);
    const sweep: StoreOp = { op: 'sweep', now: T0 + 500 };
    await Promise.all([a.commit([sweep]), b.commit([sweep])]);
    expect(a.stats.deadLetters.expired + b.stats.deadLetters.expired).toBe(TEAM.length);
    const dead = (await b.deadLetters(0, 100)).map((j) => JSON.parse(j) as { reason: string });
    expect(dead.map((d) => d.reason)).toEqual(TEAM.map(() => 'expired'));
    for (const agent of TEAM) {
      const got = await lease(b, agent, 10, T0 + 600);
      expect(got.map((d) => d.message.channel_sequence_id)).toHaveLength(1);
    }
  });

  it("tells a message's journey through either: what one wrote the other reads, and either prunes it whole", async () => {
    const { a, b, url } = await replicas();
    const [out] = await append(a, draft('product', ['qa']));
    if (out?.status !== 201) throw new Error('not stored');
    const id = out.assignment.message_id;
    const [d] = await lease(b, 'qa', 1, T0 + 10);
    ok(
      (await a.commit([{ op: 'ack', agent: 'qa', ids: [d!.delivery_id], now: T0 + 20 }]))
        .results[0],
    );
    for (const store of [a, b]) {
      const j = await store.journey(id);
      expect(j!.events.map((e) => [e.event, e.at])).toEqual([
        ['leased', T0 + 10],
        ['acked', T0 + 20],
      ]);
      expect(j!.copies).toMatchObject([{ recipient: 'qa', state: 'acked', lastPoll: T0 + 10 }]);
    }
    const pruned = await b.commit([{ op: 'prune', before: T0 + 1, keep: [], limit: 10 }]);
    expect(ok<number>(pruned.results[0])).toBe(1);
    expect(await a.journey(id)).toBeUndefined();
    expect(await sql(url, 'SELECT 1 FROM delivery_events')).toEqual([]);
  });

  it('never deadlocks: mixed groups touching channels and agents in every order, on both at once', {
    timeout: 30_000,
  }, async () => {
    const { a, b, url } = await replicas({ delivery: { capacity: 20, leaseMs: 1000 } });
    const rnd = (() => {
      let s = 42;
      return () => {
        s = (s * 1103515245 + 12345) % 2 ** 31;
        return s / 2 ** 31;
      };
    })();
    const pick = <T>(xs: readonly T[]) => xs[Math.floor(rnd() * xs.length)]!;
    const stored = { n: 0 };
    const work = async (store: PgStore) => {
      for (let g = 0; g < 40; g++) {
        const ops: StoreOp[] = [];
        for (let k = 0; k < 3; k++) {
          const to = TEAM.filter(() => rnd() < 0.5).reverse();
          const drafts = Array.from({ length: 1 + Math.floor(rnd() * 3) }, () =>
            draft(pick(['product', 'ops', 'all']), to.length > 0 ? to : ['qa'], {
              sender: pick(TEAM),
              priority: rnd() < 0.2 ? 'critical' : 'normal',
            }),
          );
          ops.push({ op: 'append', drafts: drafts.reverse() });
          ops.push({ op: 'lease', agent: pick(TEAM), max: 2, now: T0 + g * 100 });
        }
        if (g % 10 === 9) ops.push({ op: 'sweep', now: T0 + g * 100 });
        const { results } = await store.commit(ops);
        for (const r of results) {
          if ('err' in r) throw r.err;
        }
        for (const [i, op] of ops.entries()) {
          if (op.op === 'append')
            stored.n += ok<AppendOutcome[]>(results[i]).filter((o) => o.status === 201).length;
        }
      }
    };
    await Promise.all([work(a), work(b)]);
    let seqs = 0;
    for (const channel of ['product', 'ops', 'all']) {
      const got = (await a.channelMessages(channel, 0, 10_000)).map(
        (j) => (JSON.parse(j) as { channel_sequence_id: number }).channel_sequence_id,
      );
      expect(got).toEqual(got.map((_, i) => i + 1));
      seqs += got.length;
    }
    expect(seqs).toBe(stored.n);
    // the depths kept in the agents rows match the delivery rows, and evictions happened
    const counted = await sql<{ recipient: string; open: number; critical: number }>(
      url,
      `SELECT recipient, count(*)::int AS open, sum(priority)::int AS critical
       FROM deliveries WHERE state IN (0, 1) GROUP BY recipient`,
    );
    for (const agent of TEAM) {
      const row = counted.find((r) => r.recipient === agent);
      const [state] = await a.agents([agent]);
      expect([state!.queue_depth, state!.critical_depth]).toEqual([
        row?.open ?? 0,
        row?.critical ?? 0,
      ]);
    }
    expect(a.stats.deadLetters.evicted + b.stats.deadLetters.evicted).toBeGreaterThan(0);
  });

  it("sees a pause made through one at the other's next lease, and a resume wakes the other's watchers", async () => {
    const { a, b } = await replicas();
    await append(a, draft('@qa', ['qa']));
    const by = 'operator:alice';
    ok(await a.commit([{ op: 'pause', agent: 'qa', by, now: T0 + 1 }]).then((c) => c.results[0]));
    expect(await lease(b, 'qa', 10, T0 + 2)).toEqual([]);
    expect((await b.agents(['qa']))[0]).toMatchObject({ paused: true, paused_by: by });
    // a repeat through the other is no change
    const again = await b.commit([{ op: 'pause', agent: 'qa', by, now: T0 + 3 }]);
    expect(ok<{ changed: boolean }>(again.results[0]).changed).toBe(false);
    const woken = told(b, (fx) => fx.woken.has('qa'));
    const resumed = await a.commit([{ op: 'resume', agent: 'qa', by, now: T0 + 4 }]);
    expect(resumed.effects.woken.has('qa')).toBe(true);
    await woken;
    expect(await lease(b, 'qa', 10, T0 + 5)).toHaveLength(1);
  });

  it('steps one redrive through both at once: each dead letter replayed once, in message order', async () => {
    const { a, b } = await replicas({ delivery: { capacity: 1000 } });
    const n = 40;
    const sent = await append(
      a,
      ...Array.from({ length: n }, (_, i) => draft('product', ['qa'], { receivedAt: T0 + i })),
    );
    const ids = sent.map((o) => (o.status === 201 ? o.assignment.message_id : ''));
    const got = await lease(a, 'qa', n, T0 + 100);
    expect(got).toHaveLength(n);
    // dead in reverse order
    for (const d of [...got].reverse()) {
      await a.commit([
        { op: 'nack', agent: 'qa', ids: [d.delivery_id], now: T0 + 200, retry: false },
      ]);
    }
    const made = ok<{ redrive_id: string; count: number }>(
      (
        await a.commit([
          {
            op: 'redrive_create',
            id: newRedriveId(),
            by: 'operator:alice',
            selection: { filter: { recipient: 'qa' } },
            rate: 30,
            now: T0 + 300,
          },
        ])
      ).results[0],
    );
    expect(made.count).toBe(n);
    const step = async (s: PgStore) => {
      for (;;) {
        const { results } = await s.commit([
          { op: 'redrive_step', id: made.redrive_id, max: 3, now: T0 + 400 },
        ]);
        if (ok<{ state: string }>(results[0]).state === 'done') return;
      }
    };
    await Promise.all([step(a), step(b)]);
    expect(await b.redrive(made.redrive_id)).toMatchObject({
      total: n,
      done: n,
      skipped: 0,
      state: 'done',
    });
    expect(await a.depth('qa')).toEqual({ all: n, critical: 0 });
    const again = await lease(b, 'qa', 2 * n, T0 + 500);
    expect(again.map((d) => d.message.message_id)).toEqual(ids);
  });

  it('appends the audit log through both at once as one chain', async () => {
    const { a, b } = await replicas();
    const entry = (i: number) => ({
      op: 'audit' as const,
      entry: { at: T0 + i, actor: 'operator:alice', action: 'pause', target: `x${i}`, detail: {} },
    });
    await Promise.all(
      [a, b].map(async (s, k) => {
        for (let i = 0; i < 15; i++) await s.commit([entry(k * 100 + i)]);
      }),
    );
    const log = await a.audit(0, 100);
    expect(log.map((e) => e.seq)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    for (const [i, e] of log.entries()) {
      expect(e.prev_hash).toBe(i === 0 ? '0'.repeat(64) : log[i - 1]!.hash);
    }
  });
});

/** Which replica leases for an agent in the sweep test: spread over both. */
function i2(agent: string): boolean {
  return TEAM.indexOf(agent) % 2 === 0;
}
