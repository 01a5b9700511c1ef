/**
 * Migration 4 (threads) on a file written before it: the rows already stored become roots of
 * their own threads (thread_id their message_id, hop 0) without a rewrite, every reader sees the
 * two fields in their JSON, and a reply may name them. The "before" file is this store's own,
 * with what migration 4 added taken out again (bodies and checksums included).
 */
import { createHash, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import Database from 'better-sqlite3';
import { afterEach, expect, it } from 'vitest';
import type { Delivery, Message } from '../../src/protocol/wire.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { AppendOutcome, MessageDraft } from '../../src/store/store.js';
import { tempDir } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-migrate-threads-');
afterEach(cleanup);

const opts = { delivery: { alertsTo: 'orchestrator' } };

function draft(sender: string, channel: string, extra: Partial<MessageDraft> = {}): MessageDraft {
  const key = randomUUID();
  return {
    sender,
    idempotencyKey: key,
    fingerprint: createHash('sha256').update(key).digest(),
    channel,
    kind: 'status',
    priority: 'normal',
    replyTo: null,
    payloadJson: JSON.stringify({ text: 'before threads', hop: 7 }),
    receivedAt: Date.now(),
    recipients: channel.startsWith('@') ? [channel.slice(1)] : [],
    ...extra,
  };
}

async function append(store: SqliteStore, ...drafts: MessageDraft[]): Promise<AppendOutcome[]> {
  const { results } = await store.commit([{ op: 'append', drafts }]);
  const r = results[0]!;
  if ('err' in r) throw r.err;
  return r.ok as AppendOutcome[];
}

const idOf = (o: AppendOutcome | undefined): string => {
  if (o?.status !== 201 && o?.status !== 200) throw new Error(`not stored: ${JSON.stringify(o)}`);
  return o.assignment.message_id;
};

it('makes the messages stored before it roots of their own threads, seen as such by every reader', async () => {
  const file = join(dir, 'a.db');
  const store = new SqliteStore(file, opts);
  await store.ensureChannels(['@qa', 'product']);
  const directDraft = draft('pm', '@qa');
  const [direct, group] = await append(store, directDraft, draft('pm', 'product'));
  await store.close();

  // back to version 3: the columns, index and table gone, the bodies as version 3 wrote them
  const db = new Database(file);
  const rows = db.prepare('SELECT id, body FROM messages').all() as { id: number; body: string }[];
  for (const r of rows) {
    const body = r.body.replace(/,"thread_id":"[^"]+","hop":0,"payload":/, ',"payload":');
    expect(body).not.toBe(r.body);
    db.prepare('UPDATE messages SET body = ?, checksum = ? WHERE id = ?').run(
      body,
      crc32(body),
      r.id,
    );
  }
  db.exec(`
    DROP INDEX messages_by_thread;
    DROP TABLE threads;
    ALTER TABLE messages DROP COLUMN thread_id;
    ALTER TABLE messages DROP COLUMN hop;
    ALTER TABLE alert_state DROP COLUMN sender;
  `);
  db.pragma('user_version = 3');
  db.close();

  const reopened = new SqliteStore(file, opts);
  try {
    const legacy = idOf(direct);
    const asRoot = (m: Message, id: string) =>
      expect(m).toMatchObject({ message_id: id, thread_id: id, hop: 0, payload: { hop: 7 } });
    const [m] = (await reopened.channelMessages('@qa', 0, 10)).map((j) => JSON.parse(j) as Message);
    asRoot(m!, legacy);
    const [d] = (
      await reopened.commit([{ op: 'lease', agent: 'qa', max: 10, now: Date.now() }])
    ).results
      .map((r) => ('ok' in r ? (r.ok as string[]) : []))[0]!
      .map((j) => JSON.parse(j) as Delivery);
    asRoot(d!.message, legacy);
    asRoot(JSON.parse((await reopened.messageStatus(legacy))!.message) as Message, legacy);
    // a repeat of its key is answered as the root it is
    expect((await append(reopened, directDraft))[0]).toMatchObject({
      status: 200,
      assignment: { message_id: legacy, thread_id: legacy, hop: 0 },
    });
    // a reply may name it, in another channel, and the thread view holds both
    const [reply] = await append(reopened, draft('qa', 'product', { replyToId: legacy }));
    expect(reply).toMatchObject({ status: 201, assignment: { thread_id: legacy, hop: 1 } });
    const page = await reopened.threadMessages(legacy, 0, 10);
    expect(page.messages.map((j) => (JSON.parse(j) as Message).message_id)).toEqual([
      legacy,
      idOf(reply),
    ]);
    const replayed = (await reopened.channelMessages('product', 0, 10)).map(
      (j) => JSON.parse(j) as Message,
    );
    asRoot(replayed[0]!, idOf(group));
    expect(replayed[1]).toMatchObject({ reply_to: legacy, thread_id: legacy, hop: 1 });
  } finally {
    await reopened.close();
  }
});
