/**
 * `agent-gateway audit verify` (the built CLI, a real child process) against a SQLite file and a
 * PostgreSQL database whose audit log was appended by the real store: exit 0 and one line when
 * the chain is intact (also while the store is open and its entries are still in the WAL), exit 1
 * naming the seq and kind of the first break after a row is changed, removed (in the middle, the
 * newest ones, all of them, the oldest ones without a prune) or inserted with SQL; exit 2 and one
 * line on stderr for a bad flag, a missing subcommand, a missing file, a file that is no
 * adapter's store and an unreachable database. AGW_DB is the default of --db. A SQLite store
 * copied to PostgreSQL by migrate-store keeps its anchor: its prune verifies there, a deletion
 * of its newest entry does not.
 */
import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { copyFromSqlite } from '../../src/store/postgres/copy-from-sqlite.js';
import { openPgStore } from '../../src/store/postgres/pg-store.js';
import { auditEntry } from '../../src/store/rules/operators.js';
import { openCopySource } from '../../src/store/sqlite/copy-source.js';
import type { AuditDraft, AuditEntry, Store } from '../../src/store/store.js';
import { runCli } from '../helpers/cli.js';
import { testDatabase } from '../helpers/pg.js';
import { tempDir } from '../helpers/topology.js';

const T0 = Date.UTC(2031, 0, 1);
const N = 6;
const OPTIONS = { sync: 'full', delivery: { alertsTo: 'orchestrator' } } as const;

const draft = (i: number): AuditDraft => ({
  at: T0 + i * 1000,
  actor: 'operator:alice',
  action: i % 2 === 0 ? 'pause' : 'resume',
  target: 'qa',
  detail: { i },
});

async function appendAll(store: Store): Promise<AuditEntry[]> {
  const out: AuditEntry[] = [];
  for (let i = 1; i <= N; i++) {
    const { results } = await store.commit([{ op: 'audit', entry: draft(i) }]);
    const r = results[0]!;
    if ('err' in r) throw r.err;
    out.push(r.ok as AuditEntry);
  }
  return out;
}

const verify = (db: string, env: Record<string, string> = {}) =>
  runCli(['audit', 'verify', '--db', db], env);

/** A forged row at seq 3 after entry 2, its hash recomputed, the rest moved up to make room. */
function forgedInsert(entries: AuditEntry[]): [string, unknown[]][] {
  const d: AuditDraft = { ...draft(99), at: T0 + 2500 };
  const e = auditEntry(3, d, entries[1]!.hash);
  return [
    ['UPDATE audit_log SET seq = -seq WHERE seq >= 3', []],
    ['UPDATE audit_log SET seq = 1 - seq WHERE seq < 0', []],
    [
      'INSERT INTO audit_log (seq, at, actor, action, target, detail, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
      [3, d.at, e.actor, e.action, e.target, JSON.stringify(e.detail), e.prev_hash, e.hash],
    ],
  ];
}

const TAMPERINGS: [string, (entries: AuditEntry[]) => [string, unknown[]][], RegExp][] = [
  [
    'a changed actor',
    () => [['UPDATE audit_log SET actor = ? WHERE seq = 4', ['operator:mallory']]],
    /^audit log: chain broken at seq 4 \(changed\): /,
  ],
  [
    'a row removed in the middle',
    () => [['DELETE FROM audit_log WHERE seq = 3', []]],
    /^audit log: chain broken at seq 3 \(removed\): seq 3 is missing between seq 2 and 4\n$/,
  ],
  [
    'a forged row with its hash recomputed',
    forgedInsert,
    /^audit log: chain broken at seq 3 \(inserted\): /,
  ],
  [
    'the newest rows removed',
    () => [['DELETE FROM audit_log WHERE seq >= 5', []]],
    /^audit log: chain broken at seq 5 \(removed\): seq 5\.\.6 are missing at the newest end: the last entry is seq 4, the anchor holds seq 6\n$/,
  ],
  [
    'every row removed',
    () => [['DELETE FROM audit_log', []]],
    /^audit log: chain broken at seq 1 \(removed\): seq 1\.\.6 are missing: the log is empty \(nothing was pruned\), the anchor holds seq 6\n$/,
  ],
  [
    'the oldest rows removed without a prune',
    () => [['DELETE FROM audit_log WHERE seq <= 2', []]],
    /^audit log: chain broken at seq 1 \(removed\): seq 1\.\.2 are missing before seq 3, the first entry \(nothing was pruned\)\n$/,
  ],
];

describe('audit verify on a SQLite file', () => {
  const { dir, cleanup } = tempDir('agw-audit-cli-');
  const file = join(dir, 'adapter.db');
  let entries: AuditEntry[];
  beforeAll(async () => {
    const store = await openStore(file, OPTIONS);
    try {
      entries = await appendAll(store);
      // read while the store is open, its entries in the WAL: an adapter may be running on it
      const live = await verify(file);
      expect(live).toMatchObject({ code: 0, stderr: '' });
      expect(live.stdout).toBe(`audit log: ${N} entries, seq 1..${N}, chain intact\n`);
    } finally {
      await store.close();
    }
  }, 30_000);
  afterAll(cleanup);

  it('exits 0 with one line when intact; AGW_DB is the default of --db', async () => {
    const r = await runCli(['audit', 'verify'], { AGW_DB: file });
    expect(r).toEqual({
      code: 0,
      stdout: `audit log: ${N} entries, seq 1..${N}, chain intact\n`,
      stderr: '',
    });
  });

  it.each(TAMPERINGS)('exits 1 naming the seq after %s', async (_what, statements, line) => {
    const copy = join(dir, `tampered-${Math.random().toString(36).slice(2)}.db`);
    copyFileSync(file, copy);
    const c = new Database(copy);
    try {
      c.transaction(() => {
        for (const [text, params] of statements(entries)) c.prepare(text).run(...params);
      })();
    } finally {
      c.close();
    }
    const r = await verify(copy);
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(line);
    expect(r.code).toBe(1);
  });

  it('exits 2 with one line for a bad flag, no subcommand, no file, or a file that is no store', async () => {
    const notAStore = join(dir, 'other.db');
    new Database(notAStore).exec('CREATE TABLE t (x)');
    const notSqlite = join(dir, 'text.db');
    writeFileSync(notSqlite, 'this is not a database, just text long enough to have a header');
    const cases: [string[], RegExp][] = [
      [['audit', 'verify', '--dbb', file], /^agent-gateway audit: --dbb: unknown flag/],
      [['audit', '--db', file], /^agent-gateway audit: give the subcommand verify \(got none\)/],
      [['audit', 'check', '--db', file], /give the subcommand verify \(got "check"\)/],
      [['audit', 'verify', '--db', join(dir, 'nope.db')], /^agent-gateway audit: no such file: /],
      [['audit', 'verify', '--db', notAStore], /has no audit log: it is not an adapter's store/],
      [['audit', 'verify', '--db', notSqlite], /^agent-gateway audit: cannot read .*text\.db/],
    ];
    for (const [args, line] of cases) {
      const r = await runCli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(line);
      expect(r.stderr.trim().split('\n'), r.stderr).toHaveLength(1);
    }
  });

  it('is listed in the usage, and its --help says how to run it', async () => {
    const r = await runCli(['--help']);
    expect(r.stdout).toMatch(/^ {2}audit +check the audit log's hash chain \(audit verify\)$/m);
    const help = await runCli(['audit', '--help']);
    expect(help.stdout.split('\n')[0]).toBe('usage: agent-gateway audit verify [--db VALUE]');
  });
});

describe('audit verify on a PostgreSQL database', () => {
  let url: string;
  let drop: () => Promise<void>;
  let entries: AuditEntry[];
  beforeAll(async () => {
    ({ url, drop } = await testDatabase());
    const store = await openPgStore(url, OPTIONS);
    try {
      entries = await appendAll(store);
    } finally {
      await store.close();
    }
  }, 30_000);
  afterAll(async () => {
    await drop?.();
  });

  const sql = async (statements: [string, unknown[]][]) => {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query('BEGIN');
      for (const [text, params] of statements) {
        let i = 0;
        await c.query(
          text.replace(/\?/g, () => `$${++i}`),
          params,
        );
      }
      await c.query('COMMIT');
    } finally {
      await c.end();
    }
  };

  it('exits 0 when intact, then 1 naming the seq after each tampering (each undone after)', {
    timeout: 60_000,
  }, async () => {
    const intact = await verify(url);
    expect(intact).toEqual({
      code: 0,
      stdout: `audit log: ${N} entries, seq 1..${N}, chain intact\n`,
      stderr: '',
    });
    for (const [what, statements, line] of TAMPERINGS) {
      await sql([['CREATE TABLE audit_saved AS SELECT * FROM audit_log', []]]);
      await sql(statements(entries));
      const r = await verify(url);
      expect(r.stdout, what).toMatch(line);
      expect(r.code, what).toBe(1);
      await sql([
        ['DELETE FROM audit_log', []],
        ['INSERT INTO audit_log SELECT * FROM audit_saved', []],
        ['DROP TABLE audit_saved', []],
      ]);
      expect((await verify(url)).code, `${what}, undone`).toBe(0);
    }
  });

  it('exits 2 with one line when the database cannot be reached', async () => {
    const r = await verify('postgres://postgres@127.0.0.1:1/agw_nowhere');
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(
      /^agent-gateway audit: cannot reach postgres:\/\/postgres@127\.0\.0\.1:1\/agw_nowhere: /,
    );
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});

describe('audit verify on a store copied by migrate-store', () => {
  const { dir, cleanup } = tempDir('agw-audit-copy-');
  let drop: (() => Promise<void>) | undefined;
  afterAll(async () => {
    await drop?.();
    cleanup();
  });

  it('verifies from the anchor the file kept, its prune included; the newest removed is named', {
    timeout: 60_000,
  }, async () => {
    const file = join(dir, 'adapter.db');
    const store = await openStore(file, OPTIONS);
    try {
      await appendAll(store);
      // entries are a second apart from T0 + 1 s: 1 and 2 go
      const { results } = await store.commit([
        { op: 'prune_audit', before: T0 + 2500, limit: 100 },
      ]);
      expect(results[0]).toMatchObject({ ok: 2 });
    } finally {
      await store.close();
    }
    const t = await testDatabase();
    drop = t.drop;
    const source = openCopySource(file);
    try {
      expect(await copyFromSqlite(source, t.url)).toMatchObject({ audit: N - 2 });
    } finally {
      source.close();
    }
    expect(await verify(t.url)).toEqual({
      code: 0,
      stdout: `audit log: ${N - 2} entries, seq 3..${N}, chain intact\n`,
      stderr: '',
    });
    const c = new pg.Client({ connectionString: t.url });
    await c.connect();
    try {
      await c.query('DELETE FROM audit_log WHERE seq = $1', [N]);
    } finally {
      await c.end();
    }
    const r = await verify(t.url);
    expect(r.stdout).toMatch(
      new RegExp(
        `^audit log: chain broken at seq ${N} \\(removed\\): seq ${N} is missing at the newest end`,
      ),
    );
    expect(r.code).toBe(1);
  });
});
