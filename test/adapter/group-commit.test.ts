/**
 * Group commit over a real SQLite file: requests of one event-loop turn share one transaction,
 * answers come only after it, and a failed transaction answers everyone with a retryable error
 * and leaves nothing behind.
 */
import { createHash, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { type CommitStats, GroupCommit } from '../../src/adapter/group-commit.js';
import { GatewayError } from '../../src/protocol/errors.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { MessageDraft } from '../../src/store/store.js';
import { tempDir } from '../helpers/topology.js';

let store: SqliteStore;
let cleanup: () => void;
beforeEach(async () => {
  const t = tempDir('agw-gc-');
  cleanup = t.cleanup;
  store = new SqliteStore(join(t.dir, 's.db'));
  await store.ensureChannels(['product']);
});
afterEach(async () => {
  await store.close();
  cleanup();
});

const submit = (gc: GroupCommit, drafts: MessageDraft[]) => gc.run({ op: 'append', drafts });

function draft(channel = 'product'): MessageDraft {
  const key = randomUUID();
  return {
    sender: 'pm',
    idempotencyKey: key,
    fingerprint: createHash('sha256').update(key).digest(),
    channel,
    kind: 'status',
    priority: 'normal',
    replyTo: null,
    payloadJson: '{}',
    receivedAt: Date.now(),
    recipients: ['qa'],
  };
}

it('commits the submissions of one turn together, in order, then answers them', async () => {
  const commits: CommitStats[] = [];
  const gc = new GroupCommit(store);
  gc.on('commit', (s) => commits.push(s));
  const answers = Array.from({ length: 50 }, (_, i) =>
    submit(gc, i % 10 === 0 ? [draft(), draft()] : [draft()]),
  );
  expect(commits).toHaveLength(0); // nothing is committed, so nothing can be answered yet
  const outcomes = (await Promise.all(answers)).flat();
  expect(commits).toEqual([{ messages: 55, operations: 50, seconds: expect.any(Number) }]);
  expect(outcomes.map((o) => (o.status === 201 ? o.assignment.channel_sequence_id : 0))).toEqual(
    Array.from({ length: 55 }, (_, i) => i + 1),
  );
  expect(await store.channelMessages('product', 0, 100)).toHaveLength(55);
});

it('a failed transaction answers every member with storage_error and writes nothing', async () => {
  const errors: unknown[] = [];
  const gc = new GroupCommit(store);
  gc.on('commit:error', (e) => errors.push(e));
  // the third draft names a channel with no counter: the store throws mid-transaction
  const results = await Promise.allSettled([
    submit(gc, [draft()]),
    submit(gc, [draft()]),
    submit(gc, [draft('ghost')]),
  ]);
  for (const r of results) {
    expect(r.status).toBe('rejected');
    const err = (r as PromiseRejectedResult).reason as GatewayError;
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.code).toBe('storage_error');
    expect(err.retryable).toBe(true);
  }
  expect(errors).toHaveLength(1);
  expect(await store.channelMessages('product', 0, 100)).toHaveLength(0);
  // and the sequence did not move: the next message is still number 1
  const [next] = await submit(gc, [draft()]);
  expect(next).toMatchObject({ status: 201, assignment: { channel_sequence_id: 1 } });
});

it('refuses beyond maxPending with a retryable overloaded error', async () => {
  const gc = new GroupCommit(store, { maxPending: 3 });
  const taken = [submit(gc, [draft(), draft()]), submit(gc, [draft()])];
  await expect(submit(gc, [draft()])).rejects.toMatchObject({ code: 'overloaded', retryAfterS: 1 });
  await Promise.all(taken);
  await expect(submit(gc, [draft()])).resolves.toHaveLength(1);
});

it('holds synchronous=FULL unless told otherwise, and reopens with the same data', async () => {
  const gc = new GroupCommit(store);
  await submit(gc, [draft()]);
  expect(store.synchronous).toBe('full');
  await store.close();
  const dir = tempDir('agw-gc2-');
  const normal = new SqliteStore(join(dir.dir, 'n.db'), { sync: 'normal' });
  expect(normal.synchronous).toBe('normal');
  normal.close();
  dir.cleanup();
});
