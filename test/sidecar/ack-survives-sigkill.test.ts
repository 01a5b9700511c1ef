/**
 * An ack the sidecar answered 2xx is never handed over again, also after a SIGKILL of the
 * sidecar right after the answer (docs/reference/sidecar.md, "Receiving"). Real adapter and
 * sidecar processes.
 *
 * The path that broke it: the marks of what the sidecar handed over and what the agent acked
 * were written 20 ms behind the answer. A sidecar killed within those milliseconds came back
 * with its channel's mark before the acked message; the next message then opened a gap, the
 * gap's replay found the message acked at the adapter and not in the (lost) ack memory, and
 * handed it over again as a copy.
 *
 * Also: an ack or nack of a negative (sidecar) delivery id the sidecar never made is `unknown`,
 * as the adapter answers for its own (docs/reference/sidecar.md, "Receiving").
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, expect, it } from 'vitest';
import { type ChildProcessOfCli, spawnAdapter, spawnSidecar } from '../helpers/cli.js';
import { call, type Json } from '../helpers/http.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-ack-kill-');
const started: ChildProcessOfCli[] = [];
afterAll(async () => {
  for (const c of started) if (c.child.exitCode === null) c.child.kill('SIGKILL');
  await Promise.all(started.map((c) => c.exited));
  cleanup();
});

async function sidecarFor(agent: string, adapterUrl: string, file: string, port?: string) {
  const s = await spawnSidecar(
    {
      AGW_ADAPTER_URL: adapterUrl,
      AGW_AGENT_ID: agent,
      AGW_AGENT_TOKEN: tokenOf(agent),
      AGW_OUTBOX: file,
      AGW_JOURNAL_SOCKET: join(dir, 'no-journal'),
    },
    port === undefined ? [] : ['--listen', `127.0.0.1:${port}`],
  );
  started.push(s);
  return s;
}

const inbox = async (url: string, wait = 0) =>
  (await call(url, 'GET', `/v1/inbox?max=10&wait=${wait}`)).body.deliveries as Json[];
const ack = (url: string, ids: number[]) =>
  call(url, 'POST', '/v1/acks', { body: { delivery_ids: ids } });

/** The channel's handed mark in the sidecar's file, as a crash would leave it. */
function markOnDisk(file: string, channel: string): number | undefined {
  const db = new Database(file, { readonly: true });
  try {
    const row = db.prepare('SELECT last_seq AS seq FROM handed WHERE channel = ?').get(channel) as
      | { seq: number }
      | undefined;
    return row?.seq;
  } finally {
    db.close();
  }
}

it('never hands over again a message whose ack it answered 2xx, when SIGKILLed right after', {
  timeout: 60_000,
}, async () => {
  const adapter = await spawnAdapter(['--topology', writeTopology(dir), '--db', join(dir, 'a.db')]);
  started.push(adapter);
  const file = join(dir, 'qa.db');
  let sidecar = await sidecarFor('qa', adapter.url, file);
  const port = new URL(sidecar.url).port;
  const send = async (n: number) => {
    const r = await call(adapter.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: { n } },
    });
    expect(r.status).toBe(201);
    return r.body.message_id as string;
  };

  // n=0 handed and acked; its mark reaches the file (the channel has a place on disk)
  await send(0);
  const [d0] = await inbox(sidecar.url);
  expect((await ack(sidecar.url, [d0.delivery_id])).body.acked).toEqual([d0.delivery_id]);
  const deadline = Date.now() + 10_000; // only bounds a failing test
  while (markOnDisk(file, '@qa') !== 1 && Date.now() < deadline) await inbox(sidecar.url);
  expect(markOnDisk(file, '@qa')).toBe(1);

  // n=1 handed and acked with a 2xx, then the sidecar is killed at once
  const m1 = await send(1);
  const [d1] = await inbox(sidecar.url);
  expect(d1.message.message_id).toBe(m1);
  const answered = await ack(sidecar.url, [d1.delivery_id]);
  sidecar.child.kill('SIGKILL');
  expect([answered.status, answered.body.acked]).toEqual([200, [d1.delivery_id]]);
  await sidecar.exited;

  // back on the same file: n=2 arrives, and n=1 is not handed over again
  sidecar = await sidecarFor('qa', adapter.url, file, port);
  await send(2);
  const handed: Json[] = [];
  while (!handed.some((d) => d.message.payload.n === 2) && Date.now() < deadline + 20_000) {
    const ds = await inbox(sidecar.url, 1);
    handed.push(...ds);
    if (ds.length > 0)
      await ack(
        sidecar.url,
        ds.map((d) => d.delivery_id),
      );
  }
  expect(handed.map((d) => d.message.payload.n)).toEqual([2]);
});

it('answers unknown for a negative delivery id it never made, to acks and nacks', {
  timeout: 30_000,
}, async () => {
  const adapter = await spawnAdapter(['--topology', writeTopology(dir), '--db', join(dir, 'b.db')]);
  started.push(adapter);
  const sidecar = await sidecarFor('qa', adapter.url, join(dir, 'qa-b.db'));
  const acked = await ack(sidecar.url, [-1]);
  expect([acked.status, acked.body]).toEqual([
    200,
    { acked: [], dead_lettered: [], unknown: [-1] },
  ]);
  const nacked = await call(sidecar.url, 'POST', '/v1/nacks', { body: { delivery_ids: [-1] } });
  expect([nacked.status, nacked.body]).toEqual([200, { nacked: [], ignored: [], unknown: [-1] }]);
  const polled = await call(sidecar.url, 'POST', '/v1/inbox?wait=0', {
    body: { delivery_ids: [-2] },
  });
  expect([polled.status, polled.body.acked, polled.body.unknown]).toEqual([200, [], [-2]]);
});

it('never hands over a redelivery it held back once the agent has acked the message', {
  timeout: 60_000,
}, async () => {
  const adapter = await spawnAdapter([
    '--topology',
    writeTopology(dir),
    '--db',
    join(dir, 'c.db'),
    '--lease-ms',
    '1000',
    '--retry-base-ms',
    '10',
  ]);
  started.push(adapter);
  const file = join(dir, 'qa-c.db');
  const sidecar = await sidecarFor('qa', adapter.url, file);
  const send = (n: number) =>
    call(adapter.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: { n } },
    });
  await send(0);
  const [d0] = await inbox(sidecar.url);
  await ack(sidecar.url, [d0.delivery_id]);
  await send(1);
  await send(2);
  // n=1 taken and acked behind the sidecar's back: a gap, filled with a copy
  const stolen = (await call(adapter.url, 'GET', '/v1/inbox?max=1', { agent: 'qa' })).body
    .deliveries as Json[];
  await call(adapter.url, 'POST', '/v1/acks', {
    agent: 'qa',
    body: { delivery_ids: [stolen[0].delivery_id] },
  });
  const [copy, d2] = await inbox(sidecar.url);
  expect([copy.delivery_id < 0, copy.message.payload.n, d2.message.payload.n]).toEqual([
    true,
    1,
    2,
  ]);
  // the copy stays leased; n=2's lease runs out at the adapter, and its redelivery is held
  // back behind the copy
  await call(sidecar.url, 'POST', '/v1/leases', {
    body: { delivery_ids: [copy.delivery_id], extend_ms: 60_000 },
  });
  const held = () => {
    const db = new Database(file, { readonly: true });
    try {
      return (db.prepare('SELECT count(*) AS n FROM held').get() as { n: number }).n;
    } finally {
      db.close();
    }
  };
  const deadline = Date.now() + 20_000; // only bounds a failing test
  while (held() === 0 && Date.now() < deadline) expect(await inbox(sidecar.url, 1)).toEqual([]);
  expect(held()).toBe(1);
  // the agent acks n=2 (its first hand-over), then the copy: n=2 must not come again
  expect((await ack(sidecar.url, [d2.delivery_id])).body.acked).toEqual([d2.delivery_id]);
  expect((await ack(sidecar.url, [copy.delivery_id])).body.acked).toEqual([copy.delivery_id]);
  expect(await inbox(sidecar.url, 1)).toEqual([]);
  expect(held()).toBe(0);
});
