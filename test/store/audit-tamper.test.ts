/**
 * The audit log's chain against tampering, on both engines: entries appended through the real
 * store (the `audit` op), then rows changed behind its back with SQL on a connection of their
 * own, as a person with the database could: a column rewritten, a row deleted in the middle,
 * a forged row put in between (with a made-up hash, and with its hash recomputed as the adapter
 * computes it), a row rewritten with its hash recomputed. Verification, reading through
 * Store.audit and through the CLI's read-only source alike, names the seq and the kind each
 * time. Retention (the `prune_audit` op, and the adapter's Retention pass) takes entries from
 * the oldest end only, never the newest; the pruned log verifies from its anchor and goes on
 * from its last seq.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GroupCommit } from '../../src/adapter/group-commit.js';
import { Retention } from '../../src/adapter/retention.js';
import { openAuditSource } from '../../src/store/audit-source.js';
import { openStore } from '../../src/store/open.js';
import { openPgStore } from '../../src/store/postgres/pg-store.js';
import { type ChainReport, verifyAuditChain } from '../../src/store/rules/audit-chain.js';
import { auditEntry } from '../../src/store/rules/operators.js';
import type { AuditDraft, AuditEntry, Store } from '../../src/store/store.js';
import { testDatabase } from '../helpers/pg.js';

const T0 = Date.UTC(2031, 0, 1);
const DAY = 24 * 3600 * 1000;
const N = 10;
const OPTIONS = { sync: 'full', delivery: { alertsTo: 'orchestrator' } } as const;

interface Opened {
  readonly store: Store;
  /** AGW_DB: the file or the URL. */
  readonly db: string;
  /** Runs statements on a connection of its own (`?` placeholders), behind the store's back. */
  readonly sql: (statements: readonly [string, (readonly unknown[])?][]) => Promise<void>;
  readonly cleanup: () => Promise<void>;
}

const engines: [string, () => Promise<Opened>][] = [
  [
    'SQLite',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'agw-audit-'));
      const db = join(dir, 'adapter.db');
      const store = await openStore(db, OPTIONS);
      return {
        store,
        db,
        sql: async (statements) => {
          const c = new Database(db);
          try {
            c.pragma('busy_timeout = 5000');
            c.transaction(() => {
              for (const [text, params = []] of statements) c.prepare(text).run(...params);
            })();
          } finally {
            c.close();
          }
        },
        cleanup: async () => {
          await store.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'PostgreSQL',
    async () => {
      const t = await testDatabase();
      const store = await openPgStore(t.url, OPTIONS);
      return {
        store,
        db: t.url,
        sql: async (statements) => {
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
        },
        cleanup: async () => {
          await store.close();
          await t.drop();
        },
      };
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

/** The report through Store.audit (pages of 4: breaks fall on page seams too) and the CLI's source. */
async function verify(o: Opened): Promise<ChainReport> {
  const viaStore = await verifyAuditChain((after, limit) => o.store.audit(after, limit), {
    pageSize: 4,
  });
  const source = await openAuditSource(o.db);
  try {
    expect(await verifyAuditChain(source.read)).toEqual(viaStore);
  } finally {
    await source.close();
  }
  return viaStore;
}

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

describe.each(engines)('the audit chain on the %s store', (_name, open) => {
  let o: Opened;
  let entries: AuditEntry[];
  beforeEach(async () => {
    o = await open();
    entries = [];
    for (let i = 1; i <= N; i++) entries.push(await append(o.store, draft(i)));
  }, 30_000);
  afterEach(async () => {
    await o?.cleanup();
  });

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
  });
});
