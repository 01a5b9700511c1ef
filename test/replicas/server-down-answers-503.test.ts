/**
 * The database server dies under an adapter (SIGKILL of the postmaster and its backends, on a
 * server of the test's own): while it is down every request that needs it is answered 503
 * `storage_error` with Retry-After (a send, a replay, an ack), never a 500 and never a hang, and
 * /health is 503; restarted on its directory (crash recovery), the adapter recovers by itself:
 * its commit connection and read pool reconnect, its LISTEN connection too (pg-wake.ts), the
 * same send commits, and /health turns 200.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import type { PgStore } from '../../src/store/postgres/pg-store.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { PgServer } from '../helpers/pg-server.js';
import { until } from '../helpers/wait.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

it('answers 503 with Retry-After while PostgreSQL is down, and recovers by itself after its restart', {
  timeout: 120_000,
}, async () => {
  const server = await PgServer.create();
  stops.push(() => server.stop());
  const url = await server.createDatabase('agw');
  const a = await startTestAdapter({ db: url });
  stops.push(() => a.stop());
  const store = a.store as PgStore;
  const key = randomUUID();
  const send = () =>
    call(a.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { idempotency_key: key, to: '@qa', kind: 'status', payload: {} },
    });
  expect(
    (
      await call(a.url, 'POST', '/v1/messages', {
        agent: 'pm',
        body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: {} },
      })
    ).status,
  ).toBe(201);
  const listenerBefore = store.listener.pid;
  expect(listenerBefore).toBeDefined();

  await server.crash();
  const answers = {
    send: await send(),
    replay: await call(a.url, 'GET', '/v1/channels/@qa/messages?after=0', { agent: 'qa' }),
    ack: await call(a.url, 'POST', '/v1/acks', { agent: 'qa', body: { delivery_ids: [1] } }),
  };
  for (const [what, r] of Object.entries(answers)) {
    expect([what, r.status, r.body.error]).toEqual([what, 503, 'storage_error']);
    expect(Number(r.headers.get('retry-after')), what).toBeGreaterThan(0);
  }
  expect((await call(a.url, 'GET', '/health')).status).toBe(503);

  await server.start(); // crash recovery on the same directory
  await until(async () => (await send()).status === 201, 'the send to commit after the restart');
  await until(async () => {
    return (await call(a.url, 'GET', '/health')).status === 200;
  }, '/health to turn 200');
  await until(() => {
    const l = store.listener;
    return l.pid !== undefined && l.pid !== listenerBefore && l.reconnects > 0;
  }, 'the LISTEN connection to be made again');
  const replay = await call(a.url, 'GET', '/v1/channels/@qa/messages?after=0', { agent: 'qa' });
  expect(replay.status).toBe(200);
  expect(
    replay.body.messages.map((m: { channel_sequence_id: number }) => m.channel_sequence_id),
  ).toEqual([1, 2]);
});
