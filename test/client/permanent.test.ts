/**
 * A handler that can never handle a message throws a PermanentError (or any error with
 * `permanent: true`): the loop nacks it with retry false, the adapter dead-letters it at once
 * as `rejected` with the error's message as its note, and the channel's next message comes.
 * Also the typed calls that go with it: nack, messageStatus, me.
 */
import { afterEach, expect, it } from 'vitest';
import {
  GatewayClient,
  isPermanentError,
  type Message,
  PermanentError,
} from '../../src/client/index.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { tokenOf } from '../helpers/topology.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

it('a PermanentError dead-letters the message at once as rejected, and the next one comes', {
  timeout: 30_000,
}, async () => {
  t = await startTestAdapter();
  const pm = new GatewayClient({ url: t.url, token: tokenOf('pm') });
  const ids: string[] = [];
  for (const task_id of ['T-bad', 'T-odd', 'T-good']) {
    const sent = await pm.send({
      to: '@qa',
      kind: 'task/request',
      payload: { task_id, description: task_id },
    });
    if (sent.status !== 'delivered') throw new Error('not delivered');
    ids.push(sent.message_id);
  }

  const qa = new GatewayClient({ url: t.url, token: tokenOf('qa') });
  const seen: [string, number][] = [];
  const errors: unknown[] = [];
  const controller = new AbortController();
  await qa.receive(
    async (m: Message, d) => {
      seen.push([String(m.payload.task_id), d.attempt]);
      if (m.payload.task_id === 'T-bad') throw new PermanentError('no such skill: juggling');
      if (m.payload.task_id === 'T-odd')
        throw Object.assign(new Error('payload from the future'), { permanent: true });
      controller.abort();
    },
    // one at a time: the next message of the channel comes only once the one before is done
    { max: 1, waitS: 1, signal: controller.signal, onError: (e) => errors.push(e) },
  );

  // neither came again (a retried nack would hand T-bad over again before T-odd)
  expect(seen).toEqual([
    ['T-bad', 1],
    ['T-odd', 1],
    ['T-good', 1],
  ]);
  expect(errors.map(isPermanentError)).toEqual([true, true]);

  const dead = await call(t.url, 'GET', '/v1/dead-letters', { agent: 'orchestrator' });
  expect(dead.status).toBe(200);
  const byMessage = new Map(
    (dead.body.dead_letters as { message: { message_id: string } }[]).map((x) => [
      x.message.message_id,
      x,
    ]),
  );
  expect(byMessage.get(ids[0]!)).toMatchObject({
    reason: 'rejected',
    note: 'no such skill: juggling',
    recipient: 'qa',
    attempts: 1,
  });
  expect(byMessage.get(ids[1]!)).toMatchObject({
    reason: 'rejected',
    note: 'payload from the future',
  });
  expect(byMessage.has(ids[2]!)).toBe(false);

  // the sender sees the same through messageStatus
  const status = await pm.messageStatus(ids[0]!);
  expect(status.message.message_id).toBe(ids[0]);
  expect(status.recipients).toEqual([
    expect.objectContaining({
      agent: 'qa',
      state: 'dead_letter',
      reason: 'rejected',
      note: 'no such skill: juggling',
    }),
  ]);
  expect((await pm.messageStatus(ids[2]!)).recipients).toEqual([
    expect.objectContaining({ agent: 'qa', state: 'acked', attempts: 1 }),
  ]);
});

it('nack(ids) retries by default; nack(ids, { retry: false, reason }) rejects', async () => {
  t = await startTestAdapter({ retryBaseMs: '10' });
  const pm = new GatewayClient({ url: t.url, token: tokenOf('pm') });
  const qa = new GatewayClient({ url: t.url, token: tokenOf('qa') });
  const sent = await pm.send({ to: '@qa', kind: 'status', payload: { n: 1 } });
  if (sent.status !== 'delivered') throw new Error('not delivered');

  const first = await call(t.url, 'GET', '/v1/inbox?wait=5', { agent: 'qa' });
  expect(await qa.nack([first.body.deliveries[0].delivery_id])).toMatchObject({
    nacked: [first.body.deliveries[0].delivery_id],
  });
  const second = await call(t.url, 'GET', '/v1/inbox?wait=5', { agent: 'qa' });
  expect(second.body.deliveries[0]).toMatchObject({
    attempt: 2,
    message: { message_id: sent.message_id },
  });
  await qa.nack([second.body.deliveries[0].delivery_id], { retry: false, reason: 'never' });
  expect((await pm.messageStatus(sent.message_id)).recipients).toEqual([
    expect.objectContaining({ state: 'dead_letter', reason: 'rejected', note: 'never' }),
  ]);
});

it('me() says who the agent is, its channels and limits', async () => {
  t = await startTestAdapter();
  const me = await new GatewayClient({ url: t.url, token: tokenOf('qa') }).me();
  expect(me.agent).toBe('qa');
  expect(me.alerts_to).toBe('orchestrator');
  expect(me.channels.map((c) => c.name).sort()).toEqual(['all-agents', 'product']);
  expect(me.limits).toEqual({ max_message_bytes: 262144, max_batch: 100, max_depth: 64 });
});
