/**
 * The audit log's chain checked at start (adapter/audit-check.ts), on both engines, with the
 * adapter's own pieces: the group commit on the adapter's event map, `watch` subscribing the log
 * and the CRIT entries to it, and a real journald in namespace mode. A sound log is one info
 * line and nothing else. A log changed behind the store's back is an error line naming the
 * seq and kind, a CRIT journald entry (reason `integrity`), and an `alert/integrity` (reason
 * `audit_chain`) in the alerts_to agent's queue; the store goes on appending after the break.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AUDIT_LOG_SUBJECT, checkAuditChain } from '../../src/adapter/audit-check.js';
import { AdapterEventMap, watch } from '../../src/adapter/events.js';
import { GroupCommit } from '../../src/adapter/group-commit.js';
import { EMERGENCY_MESSAGE_ID, Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { openStore } from '../../src/store/open.js';
import { openPgStore } from '../../src/store/postgres/pg-store.js';
import type { AuditEntry, SentAlert, Store } from '../../src/store/store.js';
import type { Json } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { testDatabase } from '../helpers/pg.js';

const T0 = Date.UTC(2031, 0, 1);
const ALERTS_TO = 'orchestrator';
const OPTIONS = { sync: 'full', delivery: { alertsTo: ALERTS_TO } } as const;

interface Opened {
  readonly store: Store;
  /** One statement behind the store's back (`?` placeholders). */
  readonly sql: (text: string, params: unknown[]) => Promise<void>;
  readonly cleanup: () => Promise<void>;
}

const engines: [string, () => Promise<Opened>][] = [
  [
    'SQLite',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'agw-audit-check-'));
      const file = join(dir, 'adapter.db');
      const store = await openStore(file, OPTIONS);
      return {
        store,
        sql: async (text, params) => {
          const c = new Database(file);
          try {
            c.prepare(text).run(...params);
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
        sql: async (text, params) => {
          const c = new pg.Client({ connectionString: t.url });
          await c.connect();
          try {
            let i = 0;
            await c.query(
              text.replace(/\?/g, () => `$${++i}`),
              params,
            );
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

let journal: TestJournal;
let writer: JournalWriter;
beforeAll(async () => {
  journal = await startJournal();
  writer = new JournalWriter({ socketPath: journal.socket });
});
afterAll(async () => {
  writer?.close();
  await journal?.destroy();
});

describe.each(engines)('the audit chain checked at start, %s store', (name, open) => {
  let o: Opened;
  const logged: Json[] = [];
  const alerts: SentAlert[] = [];
  /** The adapter's wiring: events, the log and the CRIT entries on them, the group commit. */
  let commits: GroupCommit;
  const agentId = `adapter-${name.toLowerCase()}`;
  const logger = pino(
    { level: 'info' },
    { write: (line: string) => void logged.push(JSON.parse(line)) },
  );
  const now = () => T0 + 3_600_000;

  beforeAll(async () => {
    o = await open();
    await o.store.ensureChannels([`@${ALERTS_TO}`]);
    const events = new AdapterEventMap();
    watch(events, logger, new Emergencies(writer, { agentId }));
    events.on('alert', (a) => alerts.push(a));
    commits = new GroupCommit(o.store, { events });
    for (let i = 1; i <= 8; i++) {
      await commits.run({
        op: 'audit',
        entry: {
          at: T0 + i,
          actor: 'operator:alice',
          action: 'pause',
          target: 'qa',
          detail: { i },
        },
      });
    }
  }, 30_000);
  afterAll(async () => {
    await o?.cleanup();
  });

  it('a sound log: one info line, no alert, no CRIT entry', async () => {
    const report = await checkAuditChain({ store: o.store, commits, logger, now });
    expect(report).toEqual({ entries: 8, first: 1, last: 8, broken: undefined });
    expect(logged.map((l) => [l.level, l.msg])).toEqual([
      [30, 'audit log: 8 entries, seq 1..8, chain intact'],
    ]);
    expect(alerts).toEqual([]);
  });

  it('a broken chain: an error line, a CRIT entry and an alert/integrity to alerts_to; appends go on', {
    timeout: 30_000,
  }, async () => {
    logged.length = 0;
    await o.sql('UPDATE audit_log SET actor = ? WHERE seq = ?', ['operator:mallory', 5]);
    const report = await checkAuditChain({ store: o.store, commits, logger, now });
    expect(report?.broken).toMatchObject({ seq: 5, kind: 'changed' });

    // (a) the log: the check's line names the break, the alert's line says what it means
    const errors = logged.filter((l) => l.level === 50).map((l) => String(l.msg));
    expect(errors[0]).toMatch(/^audit log: chain broken at seq 5 \(changed\): /);
    expect(logged[0]).toMatchObject({ audit_seq: 5, audit_break: 'changed' });
    expect(errors[1]).toMatch(
      /^integrity: the audit log's hash chain is broken at seq 5 \(changed\)/,
    );

    // (b) the CRIT entry, through the same path as every integrity alert
    const crit = await journal.next('AGW_REASON=integrity', `AGW_AGENT_ID=${agentId}`);
    expect(crit).toMatchObject({
      PRIORITY: '2',
      MESSAGE_ID: EMERGENCY_MESSAGE_ID,
      AGW_RECIPIENT: AUDIT_LOG_SUBJECT,
      AGW_DETAIL: 'audit_chain',
      AGW_MESSAGE_IDS: 'audit:5:changed',
    });
    expect(String(crit.MESSAGE)).toContain(
      "the audit log's hash chain is broken at seq 5 (changed)",
    );

    // (c) the alert, a message in alerts_to's queue like every other
    const expected = {
      reason: 'audit_chain',
      recipient: AUDIT_LOG_SUBJECT,
      count: 1,
      message_ids: ['audit:5:changed'],
      attempts: 0,
    };
    expect(alerts).toEqual([{ kind: 'alert/integrity', payload: expected }]);
    const queued = (await o.store.channelMessages(`@${ALERTS_TO}`, 0, 10)).map(
      (m) => JSON.parse(m) as Json,
    );
    expect(queued).toHaveLength(1);
    expect(queued[0]).toMatchObject({
      sender: 'adapter',
      to: `@${ALERTS_TO}`,
      kind: 'alert/integrity',
      priority: 'critical',
      payload: expected,
    });

    // the store goes on: the next entry chains on from the last, the break stays where it was
    const next = (await commits.run({
      op: 'audit',
      entry: { at: T0 + 9, actor: 'adapter', action: 'start', target: 'adapter', detail: {} },
    })) as AuditEntry;
    expect(next.seq).toBe(9);
    const again = await checkAuditChain({ store: o.store, commits, logger, now });
    expect(again).toMatchObject({ broken: { seq: 5, kind: 'changed' } });
  });

  it('a store that cannot be read is one error line, never a rejection', async () => {
    logged.length = 0;
    const failing = {
      audit: async () => {
        throw new Error('the disk went away');
      },
      auditAnchor: async () => {
        throw new Error('the disk went away');
      },
    };
    expect(await checkAuditChain({ store: failing, commits, logger, now })).toBeUndefined();
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 50, err: { message: 'the disk went away' } });
  });
});
