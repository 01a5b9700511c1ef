/**
 * The senders' totals are written back at most once every USAGE_SAVE_MS and with every prune
 * (storage-budget.ts), with the mark of the messages they count; an open adds the messages
 * stored after the mark. Checked on the files as a crash leaves them: the database and its WAL
 * copied while the store that wrote them is still open (never closed, nothing flushed), and
 * opened again elsewhere. The clock is faked, so "within the second" is exact.
 */
import { createHash, randomUUID } from 'node:crypto';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeEach, expect, it, vi } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { USAGE_SAVE_MS } from '../../src/store/sqlite/storage-budget.js';
import type { MessageDraft } from '../../src/store/store.js';
import { tempDir } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-usage-mark-');
afterAll(cleanup);
beforeEach(() => {
  vi.useFakeTimers({ toFake: ['performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

let n = 0;
function draft(sender: string, text: string, receivedAt = Date.now()): MessageDraft {
  const key = randomUUID();
  return {
    sender,
    idempotencyKey: key,
    fingerprint: createHash('sha256').update(key).digest(),
    channel: 'product',
    kind: 'status',
    priority: 'normal',
    replyTo: null,
    payloadJson: JSON.stringify({ text, n: n++ }),
    receivedAt,
    recipients: ['qa', 'growth'],
  };
}

/** What is on disk: the mark, the highest message id, and the totals recounted from rows. */
function onDisk(file: string) {
  const db = new Database(file, { readonly: true });
  try {
    return {
      asOf: db.prepare('SELECT as_of FROM usage_mark').pluck().get() as number,
      maxId: db.prepare('SELECT max(id) FROM messages').pluck().get() as number,
      recounted: Object.fromEntries(
        db
          .prepare<[], { sender: string; bytes: number }>(
            'SELECT sender, sum(size) AS bytes FROM messages GROUP BY sender',
          )
          .all()
          .map((r) => [r.sender, r.bytes]),
      ),
    };
  } finally {
    db.close();
  }
}

/** The files as a SIGKILL would leave them, opened by a new store. */
async function openCopy(file: string, as: string) {
  copyFileSync(file, as);
  copyFileSync(`${file}-wal`, `${as}-wal`);
  const copy = new SqliteStore(as, { delivery: { alertsTo: 'orchestrator' } });
  try {
    return { senders: (await copy.storageUse()).senders, disk: onDisk(as) };
  } finally {
    await copy.close();
  }
}

it('counts, after a crash, the messages committed since the totals were last written', async () => {
  const file = join(dir, 'a.db');
  const store = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  try {
    await store.ensureChannels(['product']);
    // the first commit writes the totals back; the next, 10 ms later, does not
    await store.commit([{ op: 'append', drafts: [draft('pm', 'a'.repeat(3000))] }]);
    vi.advanceTimersByTime(10);
    await store.commit([
      { op: 'append', drafts: [draft('pm', 'b'.repeat(500)), draft('engineering', 'c')] },
    ]);
    const live = (await store.storageUse()).senders;

    const crashed = await openCopy(file, join(dir, 'a-copy.db'));
    expect(crashed.disk.asOf).toBeLessThan(crashed.disk.maxId); // the second commit is after it
    expect(crashed.senders).toEqual(crashed.disk.recounted);
    expect(crashed.senders).toEqual(live);

    // a second on, the next commit writes them back with the mark at the last message
    vi.advanceTimersByTime(USAGE_SAVE_MS);
    await store.commit([{ op: 'append', drafts: [draft('engineering', 'd'.repeat(100))] }]);
    const saved = await openCopy(file, join(dir, 'a-copy2.db'));
    expect(saved.disk.asOf).toBe(saved.disk.maxId);
    expect(saved.senders).toEqual(saved.disk.recounted);
  } finally {
    await store.close();
  }
});

it('writes the totals back in the transaction of a prune, whenever it comes', async () => {
  const file = join(dir, 'b.db');
  const store = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  try {
    await store.ensureChannels(['product']);
    const old = Date.now() - 10 * 86_400_000;
    await store.commit([
      { op: 'append', drafts: [draft('pm', 'old', old), draft('pm', 'x', old)] },
    ]);
    // nothing waits for them: acked by both recipients
    for (const agent of ['qa', 'growth']) {
      const { results } = await store.commit([{ op: 'lease', agent, max: 10, now: Date.now() }]);
      const ids = (results[0] as { ok: string[] }).ok.map(
        (d) => (JSON.parse(d) as { delivery_id: number }).delivery_id,
      );
      await store.commit([{ op: 'ack', agent, ids }]);
    }
    vi.advanceTimersByTime(10);
    await store.commit([{ op: 'append', drafts: [draft('engineering', 'new')] }]); // not written
    vi.advanceTimersByTime(10);
    const { results } = await store.commit([
      { op: 'prune', before: Date.now() - 86_400_000, keep: [], limit: 100 },
    ]);
    expect(results[0]).toEqual({ ok: 2 });

    const crashed = await openCopy(file, join(dir, 'b-copy.db'));
    expect(crashed.disk.asOf).toBe(crashed.disk.maxId); // the prune wrote them with the mark
    // a sender whose messages are all pruned keeps a total of 0, where a recount has no row
    expect(crashed.senders).toEqual({ ...crashed.disk.recounted, pm: 0 });
    expect(crashed.senders).toEqual((await store.storageUse()).senders);
  } finally {
    await store.close();
  }
});

it('writes the totals back at a clean close, so the next open has nothing to add', async () => {
  const file = join(dir, 'c.db');
  const store = new SqliteStore(file, { delivery: { alertsTo: 'orchestrator' } });
  await store.ensureChannels(['product']);
  await store.commit([{ op: 'append', drafts: [draft('pm', 'a')] }]);
  vi.advanceTimersByTime(10);
  await store.commit([{ op: 'append', drafts: [draft('pm', 'b'), draft('engineering', 'c')] }]);
  const live = (await store.storageUse()).senders;
  await store.close();
  const disk = onDisk(file);
  expect(disk.asOf).toBe(disk.maxId);
  expect(disk.recounted).toEqual(live);
});
