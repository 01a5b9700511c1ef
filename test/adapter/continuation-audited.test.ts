/**
 * The alerts_to agent's continuation and an operator's message are in the audit log (CONTRACT.md,
 * "Audit log"), whichever route they came by: POST /v1/messages, and POST /v1/messages/batch, by
 * which every sidecar forwards. A continuation (the alerts_to agent's message in a thread, which
 * starts the thread's budget again) is an entry with `actor` its agent id, `action`
 * `continuation`, `target` the message; its messages that start a thread, other agents' replies
 * and a repeat of a stored key are not. The entry is written in the transaction that stores the
 * message, so a refused item of a batch leaves none. The chain still verifies. A real adapter on
 * port 0, on a SQLite file in a temp folder and on a real PostgreSQL database.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { verifyAuditChain } from '../../src/store/rules/audit-chain.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';

let t: TestAdapter | undefined;
let dropDb: (() => Promise<void>) | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await dropDb?.();
  dropDb = undefined;
});

async function start(engine: 'sqlite' | 'postgresql'): Promise<TestAdapter> {
  const db: Record<string, string> = {};
  if (engine === 'postgresql') {
    const pg = await testDatabase();
    dropDb = pg.drop;
    db.db = pg.url;
  }
  t = await startTestAdapter(db);
  return t;
}

type Route = 'single' | 'batch';

/** One message by `route`; its answer (for a batch, the item's result). */
async function post(route: Route, agent: string, body: Json, status = 201): Promise<Json> {
  if (route === 'single') {
    const r = await call(t!.url, 'POST', '/v1/messages', { agent, body });
    expect(r.status, JSON.stringify(r.body)).toBe(status);
    return r.body;
  }
  const r = await call(t!.url, 'POST', '/v1/messages/batch', {
    agent,
    body: { messages: [body] },
  });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  const [item] = r.body.results as Json[];
  expect(item!.status, JSON.stringify(item)).toBe(status);
  return item!;
}

const message = (to: string, replyTo?: string): Json => ({
  idempotency_key: randomUUID(),
  to,
  kind: 'note/text',
  payload: { text: 'go on' },
  ...(replyTo === undefined ? {} : { reply_to: replyTo }),
});

async function auditOf(action: string): Promise<Json[]> {
  const audit = await call(t!.url, 'GET', '/v1/audit?limit=1000', { agent: 'operator:alice' });
  expect(audit.status).toBe(200);
  return (audit.body.entries as Json[]).filter((e) => e.action === action);
}

async function expectChainSound(): Promise<void> {
  const report = await verifyAuditChain((after, limit) => t!.store.audit(after, limit));
  expect(report.broken).toBeUndefined();
}

describe.each(['sqlite', 'postgresql'] as const)('on %s', (engine) => {
  describe.each(['single', 'batch'] as const)('through %s', (route) => {
    it("records the alerts_to agent's continuation, and nothing for what is none", async () => {
      await start(engine);
      const root = await post('single', 'pm', message('@orchestrator'));
      const reply = message('@pm', root.message_id as string);
      const continuation = await post(route, 'orchestrator', reply);
      expect(continuation).toMatchObject({ thread_id: root.thread_id, hop: 0 });
      // none: a thread it starts, another agent's reply, a repeat of the stored key
      await post(route, 'orchestrator', message('@qa'));
      await post(route, 'pm', message('@orchestrator', continuation.message_id as string));
      expect((await post(route, 'orchestrator', reply, 200)).duplicate).toBe(true);

      expect(await auditOf('continuation')).toEqual([
        expect.objectContaining({
          actor: 'orchestrator',
          action: 'continuation',
          target: continuation.message_id,
          detail: { channel: '@pm', thread_id: root.thread_id },
        }),
      ]);
      await expectChainSound();
    });

    it("records an operator's message once, and none for a refused one", async () => {
      await start(engine);
      const body = message('@qa');
      const sent = await post(route, 'operator:alice', body);
      expect(sent.duplicate).toBe(false);
      expect((await post(route, 'operator:alice', body, 200)).duplicate).toBe(true);
      // refused by the store (a deadline already past, decided after the key): nothing stored,
      // nothing audited
      await post(
        route,
        'operator:alice',
        { ...message('@qa'), expires_at: '2020-01-01T00:00:00Z' },
        400,
      );
      expect(await auditOf('message')).toEqual([
        expect.objectContaining({
          actor: 'operator:alice',
          action: 'message',
          target: sent.message_id,
          detail: { channel: '@qa', thread_id: sent.thread_id },
        }),
      ]);
      await expectChainSound();
    });
  });

  it("lets an operator cancel its scheduled message, and audits an operator's and alerts_to's cancels once", async () => {
    await start(engine);
    const later = () => new Date(Date.now() + 3_600_000).toISOString();
    const cancel = (agent: string, id: string) =>
      call(t!.url, 'DELETE', `/v1/messages/${id}`, { agent });
    const byOperator = await post('single', 'operator:alice', {
      ...message('@qa'),
      deliver_at: later(),
    });
    expect((await cancel('operator:alice', byOperator.message_id as string)).status).toBe(204);
    // a repeat answers as the first, and changes nothing
    expect((await cancel('operator:alice', byOperator.message_id as string)).status).toBe(204);
    const root = await post('single', 'pm', message('@orchestrator'));
    const byOverseer = await post('single', 'orchestrator', {
      ...message('@pm', root.message_id as string),
      deliver_at: later(),
    });
    expect((await cancel('orchestrator', byOverseer.message_id as string)).status).toBe(204);
    // an agent's own cancel is its own business, as its messages are
    const byAgent = await post('single', 'qa', { ...message('@pm'), deliver_at: later() });
    expect((await cancel('qa', byAgent.message_id as string)).status).toBe(204);
    // another's scheduled message: refused, nothing audited
    const other = await post('single', 'pm', { ...message('@qa'), deliver_at: later() });
    expect((await cancel('operator:alice', other.message_id as string)).status).toBe(403);

    expect((await auditOf('cancel')).map((e) => [e.actor, e.target])).toEqual([
      ['operator:alice', byOperator.message_id],
      ['orchestrator', byOverseer.message_id],
    ]);
    await expectChainSound();
  });

  it('audits each item of one batch in the order the batch stored them', async () => {
    await start(engine);
    const messages = [message('@qa'), message('@pm'), message('@qa')];
    const r = await call(t!.url, 'POST', '/v1/messages/batch', {
      agent: 'operator:alice',
      body: { messages },
    });
    expect(r.status).toBe(200);
    const ids = (r.body.results as Json[]).map((x) => x.message_id);
    expect((await auditOf('message')).map((e) => e.target)).toEqual(ids);
    await expectChainSound();
  });
});
