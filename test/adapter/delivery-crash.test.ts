/**
 * Deliveries across a SIGKILL: acked ones never come back, leased ones come back once their
 * lease has run out, and first: nothing later in their channel is handed over while they are
 * leased (strict order). Nothing is lost.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { type ChildAdapter, spawnAdapter } from '../helpers/cli.js';
import { call, type Json } from '../helpers/http.js';
import { tempDir, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-dcrash-');
afterAll(cleanup);

it('after SIGKILL: acked stay acked, the leased head holds its channel until its lease ends, then all follows in order', {
  timeout: 60_000,
}, async () => {
  const args = [
    '--topology',
    writeTopology(dir),
    '--db',
    join(dir, 'a.db'),
    // long enough to outlast a SIGKILL and a restart on a loaded machine (1.5 s did not)
    '--lease-ms',
    '6000',
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

    // at once: nothing. The head of @qa (#16, leased before the kill) is still under its
    // lease, so none of the 20 never-leased ones may overtake it.
    const first = (await call(adapter.url, 'GET', '/v1/inbox?max=100', { agent: 'qa' })).body
      .deliveries as Json[];
    expect(first).toEqual([]);

    // once the lease has run out: the 15 leased but unacked (a second attempt each), then the
    // 20 never leased (a first), all in sequence order. Each retry has its own jittered backoff,
    // so they may come a few at a time; the agent acks what it got, as an agent does.
    const back: Json[] = [];
    const deadline = Date.now() + 20_000;
    while (back.length < 35 && Date.now() < deadline) {
      const got = (await call(adapter.url, 'GET', '/v1/inbox?max=100&wait=5', { agent: 'qa' })).body
        .deliveries as Json[];
      back.push(...got);
      if (got.length > 0) {
        await call(adapter.url, 'POST', '/v1/acks', {
          agent: 'qa',
          body: { delivery_ids: got.map((d) => d.delivery_id) },
        });
      }
    }
    const ids = (ds: Json[]) => ds.map((d) => d.message.message_id);
    expect(ids(back)).toEqual(ids(unacked).concat(sent.slice(30)));
    expect(back.map((d) => d.message.channel_sequence_id)).toEqual(
      Array.from({ length: 35 }, (_, i) => 16 + i),
    );
    expect(back.slice(0, 15).every((d) => d.attempt === 2)).toBe(true);
    expect(back.slice(15).every((d) => d.attempt === 1)).toBe(true);
    // and the acked never came back
    for (const a of ids(acked)) expect(ids(back)).not.toContain(a);
  } finally {
    adapter?.child.kill('SIGKILL');
    await adapter?.exited;
  }
});
