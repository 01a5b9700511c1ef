/**
 * SQLite's migration 7 and PostgreSQL's migration 2 (docs/design/threads.md, "Budgets"):
 * alert/budget counts kept per thread before them become counts per sender, so the refusals counted
 * before an upgrade still go out, in one alert per sender and reason, naming the latest thread. The
 * "before" stores are this store's own, with budget rows written as the older code wrote them and
 * the schema version put back.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { openPgStore } from '../../src/store/postgres/pg-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { SentAlert, Store } from '../../src/store/store.js';
import { testDatabase } from '../helpers/pg.js';
import { tempDir } from '../helpers/topology.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const T0 = Date.UTC(2031, 0, 1);
const opts = { delivery: { alertsTo: 'orchestrator', alertWindowMs: 30_000 } };

/** Rows as the code before these migrations kept them: recipient the thread, sender the agent. */
const OLD_ROWS = [
  ['thread-A', 'hop_budget_exceeded', T0, 2, '["m1"]', 'pm'],
  ['thread-B', 'hop_budget_exceeded', T0 + 5, 3, '["m2"]', 'pm'],
  ['thread-C', 'thread_budget_exceeded', T0 + 1, 1, '["m3"]', 'qa'],
] as const;

const budget = (sender: string, reason: string, thread: string, count: number): SentAlert =>
  ({
    kind: 'alert/budget',
    payload: { reason, thread_id: thread, sender, count, message_ids: [] },
  }) as SentAlert;

/** The alerts a sweep past every window writes, by sender. */
async function dueAlerts(store: Store): Promise<SentAlert[]> {
  await store.ensureChannels(['@orchestrator']);
  const { effects } = await store.commit([{ op: 'sweep', now: T0 + 60_000 }]);
  return [...effects.alerts].sort((a, b) =>
    a.kind === 'alert/budget' && b.kind === 'alert/budget'
      ? a.payload.sender.localeCompare(b.payload.sender)
      : 0,
  );
}

it('SQLite, migration 7: budget counts kept per thread go out per sender, naming the latest thread', async () => {
  const { dir, cleanup } = tempDir('agw-migrate-budget-');
  cleanups.push(cleanup);
  const file = join(dir, 'a.db');
  await new SqliteStore(file, opts).close();
  const db = new Database(file);
  const insert = db.prepare(
    `INSERT INTO alert_state (recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender)
     VALUES (?, ?, 'alert/budget', ?, ?, ?, 0, ?)`,
  );
  for (const r of OLD_ROWS) insert.run(...r);
  db.pragma('user_version = 6');
  db.close();

  const store = new SqliteStore(file, opts);
  cleanups.push(() => store.close());
  expect(await dueAlerts(store)).toEqual([
    budget('pm', 'hop_budget_exceeded', 'thread-B', 5),
    budget('qa', 'thread_budget_exceeded', 'thread-C', 1),
  ]);
});

it('PostgreSQL, migration 2: budget counts and events kept per thread go out per sender', async () => {
  const database = await testDatabase();
  cleanups.push(() => database.drop());
  await (await openPgStore(database.url, opts)).close();
  const c = new pg.Client({ connectionString: database.url });
  await c.connect();
  try {
    for (const r of OLD_ROWS) {
      await c.query(
        `INSERT INTO alert_state (recipient, reason, kind, last_sent_at, count, message_ids, attempts, sender)
         VALUES ($1, $2, 'alert/budget', $3, $4, $5, 0, $6)`,
        [...r],
      );
    }
    // an event a group raised before the upgrade, not folded yet
    await c.query(
      `INSERT INTO alert_events (recipient, reason, message_id, attempts, at, count, sender)
       VALUES ('thread-D', 'hop_budget_exceeded', 'm4', 0, $1, 1, 'pm')`,
      [T0 + 6],
    );
    await c.query('DELETE FROM agw_schema WHERE version >= 2');
  } finally {
    await c.end();
  }
  const store = await openPgStore(database.url, opts);
  cleanups.push(() => store.close());
  const [pm, qa] = await dueAlerts(store);
  expect(qa).toEqual(budget('qa', 'thread_budget_exceeded', 'thread-C', 1));
  expect(pm).toMatchObject({
    kind: 'alert/budget',
    payload: { reason: 'hop_budget_exceeded', sender: 'pm', thread_id: 'thread-D', count: 6 },
  });
});
