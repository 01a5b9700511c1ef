/**
 * Inbox repair: a delivery the sidecar never saw (taken directly from the adapter with the
 * agent's token) is fetched by replay and handed over in order; once the agent has acked that
 * copy, the adapter's redelivery of it is acked upstream and never shown to the agent.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { spawnAdapter, spawnSidecar } from '../helpers/cli.js';
import { call, type Json } from '../helpers/http.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-repair-');
afterAll(cleanup);

it('fills a gap by replay, in order, and suppresses the redelivery of what the agent acked', {
  timeout: 60_000,
}, async () => {
  const adapter = await spawnAdapter([
    '--topology',
    writeTopology(dir),
    '--db',
    join(dir, 'a.db'),
    '--lease-ms',
    '1000',
    '--retry-base-ms',
    '10',
  ]);
  const sidecar = await spawnSidecar({
    AGW_ADAPTER_URL: adapter.url,
    AGW_AGENT_ID: 'qa',
    AGW_AGENT_TOKEN: tokenOf('qa'),
    AGW_OUTBOX: join(dir, 'qa.db'),
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal'),
  });
  try {
    const send = (n: number) =>
      call(adapter.url, 'POST', '/v1/messages', {
        agent: 'pm',
        body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: { n } },
      });
    const viaSidecar = async (wait = 0) =>
      (await call(sidecar.url, 'GET', `/v1/inbox?max=10&wait=${wait}`)).body.deliveries as Json[];
    const ack = (ids: number[]) =>
      call(sidecar.url, 'POST', '/v1/acks', { body: { delivery_ids: ids } });

    await send(0);
    const first = await viaSidecar();
    expect(first.map((d) => d.message.payload.n)).toEqual([0]);
    await ack(first.map((d) => d.delivery_id));

    await send(1);
    await send(2);
    // someone takes n=1 with qa's token, behind the sidecar's back, and never acks it
    const stolen = (await call(adapter.url, 'GET', '/v1/inbox?max=1', { agent: 'qa' })).body
      .deliveries as Json[];
    expect(stolen.map((d) => d.message.payload.n)).toEqual([1]);

    const repaired = await viaSidecar();
    expect(repaired.map((d) => d.message.payload.n)).toEqual([1, 2]); // the gap first, in order
    expect(repaired[0].delivery_id).toBeLessThan(0); // the sidecar's own copy from replay
    expect(repaired[1].delivery_id).toBeGreaterThan(0);
    const acked = await ack(repaired.map((d) => d.delivery_id));
    expect(acked.status).toBe(200);
    expect([...acked.body.acked].sort()).toEqual(repaired.map((d) => d.delivery_id).sort());

    // n=1's lease runs out at the adapter; it is redelivered; the sidecar acks it upstream
    const later = await viaSidecar(4);
    expect(later).toEqual([]);
    const deadline = Date.now() + 10_000;
    let pending = -1;
    while (pending !== 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      await viaSidecar();
      pending = (await call(adapter.url, 'POST', '/v1/heartbeat', { agent: 'qa' })).body.pending;
    }
    expect(pending).toBe(0); // nothing left unacked at the adapter, nothing shown twice
  } finally {
    sidecar.child.kill('SIGTERM');
    adapter.child.kill('SIGTERM');
    await Promise.all([sidecar.exited, adapter.exited]);
  }
});
