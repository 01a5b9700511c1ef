/**
 * The audit log's chain against tampering, on both engines: entries appended through the real
 * store (the `audit` op), then rows changed behind its back with SQL on a connection of their
 * own, as a person with the database could: a column rewritten, a row deleted in the middle,
 * a forged row put in between (with a made-up hash, and with its hash recomputed as the adapter
 * computes it), a row rewritten with its hash recomputed; and rows deleted at the ends: the
 * newest, several newest, all of them, the oldest (young ones, no prune), the anchor row
 * itself. Verification, reading through Store.audit with the store's anchor and through the
 * CLI's read-only source alike, names the seq and the kind each time, and so does the check at
 * start (an alert/integrity); an append after a deletion never takes a freed seq again.
 * Retention (the `prune_audit` op, and the adapter's Retention pass) takes entries from the
 * oldest end only, never the newest, and moves the anchor's pruned end in its transaction: the
 * pruned log verifies from it and goes on from its last seq. A store from before the anchor
 * gets one, from its log as found, when it is opened.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkAuditChain } from '../../src/adapter/audit-check.js';
import { GroupCommit } from '../../src/adapter/group-commit.js';
import { Retention } from '../../src/adapter/retention.js';
import { openAuditSource } from '../../src/store/audit-source.js';
import { openStore } from '../../src/store/open.js';
import { PG_AUDIT_ANCHOR_VERSION } from '../../src/store/postgres/pg-sql.js';
import { openPgStore } from '../../src/store/postgres/pg-store.js';
import {
  type AnchorRead,
  type AuditAnchorSource,
  type ChainReport,
  verifyAuditChain,
} from '../../src/store/rules/audit-chain.js';
import { auditEntry, GENESIS_HASH } from '../../src/store/rules/operators.js';
import { AUDIT_ANCHOR_VERSION } from '../../src/store/sqlite/sql.js';
import type { AuditDraft, AuditEntry, Store } from '../../src/store/store.js';
import { testDatabase } from '../helpers/pg.js';

const T0 = Date.UTC(2031, 0, 1);
const DAY = 24 * 3600 * 1000;
const N = 10;
const OPTIONS = { sync: 'full', delivery: { alertsTo: 'orchestrator' } } as const;

interface Opened {
  /** The store (reopened by `reopen`). */
  store: Store;
  /** AGW_DB: the file or the URL. */
  readonly db: string;
  /** Runs statements on a connection of its own (`?` placeholders), behind the store's back. */
  readonly sql: (statements: readonly [string, (readonly unknown[])?][]) => Promise<void>;
  /** Closes the store and opens it again on the same storage (migrating it, as a start does). */
  readonly reopen: () => Promise<void>;
  /**
   * Closes the store and puts its schema back to the version before the anchor, its table
   * dropped, as a store an adapter of that version wrote (`reopen` then migrates it).
   */
  readonly beforeAnchor: () => Promise<void>;
  readonly cleanup: () => Promise<void>;
}

const engines: [string, () => Promise<Opened>][] = [
  [
    'SQLite',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'agw-audit-'));
      const db = join(dir, 'adapter.db');
      const sql: Opened['sql'] = async (statements) => {
        const c = new Database(db);
        try {
          c.pragma('busy_timeout = 5000');
          c.transaction(() => {
            for (const [text, params = []] of statements) c.prepare(text).run(...params);
          })();
        } finally {
          c.close();
        }
      };
      const o: Opened = {
        store: await openStore(db, OPTIONS),
        db,
        sql,
        reopen: async () => {
          await o.store.close();
          o.store = await openStore(db, OPTIONS);
        },
        beforeAnchor: async () => {
          await o.store.close();
          const c = new Database(db);
          try {
            c.exec('DROP TABLE audit_anchor');
            c.pragma(`user_version = ${AUDIT_ANCHOR_VERSION - 1}`);
          } finally {
            c.close();
          }
        },
        cleanup: async () => {
          await o.store.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
      return o;
    },
  ],
  [
    'PostgreSQL',
    async () => {
      const t = await testDatabase();
      const sql: Opened['sql'] = async (statements) => {
        const c = new pg.Client({ connectionString: t.url });
        await c.connect();
        try {
          await c.query('BEGIN');
          for (const [text, params = []] of statements) {
            let i = 0;
            await c.query(
              text.replace(/\?/g, () => `$${++i}`),
              params as unknown[],
            );
          }
          await c.query('COMMIT');
        } finally {
          await c.end();
        }
      };
      const o: Opened = {
        store: await openPgStore(t.url, OPTIONS),
        db: t.url,
        sql,
        reopen: async () => {
          await o.store.close();
          o.store = await openPgStore(t.url, OPTIONS);
        },
        beforeAnchor: async () => {
          await o.store.close();
          await sql([
            ['DROP TABLE audit_anchor'],
            ['DELETE FROM agw_schema WHERE version >= ?', [PG_AUDIT_ANCHOR_VERSION]],
          ]);
        },
        cleanup: async () => {
          await o.store.close();
          await t.drop();
        },
      };
      return o;
    },
  ],
];

const draft = (i: number, at = T0 + i * 1000): AuditDraft => ({
  at,
  actor: i % 3 === 0 ? 'orchestrator' : 'operator:alice',
  action: i % 3 === 0 ? 'continuation' : 'pause',
  target: `target-${i}`,
  detail: { i, channel: 'product', thread_id: null },
});

async function append(store: Store, d: AuditDraft): Promise<AuditEntry> {
  const { results } = await store.commit([{ op: 'audit', entry: d }]);
  const r = results[0]!;
  if ('err' in r) throw r.err;
  return r.ok as AuditEntry;
}

async function pruneAudit(store: Store, before: number, limit = 100): Promise<number> {
  const { results } = await store.commit([{ op: 'prune_audit', before, limit }]);
  const r = results[0]!;
  if ('err' in r) throw r.err;
  return r.ok as number;
}

/** Every entry, oldest first. */
const all = (store: Store) => store.audit(0, 1000);

/** The store's anchor (both engines keep one: rules/audit-chain.ts AuditAnchorSource). */
function anchorOf(store: Store): AnchorRead {
  const s = store as Store & Partial<AuditAnchorSource>;
  const read = s.auditAnchor;
  if (read === undefined) throw new Error('the store keeps no audit anchor');
  return () => read.call(s);
}

/**
 * The report through Store.audit with the store's anchor (pages of 4: breaks fall on page
 * seams too) and through the CLI's source, which must agree.
 */
async function verify(o: Opened): Promise<ChainReport> {
  const viaStore = await verifyAuditChain((after, limit) => o.store.audit(after, limit), {
    pageSize: 4,
    anchor: anchorOf(o.store),
  });
  const source = await openAuditSource(o.db);
  try {
    expect(source.anchor).toBeDefined();
    expect(await verifyAuditChain(source.read, { anchor: source.anchor })).toEqual(viaStore);
  } finally {
    await source.close();
  }
  return viaStore;
}

/** Every seq from `from` to `to`. */
const seqs = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** A forged row of seq `seq` after `prev`, its hash made up or recomputed as the adapter does. */
function forged(seq: number, prev: AuditEntry, hash: 'made-up' | 'recomputed') {
  const d: AuditDraft = {
    at: Date.parse(prev.at) + 1,
    actor: 'operator:alice',
    action: 'redrive',
    target: 'rd_0123456789abcdef',
    detail: { ids: [1, 2, 3], rate: 100, count: 3 },
  };
  const e = auditEntry(seq, d, prev.hash);
  return [
    seq,
    d.at,
    e.actor,
    e.action,
    e.target,
    JSON.stringify(e.detail),
    e.prev_hash,
    hash === 'made-up' ? 'ab'.repeat(32) : e.hash,
  ] as const;
}

const INSERT = `INSERT INTO audit_log (seq, at, actor, action, target, detail, prev_hash, hash)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?)`;
/** Makes room at `seq`: every entry from it on moves up by one (through negatives, so no two
 * rows share a seq on the way: both engines check the key row by row). */
const makeRoom = (seq: number): [string, unknown[]][] => [
  ['UPDATE audit_log SET seq = -seq WHERE seq >= ?', [seq]],
  ['UPDATE audit_log SET seq = 1 - seq WHERE seq < 0', []],
];

// PostgreSQL makes a database per test: at a load of 8 a test took past vitest's 5 s
describe.each(engines)('the audit chain on the %s store', { timeout: 30_000 }, (_name, open) => {
  let o: Opened;
  let entries: AuditEntry[];
  beforeEach(async () => {
    o = await open();
    entries = [];
    for (let i = 1; i <= N; i++) entries.push(await append(o.store, draft(i)));
  }, 30_000);
  afterEach(async () => {
    await o?.cleanup();
  }, 30_000);

  it('appended through the store, the chain is intact', async () => {
    expect(entries.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(await all(o.store)).toEqual(entries);
    expect(await verify(o)).toEqual({ entries: N, first: 1, last: N, broken: undefined });
  });

  it('a changed column is `changed` at its seq', async () => {
    const changes: [string, unknown][] = [
      ['actor', 'operator:mallory'],
      ['detail', '{"i":5,"channel":"elsewhere","thread_id":null}'],
      ['detail', 'not json at all'],
      ['at', T0],
      ['target', 'someone-else'],
      ['prev_hash', '0'.repeat(64)],
      ['hash', 'cd'.repeat(32)],
    ];
    for (const [column, value] of changes) {
      const before = (await o.store.audit(4, 1))[0]!;
      await o.sql([[`UPDATE audit_log SET ${column} = ? WHERE seq = 5`, [value]]]);
      expect((await verify(o)).broken, `${column} = ${value}`).toMatchObject({
        seq: 5,
        kind: 'changed',
      });
      // put back: the next change is found on its own
      const row = [
        before.actor,
        Date.parse(before.at),
        before.target,
        JSON.stringify(before.detail),
      ];
      await o.sql([
        [
          'UPDATE audit_log SET actor = ?, at = ?, target = ?, detail = ?, prev_hash = ?, hash = ? WHERE seq = 5',
          [...row, before.prev_hash, before.hash],
        ],
      ]);
      expect((await verify(o)).broken).toBeUndefined();
    }
  });

  it('a row rewritten with its hash recomputed is `changed`: its successor holds the old hash', async () => {
    const e = entries[4]!;
    const rewritten = auditEntry(
      5,
      {
        at: Date.parse(e.at),
        actor: 'operator:mallory',
        action: e.action,
        target: e.target,
        detail: e.detail,
      },
      e.prev_hash,
    );
    await o.sql([
      ['UPDATE audit_log SET actor = ?, hash = ? WHERE seq = 5', [rewritten.actor, rewritten.hash]],
    ]);
    expect((await verify(o)).broken).toMatchObject({ seq: 5, kind: 'changed' });
  });

  it('a row deleted in the middle is `removed`, also when the rest is renumbered to close the gap', async () => {
    await o.sql([['DELETE FROM audit_log WHERE seq = 5']]);
    const r = await verify(o);
    expect(r.broken).toEqual({
      seq: 5,
      kind: 'removed',
      why: 'seq 5 is missing between seq 4 and 6',
    });
    await o.sql([
      ['UPDATE audit_log SET seq = -seq WHERE seq > 5'],
      ['UPDATE audit_log SET seq = -seq - 1 WHERE seq < 0'],
    ]);
    expect((await all(o.store)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect((await verify(o)).broken).toMatchObject({ seq: 5, kind: 'removed' });
  });

  it('a forged row put in between is `inserted`, with a made-up hash', async () => {
    await o.sql([...makeRoom(6), [INSERT, forged(6, entries[4]!, 'made-up')]]);
    expect((await all(o.store)).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect((await verify(o)).broken).toMatchObject({ seq: 6, kind: 'inserted' });
  });

  it('a forged row put in between with its hash recomputed is `inserted`: its successor does not link to it', async () => {
    await o.sql([...makeRoom(6), [INSERT, forged(6, entries[4]!, 'recomputed')]]);
    const [forgedRow, successor] = await o.store.audit(5, 2);
    expect(forgedRow!.prev_hash).toBe(entries[4]!.hash); // the forged row links soundly
    expect(successor!.prev_hash).not.toBe(forgedRow!.hash); // its successor does not
    expect((await verify(o)).broken).toMatchObject({ seq: 6, kind: 'inserted' });
  });

  it('entries appended after a break chain on from the last one; the break stays named', async () => {
    await o.sql([['UPDATE audit_log SET actor = ? WHERE seq = 3', ['operator:mallory']]]);
    const next = await append(o.store, draft(11));
    expect(next.seq).toBe(11);
    expect(next.prev_hash).toBe(entries[9]!.hash);
    const r = await verify(o);
    expect(r.broken).toMatchObject({ seq: 3, kind: 'changed' });
  });

  it('pruning takes the oldest end only, never the newest; the pruned log verifies from its anchor', async () => {
    // entries 1..10 are a second apart from T0 + 1 s: those before T0 + 4.5 s go (1..4)
    expect(await pruneAudit(o.store, T0 + 4500, 3)).toBe(3); // in batches
    expect(await pruneAudit(o.store, T0 + 4500)).toBe(1);
    expect(await pruneAudit(o.store, T0 + 4500)).toBe(0);
    const kept = await all(o.store);
    expect(kept.map((e) => e.seq)).toEqual([5, 6, 7, 8, 9, 10]);
    expect(kept[0]!.prev_hash).toBe(entries[3]!.hash); // the anchor: entry 4's hash, kept as given
    expect(await verify(o)).toEqual({ entries: 6, first: 5, last: 10, broken: undefined });

    // a later change is still found after the anchor; the anchor itself is checked too
    await o.sql([['UPDATE audit_log SET detail = ? WHERE seq = 5', ['{"i":0}']]]);
    expect((await verify(o)).broken).toMatchObject({ seq: 5, kind: 'changed' });
  });

  it('an entry older than a younger one before it is not taken from the middle', async () => {
    // entry 11 is stamped before the horizon (another replica's clock behind): it stays, as
    // does everything after the first young entry
    await append(o.store, draft(11, T0));
    await append(o.store, draft(12));
    expect(await pruneAudit(o.store, T0 + 3500)).toBe(3);
    expect((await all(o.store)).map((e) => e.seq)).toEqual([4, 5, 6, 7, 8, 9, 10, 11, 12]);
    expect((await verify(o)).broken).toBeUndefined();
  });

  it('everything past the horizon still leaves the newest entry, and the chain goes on from it', async () => {
    expect(await pruneAudit(o.store, T0 + 400 * DAY)).toBe(N - 1);
    expect((await all(o.store)).map((e) => e.seq)).toEqual([N]);
    const next = await append(o.store, draft(N + 1));
    expect(next).toMatchObject({ seq: N + 1, prev_hash: entries[N - 1]!.hash });
    expect(await verify(o)).toEqual({ entries: 2, first: N, last: N + 1, broken: undefined });
  });

  it("the adapter's retention pass prunes the audit log at AGW_AUDIT_RETENTION_DAYS", async () => {
    const commits = new GroupCommit(o.store);
    const logger = pino({ level: 'silent' });
    const retention = (now: number, auditDays?: number) =>
      new Retention({ commits, now: () => now, logger, days: 30, keepKinds: [], auditDays });
    // 365 days by default: a day after the entries, nothing goes
    await retention(T0 + DAY).run();
    expect(await all(o.store)).toHaveLength(N);
    // 365 days after T0 + 4.5 s: entries 1..4 (a second apart from T0 + 1 s) are past it
    await retention(T0 + 365 * DAY + 4500).run();
    expect((await all(o.store)).map((e) => e.seq)).toEqual([5, 6, 7, 8, 9, 10]);
    // AGW_AUDIT_RETENTION_DAYS=2, two days after T0 + 8.5 s: 5..8 go
    await retention(T0 + 2 * DAY + 8500, 2).run();
    expect((await all(o.store)).map((e) => e.seq)).toEqual([9, 10]);
    expect(await verify(o)).toEqual({ entries: 2, first: 9, last: 10, broken: undefined });
    // the pass moved the anchor's pruned end with what it took
    expect(await anchorOf(o.store)()).toEqual({
      seq: N,
      hash: entries[N - 1]!.hash,
      prunedSeq: 8,
      prunedHash: entries[7]!.hash,
    });
  });

  it('the newest entry deleted is `removed` at its seq; the next append does not take its number again', async () => {
    await o.sql([['DELETE FROM audit_log WHERE seq = 10']]);
    expect(await verify(o)).toEqual({
      entries: 9,
      first: 1,
      last: 9,
      broken: {
        seq: 10,
        kind: 'removed',
        why: 'seq 10 is missing at the newest end: the last entry is seq 9, the anchor holds seq 10',
      },
    });
    const next = await append(o.store, draft(11));
    expect(next).toMatchObject({ seq: 11, prev_hash: entries[9]!.hash });
    expect((await all(o.store)).map((e) => e.seq)).toEqual([...seqs(1, 9), 11]);
    expect((await verify(o)).broken).toEqual({
      seq: 10,
      kind: 'removed',
      why: 'seq 10 is missing between seq 9 and 11',
    });
  });

  it('the newest several deleted are `removed` at the first of them, before and after the next append', async () => {
    await o.sql([['DELETE FROM audit_log WHERE seq >= 7']]);
    expect((await verify(o)).broken).toEqual({
      seq: 7,
      kind: 'removed',
      why: 'seq 7..10 are missing at the newest end: the last entry is seq 6, the anchor holds seq 10',
    });
    expect(await append(o.store, draft(11))).toMatchObject({
      seq: 11,
      prev_hash: entries[9]!.hash,
    });
    expect((await verify(o)).broken).toEqual({
      seq: 7,
      kind: 'removed',
      why: 'seq 7..10 are missing between seq 6 and 11',
    });
  });

  it('every entry deleted is `removed` from seq 1: an empty log is not an intact one', async () => {
    await o.sql([['DELETE FROM audit_log']]);
    expect(await verify(o)).toEqual({
      entries: 0,
      first: undefined,
      last: undefined,
      broken: {
        seq: 1,
        kind: 'removed',
        why: 'seq 1..10 are missing: the log is empty (nothing was pruned), the anchor holds seq 10',
      },
    });
    const next = await append(o.store, draft(11));
    expect(next).toMatchObject({ seq: 11, prev_hash: entries[9]!.hash });
    expect(await verify(o)).toMatchObject({
      entries: 1,
      broken: {
        seq: 1,
        kind: 'removed',
        why: 'seq 1..10 are missing before seq 11, the first entry (nothing was pruned)',
      },
    });
  });

  it('young entries deleted from the oldest end, without a prune, are `removed` from seq 1', async () => {
    await o.sql([['DELETE FROM audit_log WHERE seq <= 3']]);
    expect((await verify(o)).broken).toEqual({
      seq: 1,
      kind: 'removed',
      why: 'seq 1..3 are missing before seq 4, the first entry (nothing was pruned)',
    });
    expect(await append(o.store, draft(11))).toMatchObject({ seq: 11 });
    expect((await verify(o)).broken).toMatchObject({ seq: 1, kind: 'removed' });
  });

  it('a prune moves the anchor in its transaction: the pruned log verifies, a deletion past it does not', async () => {
    const anchor = anchorOf(o.store);
    expect(await anchor()).toEqual({
      seq: N,
      hash: entries[N - 1]!.hash,
      prunedSeq: 0,
      prunedHash: GENESIS_HASH,
    });
    // entries 1..10 are a second apart from T0 + 1 s: those before T0 + 4.5 s go (1..4)
    expect(await pruneAudit(o.store, T0 + 4500, 3)).toBe(3);
    expect(await anchor()).toMatchObject({ prunedSeq: 3, prunedHash: entries[2]!.hash });
    expect(await pruneAudit(o.store, T0 + 4500)).toBe(1);
    expect(await anchor()).toEqual({
      seq: N,
      hash: entries[N - 1]!.hash,
      prunedSeq: 4,
      prunedHash: entries[3]!.hash,
    });
    expect(await verify(o)).toEqual({ entries: 6, first: 5, last: 10, broken: undefined });
    expect(await append(o.store, draft(11))).toMatchObject({ seq: 11 });
    expect(await anchor()).toMatchObject({ seq: 11, prunedSeq: 4 });
    expect(await verify(o)).toEqual({ entries: 7, first: 5, last: 11, broken: undefined });

    // young entries deleted after the pruned ones are not taken for a prune
    await o.sql([['DELETE FROM audit_log WHERE seq <= 6']]);
    expect((await verify(o)).broken).toEqual({
      seq: 5,
      kind: 'removed',
      why: 'seq 5..6 are missing before seq 7, the first entry (retention pruned up to seq 4)',
    });
  });

  it('the newest entry rewritten with its hash recomputed is `changed`: the anchor holds its hash', async () => {
    const e = entries[N - 1]!;
    const rewritten = auditEntry(
      N,
      {
        at: Date.parse(e.at),
        actor: 'operator:mallory',
        action: e.action,
        target: e.target,
        detail: e.detail,
      },
      e.prev_hash,
    );
    await o.sql([
      [
        'UPDATE audit_log SET actor = ?, hash = ? WHERE seq = ?',
        [rewritten.actor, rewritten.hash, N],
      ],
    ]);
    expect((await verify(o)).broken).toEqual({
      seq: N,
      kind: 'changed',
      why: 'its hash is not the one the anchor holds for it: it was rewritten with its hash recomputed',
    });
  });

  it('the anchor row deleted is a break of its own; appends go on from the log', async () => {
    await o.sql([['DELETE FROM audit_anchor']]);
    expect((await verify(o)).broken).toMatchObject({ seq: N + 1, kind: 'removed' });
    expect(await append(o.store, draft(11))).toMatchObject({
      seq: 11,
      prev_hash: entries[9]!.hash,
    });
    expect((await verify(o)).broken).toMatchObject({
      kind: 'removed',
      why: "the anchor (audit_anchor) is gone: what was removed at the log's ends cannot be told",
    });
  });

  it('the check at start reads the anchor: the newest entries deleted are an alert/integrity', async () => {
    await o.store.ensureChannels(['@orchestrator']);
    await o.sql([['DELETE FROM audit_log WHERE seq >= 9']]);
    const report = await checkAuditChain({
      store: o.store,
      commits: new GroupCommit(o.store),
      logger: pino({ level: 'silent' }),
      now: () => T0 + DAY,
    });
    expect(report).toMatchObject({ entries: 8, broken: { seq: 9, kind: 'removed' } });
    const queued = (await o.store.channelMessages('@orchestrator', 0, 10)).map(
      (m) => JSON.parse(m) as { kind: string; payload: unknown },
    );
    expect(queued).toMatchObject([
      {
        kind: 'alert/integrity',
        payload: {
          reason: 'audit_chain',
          recipient: 'audit_log',
          message_ids: ['audit:9:removed'],
        },
      },
    ]);
  });

  it('a store from before the anchor gets one when opened, from its log as found', async () => {
    expect(await pruneAudit(o.store, T0 + 3500)).toBe(3); // 1..3 go
    await o.beforeAnchor();
    // as an adapter of that version left it: what it did then cannot be told now (seq 10 gone)
    await o.sql([['DELETE FROM audit_log WHERE seq = 10']]);
    const source = await openAuditSource(o.db);
    try {
      expect(source.anchor).toBeUndefined(); // the CLI reads it as it was: ends taken as found
      expect(await verifyAuditChain(source.read, { anchor: source.anchor })).toEqual({
        entries: 6,
        first: 4,
        last: 9,
        broken: undefined,
      });
    } finally {
      await source.close();
    }
    await o.reopen();
    expect(await anchorOf(o.store)()).toEqual({
      seq: 9,
      hash: entries[8]!.hash,
      prunedSeq: 3,
      prunedHash: entries[2]!.hash,
    });
    expect(await verify(o)).toEqual({ entries: 6, first: 4, last: 9, broken: undefined });
    // from now on the ends are held
    await o.sql([['DELETE FROM audit_log WHERE seq = 9']]);
    expect((await verify(o)).broken).toMatchObject({ seq: 9, kind: 'removed' });
    expect(await append(o.store, draft(11))).toMatchObject({
      seq: 10,
      prev_hash: entries[8]!.hash,
    });
  });
});
