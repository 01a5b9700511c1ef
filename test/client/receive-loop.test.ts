/**
 * The client's receive loop against a real adapter: a handler that throws leads to a nack and
 * a redelivery; once it succeeds the delivery is acked and not handed to it again.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { GatewayClient, GatewayClientError, type Message } from '../../src/client/index.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { tokenOf } from '../helpers/topology.js';

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

it('nacks when the handler throws, and the message comes again', { timeout: 30_000 }, async () => {
  t = await startTestAdapter({ retryBaseMs: '10' });
  const pm = new GatewayClient({ url: t.url, token: tokenOf('pm') });
  const qa = new GatewayClient({ url: t.url, token: tokenOf('qa') });
  const sent = await pm.send({
    to: '@qa',
    kind: 'task/request',
    payload: { task_id: 'T-1', description: 'try twice' },
    idempotency_key: randomUUID(),
  });
  expect(sent.status).toBe('delivered');

  const seen: { id: string; attempt: number }[] = [];
  const controller = new AbortController();
  const errors: unknown[] = [];
  const loop = qa.receive(
    async (m: Message, d) => {
      seen.push({ id: m.message_id, attempt: d.attempt });
      if (d.attempt === 1) throw new Error('not this time');
      controller.abort();
    },
    { waitS: 1, signal: controller.signal, onError: (e) => errors.push(e) },
  );
  await loop;
  expect(seen.map((s) => s.attempt)).toEqual([1, 2]);
  expect(new Set(seen.map((s) => s.id)).size).toBe(1);
  expect(errors).toHaveLength(1);
  expect(await qa.heartbeat()).toEqual({ pending: 0, critical_pending: 0 });
});

it('throws a GatewayClientError with the catalogue code for a refusal', async () => {
  t = await startTestAdapter();
  const pm = new GatewayClient({ url: t.url, token: tokenOf('pm') });
  const err = await pm.send({ to: 'platform', kind: 'status' }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(GatewayClientError);
  expect(err).toMatchObject({ status: 403, code: 'not_member' });
});
