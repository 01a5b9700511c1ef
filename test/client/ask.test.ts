/**
 * The typed client's ask() and awaitReply() (docs/reference/client.md) through a real sidecar
 * and adapter: the reply answered to the asker, acked with the client's ack; a timeout that is
 * an answer, not an error; the wait again finding the reply once it came; a timeout out of
 * bounds refused before anything is sent.
 */
import { afterEach, expect, it } from 'vitest';
import { GatewayClient } from '../../src/client/index.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { startTestSidecar } from '../helpers/sidecar.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

async function clientsOf(...agents: string[]): Promise<GatewayClient[]> {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const out: GatewayClient[] = [];
  for (const agent of agents) {
    const s = await startTestSidecar(agent, adapter.url);
    stops.push(s.stop);
    out.push(new GatewayClient({ url: s.url }));
  }
  return out;
}

it('asks and gets the reply, acked as any delivery; a timeout is an answer, and the wait again finds the reply', {
  timeout: 60_000,
}, async () => {
  const [pm, qa] = await clientsOf('pm', 'qa');
  const asking = pm!.ask(
    { to: '@qa', kind: 'task/request', payload: { task_id: 'T-9', description: 'ask()' } },
    { timeoutMs: 30_000 },
  );
  const { deliveries } = await qa!.call('inbox', { wait: 10 });
  const question = deliveries[0]!.message;
  await qa!.ack([deliveries[0]!.delivery_id]);
  await qa!.send({
    to: '@pm',
    kind: 'task/result',
    reply_to: question.message_id,
    payload: { task_id: 'T-9', status: 'success' },
  });
  const asked = await asking;
  if (asked.status !== 'replied') throw new Error(`not replied: ${JSON.stringify(asked)}`);
  expect(asked.message).toMatchObject({ status: 'delivered', message_id: question.message_id });
  expect(asked.reply).toMatchObject({
    state: 'leased',
    message: { sender: 'qa', reply_to: question.message_id, payload: { status: 'success' } },
  });
  expect(await pm!.ack([asked.reply.delivery_id])).toEqual({
    acked: [asked.reply.delivery_id],
    dead_lettered: [],
    unknown: [],
  });

  const unanswered = await pm!.ask({ to: '@qa', kind: 'status' }, { timeoutMs: 1000 });
  expect(unanswered).toMatchObject({
    status: 'timeout',
    recipients: [{ agent: 'qa', cause: 'waiting_for_poll' }],
  });
  if (unanswered.message.status !== 'delivered') throw new Error('not delivered');
  const id = unanswered.message.message_id;
  await qa!.send({ to: '@pm', kind: 'status', reply_to: id });
  const waited = await pm!.awaitReply(id, { timeoutMs: 10_000 });
  expect(waited).toMatchObject({ status: 'replied', reply: { message: { reply_to: id } } });

  await expect(pm!.ask({ to: '@qa', kind: 'status' }, { timeoutMs: 0 })).rejects.toThrow(
    RangeError,
  );
});
