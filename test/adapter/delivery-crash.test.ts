/**
 * Deliveries across a SIGKILL: acked ones never come back, leased ones come back once their
 * lease has run out, never-leased ones are still there, nothing is lost.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { type ChildAdapter, spawnAdapter } from '../helpers/cli.js';
import { call, type Json } from '../helpers/http.js';
import { tempDir, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-dcrash-');
afterAll(cleanup);

it('after SIGKILL: acked stay acked, leased return after their lease, nothing is lost', {
  timeout: 60_000,
}, async () => {
  const args = [
    '--topology',
    writeTopology(dir),
    '--db',
    join(dir, 'a.db'),
    '--lease-ms',
    '1500',
    '--retry-base-ms',
    '10',
  ];
  let adapter: ChildAdapter | undefined = await spawnAdapter(args);
  try {
    const sent: string[] = [];
    for (let i = 0; i < 50; i++) {
      const r = await call(adapter.url, 'POST', '/v1/messages', {
        agent: 'pm',
        body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: { i } },
      });
      sent.push(r.body.message_id);
    }
    const leased = (await call(adapter.url, 'GET', '/v1/inbox?max=30', { agent: 'qa' })).body
      .deliveries as Json[];
    expect(leased).toHaveLength(30);
    const acked = leased.slice(0, 15);
    const unacked = leased.slice(15);
    const ackRes = await call(adapter.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: acked.map((d) => d.delivery_id) },
    });
    expect(ackRes.body.acked).toHaveLength(15);

    adapter.child.kill('SIGKILL');
    await adapter.exited;
    adapter = await spawnAdapter(args);

    // at once: the 20 never leased; the 15 leased are still under their lease
    const first = (await call(adapter.url, 'GET', '/v1/inbox?max=100', { agent: 'qa' })).body
      .deliveries as Json[];
    const ids = (ds: Json[]) => ds.map((d) => d.message.message_id);
    expect(ids(first)).toEqual(sent.slice(30));
    expect(first.every((d) => d.attempt === 1)).toBe(true);

    // then, once their lease has run out, the 15 leased but unacked, each a second attempt
    const back: Json[] = [];
    const deadline = Date.now() + 20_000;
    while (back.length < 15 && Date.now() < deadline) {
      const got = (await call(adapter.url, 'GET', '/v1/inbox?max=100&wait=5', { agent: 'qa' })).body
        .deliveries as Json[];
      back.push(...got);
    }
    expect(ids(back).sort()).toEqual(ids(unacked).sort());
    expect(back.every((d) => d.attempt === 2)).toBe(true);
    // and the acked never came back
    for (const a of ids(acked)) expect([...ids(first), ...ids(back)]).not.toContain(a);
  } finally {
    adapter?.child.kill('SIGKILL');
    await adapter?.exited;
  }
});
