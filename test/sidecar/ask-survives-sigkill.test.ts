/**
 * An ask survives its sidecar (CONTRACT.md, "Asking and waiting for the answer"): the sidecar is
 * SIGKILLed while the ask waits, the reply comes meanwhile, and the same ask again (its key)
 * after the restart sends nothing new and answers `replied` with that reply, whose ack then
 * works as any. Real adapter and sidecar processes.
 */
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { type ChildProcessOfCli, spawnAdapter, spawnSidecar } from '../helpers/cli.js';
import { call, type Json, pollAs } from '../helpers/http.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const { dir, cleanup } = tempDir('agw-ask-kill-');
const started: ChildProcessOfCli[] = [];
afterAll(async () => {
  for (const c of started) if (c.child.exitCode === null) c.child.kill('SIGKILL');
  await Promise.all(started.map((c) => c.exited));
  cleanup();
});

async function sidecarFor(agent: string, adapterUrl: string, file: string) {
  const s = await spawnSidecar({
    AGW_ADAPTER_URL: adapterUrl,
    AGW_AGENT_ID: agent,
    AGW_AGENT_TOKEN: tokenOf(agent),
    AGW_OUTBOX: file,
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal'),
  });
  started.push(s);
  return s;
}

/** The adapter's count of `agent`'s reply waits parked now (agw_agent_parked_reply_waits). */
async function parkedReplyWaits(adapterUrl: string, agent: string): Promise<number> {
  const text = (await call(adapterUrl, 'GET', '/metrics')).body as string;
  const m = new RegExp(`^agw_agent_parked_reply_waits\\{agent="${agent}"\\} (\\d+)$`, 'm').exec(
    text,
  );
  return m === null ? 0 : Number(m[1]);
}

it('answers the same ask after a SIGKILL between ask and reply with that reply, sending nothing new', {
  timeout: 90_000,
}, async () => {
  const adapter = await spawnAdapter(['--topology', writeTopology(dir), '--db', join(dir, 'a.db')]);
  started.push(adapter);
  const file = join(dir, 'pm.db');
  let pm = await sidecarFor('pm', adapter.url, file);
  const body = {
    idempotency_key: 'ask-T-7',
    to: '@qa',
    kind: 'task/request',
    payload: { task_id: 'T-7', description: 'survive a kill' },
  };
  // the ask waits; the sidecar dies under it
  const first = call(pm.url, 'POST', '/v1/ask', { body: { ...body, timeout_ms: 60_000 } }).then(
    (r) => r,
    (err: unknown) => err,
  );
  await until(async () => (await parkedReplyWaits(adapter.url, 'pm')) === 1, "pm's ask waiting");
  pm.child.kill('SIGKILL');
  await pm.exited;
  expect(await first).toBeInstanceOf(Error);
  // the adapter lets the wait go with its connection, and the reply is stored meanwhile
  await until(async () => (await parkedReplyWaits(adapter.url, 'pm')) === 0, 'the wait gone');
  const [question] = await pollAs(adapter.url, 'qa');
  const answered = await call(adapter.url, 'POST', '/v1/messages', {
    agent: 'qa',
    body: {
      idempotency_key: 'answer-T-7',
      to: '@pm',
      kind: 'task/result',
      reply_to: question.message.message_id,
      payload: { task_id: 'T-7', status: 'success' },
    },
  });
  expect(answered.status).toBe(201);

  pm = await sidecarFor('pm', adapter.url, file);
  const again = await call(pm.url, 'POST', '/v1/ask', { body: { ...body, timeout_ms: 30_000 } });
  expect(again.status).toBe(200);
  expect(again.body).toMatchObject({
    status: 'replied',
    message: { message_id: question.message.message_id, duplicate: true },
    reply: {
      state: 'leased',
      attempt: 1,
      message: { message_id: answered.body.message_id, reply_to: question.message.message_id },
    },
  });
  // one message under the key, however often it was asked
  const sent = await call(adapter.url, 'GET', '/v1/channels/@qa/messages', { agent: 'qa' });
  expect((sent.body.messages as Json[]).map((m) => m.idempotency_key)).toEqual(['ask-T-7']);
  const acked = await call(pm.url, 'POST', '/v1/acks', {
    body: { delivery_ids: [again.body.reply.delivery_id] },
  });
  expect(acked.body.acked).toEqual([again.body.reply.delivery_id]);
  expect((await call(pm.url, 'GET', '/v1/inbox?wait=1')).body.deliveries).toEqual([]);
  const status = await call(adapter.url, 'GET', `/v1/messages/${answered.body.message_id}`, {
    agent: 'qa',
  });
  expect(status.body.recipients).toEqual([
    expect.objectContaining({ agent: 'pm', state: 'acked', attempts: 1 }),
  ]);
});
