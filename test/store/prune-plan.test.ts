/**
 * Retention deletes messages with their deliveries and dead letters, and SQLite checks every
 * foreign key that names a deleted row (better-sqlite3 turns foreign keys on). Each of those
 * checks must find its rows through an index: a check that scans its table costs, for every
 * delivery pruned, a read of every dead letter stored (migration 5). Asserted on the query plans
 * SQLite makes for the prune statements in a store this code created, and on a file from before
 * migration 5, which gains the index when it is opened.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, expect, it } from 'vitest';
import { SQL } from '../../src/store/sqlite/sql.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { tempDir } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-prune-plan-');
afterAll(cleanup);

/** Every step of the plans of the prune statements, foreign key checks included. */
function prunePlans(file: string): string[] {
  const db = new Database(file, { readonly: true });
  try {
    expect(db.pragma('foreign_keys', { simple: true })).toBe(1);
    return [SQL.pruneDeadLetters, SQL.pruneDeliveries, SQL.pruneMessage].flatMap((sql) =>
      db
        .prepare(`EXPLAIN QUERY PLAN ${sql}`)
        .all(1)
        .map((r) => `${sql} :: ${(r as { detail: string }).detail}`),
    );
  } finally {
    db.close();
  }
}

it('finds what each prune statement and its foreign key checks touch through an index', async () => {
  const file = join(dir, 'a.db');
  const store = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  await store.close();
  const plans = prunePlans(file);
  // the check of a pruned delivery's dead letters is there, and uses the index
  expect(plans.some((p) => /dead_letters.*dead_letters_by_delivery/.test(p))).toBe(true);
  expect(plans.filter((p) => /\bSCAN\b/.test(p))).toEqual([]);
});

it('adds the index to a file written before migration 5', async () => {
  const file = join(dir, 'b.db');
  const store = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  await store.close();
  const db = new Database(file);
  db.exec('DROP INDEX dead_letters_by_delivery');
  db.pragma('user_version = 4');
  db.close();
  expect(prunePlans(file).some((p) => /SCAN dead_letters/.test(p))).toBe(true);

  const reopened = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  await reopened.close();
  expect(prunePlans(file).filter((p) => /\bSCAN\b/.test(p))).toEqual([]);
});
