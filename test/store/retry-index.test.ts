/**
 * Migration 6: the retry timer's index (deliveries_retrying) holds only the deliveries waiting
 * out a retry's backoff, so a send's commit no longer writes a page of it for every new
 * delivery. Asserted on SQLite's query plan for the timer's read, on what the index holds as
 * deliveries are made, leased and nacked, and on a file from before migration 6, which loses
 * the old index and gains the new one when it is opened. (That the timer still finds every
 * retry is the conformance suite's "nextDue" assertions.)
 */
import { createHash, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, expect, it } from 'vitest';
import { SQL } from '../../src/store/sqlite/sql.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { MessageDraft } from '../../src/store/store.js';
import { tempDir } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-retry-index-');
afterAll(cleanup);

const T0 = 1_800_000_000_000;

function draft(): MessageDraft {
  const key = randomUUID();
  return {
    sender: 'pm',
    idempotencyKey: key,
    fingerprint: createHash('sha256').update(key).digest(),
    channel: '@qa',
    kind: 'status',
    priority: 'normal',
    replyTo: null,
    payloadJson: JSON.stringify({ text: 'x' }),
    receivedAt: T0,
    recipients: ['qa'],
  };
}

/** The indexes on deliveries, and the plan of the timer's read. */
function look(file: string): { indexes: string[]; plan: string[]; retrying: number } {
  const db = new Database(file, { readonly: true });
  try {
    const indexes = db
      .prepare<[], { name: string }>(
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'deliveries' ORDER BY name",
      )
      .all()
      .map((r) => r.name);
    const plan = db
      .prepare<[number], { detail: string }>(`EXPLAIN QUERY PLAN ${SQL.nextAvailable}`)
      .all(T0)
      .map((r) => r.detail);
    // rows the partial index holds, counted through it
    const retrying = indexes.includes('deliveries_retrying')
      ? (db
          .prepare(
            'SELECT count(*) FROM deliveries INDEXED BY deliveries_retrying WHERE state = 0 AND attempt > 0',
          )
          .pluck()
          .get() as number)
      : -1;
    return { indexes, plan, retrying };
  } finally {
    db.close();
  }
}

it('keeps only deliveries waiting for a retry in the timer index, and the timer reads through it', async () => {
  const file = join(dir, 'a.db');
  const store = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  try {
    await store.ensureChannels(['@qa']);
    await store.commit([{ op: 'append', drafts: [draft(), draft(), draft()] }]);
    expect(look(file).retrying).toBe(0); // three pending, ready at once: none in it

    const { results } = await store.commit([{ op: 'lease', agent: 'qa', max: 1, now: T0 }]);
    const leased = results[0] as { ok: string[] }; // each delivery as the JSON it is sent as
    const ids = leased.ok.map((d) => (JSON.parse(d) as { delivery_id: number }).delivery_id);
    expect(ids).toHaveLength(1);
    await store.commit([{ op: 'nack', agent: 'qa', ids, now: T0 }]);
    const after = look(file);
    expect(after.retrying).toBe(1); // the nacked one waits out its backoff
    expect(after.plan.join(' | ')).toMatch(/deliveries_retrying/);
    expect(after.plan.join(' | ')).not.toMatch(/\bSCAN\b/);
    expect(await store.nextDue(T0)).toBeGreaterThan(T0);
  } finally {
    await store.close();
  }
});

it('replaces the old index in a file written before migration 6', async () => {
  const file = join(dir, 'b.db');
  const store = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  await store.close();
  const db = new Database(file);
  db.exec(`
    DROP INDEX deliveries_retrying;
    CREATE INDEX deliveries_waiting ON deliveries (available_at) WHERE state = 0;
  `); // migration 6 undone
  db.pragma('user_version = 5');
  db.close();
  expect(look(file).indexes).toContain('deliveries_waiting');

  const reopened = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  await reopened.close();
  const { indexes } = look(file);
  expect(indexes).toContain('deliveries_retrying');
  expect(indexes).not.toContain('deliveries_waiting');
});
