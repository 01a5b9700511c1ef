/**
 * The crash test of the write path: a real adapter process under 64 concurrent senders is
 * SIGKILLed at random moments, again and again. After each kill the database must hold every
 * acknowledged message exactly once, at the assignment it was acknowledged with, and every
 * channel's sequence must run 1..N with no gap and no repeat. Senders resend what went
 * unanswered with the same key; nothing may be stored twice, and a batch is all or nothing.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Pool } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { type ChildAdapter, spawnAdapter } from '../helpers/cli.js';
import { AGENTS, CHANNELS, tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

const KILLS = Number(process.env.AGW_TEST_KILLS ?? 24);
const SENDERS = 64;

interface Sent {
  readonly agent: string;
  readonly body: { idempotency_key: string; to: string; kind: string; payload: object };
}
interface Acked {
  message_id: string;
  channel: string;
  channel_sequence_id: number;
}

const { dir, cleanup } = tempDir('agw-crash-');
afterAll(cleanup);

/** Random routes each agent may post to: its channels and direct messages. */
const routes = Object.fromEntries(
  AGENTS.map((a) => [
    a,
    [
      ...Object.entries(CHANNELS)
        .filter(([, m]) => m.includes(a))
        .map(([c]) => c),
      ...AGENTS.map((b) => `@${b}`),
    ],
  ]),
);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)]!;

function newMessage(agent: string = pick(AGENTS)): Sent {
  return {
    agent,
    body: {
      idempotency_key: randomUUID(),
      to: pick(routes[agent]!),
      kind: 'status',
      payload: { text: 'x'.repeat(200 + Math.floor(Math.random() * 800)) },
    },
  };
}

describe('the adapter under SIGKILL', () => {
  it(`keeps every acknowledged message exactly once with gap-free sequences over ${KILLS} kills`, {
    timeout: 300_000,
  }, async () => {
    const db = join(dir, 'adapter.db');
    const topology = writeTopology(dir);
    const acked = new Map<string, Acked>(); // `${agent}/${key}` → assignment
    let unanswered: Sent[] = []; // sent, no answer: resend with the same key
    // batches sent since the last verify (batch id → agent/key of each item): each must be
    // stored whole or not at all; checked once, before any of its items can be resent alone
    const everyBatch = new Map<string, string[]>();
    let duplicatesSeen = 0;
    let sentTotal = 0;

    const record = (
      s: Sent,
      status: number,
      body: Acked & { duplicate?: boolean; error?: string },
    ) => {
      const id = `${s.agent}/${s.body.idempotency_key}`;
      expect([200, 201], `${id}: ${JSON.stringify(body)}`).toContain(status);
      const previous = acked.get(id);
      if (previous !== undefined) {
        expect(status).toBe(200);
        expect(body).toMatchObject(previous);
      }
      if (status === 200) duplicatesSeen++;
      acked.set(id, {
        message_id: body.message_id,
        channel: body.channel,
        channel_sequence_id: body.channel_sequence_id,
      });
    };

    const sendOne = async (pool: Pool, s: Sent) => {
      const res = await pool.request({
        method: 'POST',
        path: '/v1/messages',
        headers: {
          authorization: `Bearer ${tokenOf(s.agent)}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify(s.body),
      });
      record(s, res.statusCode, (await res.body.json()) as Acked);
    };

    /** One sender: single messages mostly, a batch of 5 now and then, until the adapter dies. */
    const sender = async (pool: Pool, alive: () => boolean) => {
      while (alive()) {
        const retry = unanswered.pop();
        const asBatch = retry === undefined && Math.random() < 0.1;
        if (asBatch) {
          const batch = randomUUID();
          const agent = pick(AGENTS);
          const items = Array.from({ length: 5 }, () => newMessage(agent));
          everyBatch.set(
            batch,
            items.map((s) => `${agent}/${s.body.idempotency_key}`),
          );
          sentTotal += items.length;
          try {
            const res = await pool.request({
              method: 'POST',
              path: '/v1/messages/batch',
              headers: {
                authorization: `Bearer ${tokenOf(agent)}`,
                'content-type': 'application/json',
              },
              body: JSON.stringify({ messages: items.map((s) => s.body) }),
            });
            const out = (await res.body.json()) as { results: (Acked & { status: number })[] };
            expect(res.statusCode).toBe(200);
            for (const [i, r] of out.results.entries()) record(items[i]!, r.status, r);
          } catch (err) {
            if (err instanceof Error && err.name === 'AssertionError') throw err;
            unanswered.push(...items);
          }
          continue;
        }
        const s = retry ?? newMessage();
        if (retry === undefined) sentTotal++;
        try {
          await sendOne(pool, s);
        } catch (err) {
          if (err instanceof Error && err.name === 'AssertionError') throw err;
          unanswered.push(s);
        }
      }
    };

    /** What the database holds must agree with every acknowledgement given so far. */
    const verify = () => {
      const conn = new Database(db);
      try {
        conn.pragma('synchronous = FULL');
        const stored = new Map<string, Acked & { n: number }>();
        for (const r of conn
          // the adapter's own alerts (queues overflow here: nobody consumes) are not ours to count
          .prepare(
            "SELECT sender, idempotency_key AS key, message_id, channel, seq FROM messages WHERE sender != 'adapter'",
          )
          .all() as {
          sender: string;
          key: string;
          message_id: string;
          channel: string;
          seq: number;
        }[]) {
          const id = `${r.sender}/${r.key}`;
          const prev = stored.get(id);
          stored.set(id, {
            message_id: r.message_id,
            channel: r.channel,
            channel_sequence_id: r.seq,
            n: (prev?.n ?? 0) + 1,
          });
        }
        for (const [id, a] of acked) {
          const s = stored.get(id);
          expect(s, `acknowledged ${id} is missing`).toBeDefined();
          expect(s).toEqual({ ...a, n: 1 });
        }
        const seqs = conn
          .prepare(
            'SELECT c.name, c.last_seq, count(m.id) AS n, min(m.seq) AS lo, max(m.seq) AS hi FROM channels c LEFT JOIN messages m ON m.channel = c.name GROUP BY c.name',
          )
          .all() as {
          name: string;
          last_seq: number;
          n: number;
          lo: number | null;
          hi: number | null;
        }[];
        for (const c of seqs) {
          // unique (channel, seq) + count = max = last_seq  ⇒  exactly 1..N
          expect(c, c.name).toEqual({
            name: c.name,
            last_seq: c.last_seq,
            n: c.last_seq,
            lo: c.n ? 1 : null,
            hi: c.n ? c.last_seq : null,
          });
        }
        for (const [batch, ids] of everyBatch) {
          const present = ids.filter((id) => stored.has(id)).length;
          expect([0, ids.length], `batch ${batch} is partly stored`).toContain(present);
        }
        everyBatch.clear();
        return stored.size;
      } finally {
        conn.close();
      }
    };

    const start = () => spawnAdapter(['--topology', topology, '--db', db]);
    let adapter: ChildAdapter | undefined;
    try {
      for (let kill = 0; kill < KILLS; kill++) {
        adapter = await start();
        const pool = new Pool(adapter.url, { connections: SENDERS, pipelining: 1 });
        let up = true;
        const senders = Array.from({ length: SENDERS }, () => sender(pool, () => up));
        // Kill at a random moment: sometimes right after ready, sometimes in full flow.
        await new Promise((r) => setTimeout(r, 20 + Math.random() * 400));
        adapter.child.kill('SIGKILL');
        const exit = await adapter.exited;
        expect(exit.signal).toBe('SIGKILL');
        up = false;
        await Promise.all(senders);
        await pool.destroy();
        verify();
      }
      // Last round: a living adapter answers everything still unanswered, with the same keys.
      adapter = await start();
      const pool = new Pool(adapter.url, { connections: SENDERS });
      const rest = unanswered;
      unanswered = [];
      await Promise.all(rest.map((s) => sendOne(pool, s)));
      await pool.destroy();
      adapter.child.kill('SIGTERM');
      expect((await adapter.exited).code).toBe(0);
      adapter = undefined;
      const stored = verify();
      // Everything ever sent is now acknowledged, and stored once.
      expect(acked.size).toBe(sentTotal);
      expect(stored).toBe(sentTotal);
      console.log(
        `crash test: ${KILLS} kills, ${sentTotal} messages, ${rest.length} resent after the last kill, ${duplicatesSeen} answered as duplicates`,
      );
    } finally {
      if (adapter !== undefined && adapter.child.exitCode === null) adapter.child.kill('SIGKILL');
    }
  });
});
