/**
 * The sidecar with real processes: an adapter that dies and comes back, a sidecar that is
 * SIGKILLed with a full outbox, a bounded outbox that refuses and raises a CRIT entry, and a
 * permanent error that is passed back and never queued.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { EMERGENCY_MESSAGE_ID } from '../../src/journald/emergency.js';
import {
  type ChildAdapter,
  type ChildSidecar,
  spawnAdapter,
  spawnSidecar,
} from '../helpers/cli.js';
import { call, type Json } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { tempDir, tokenOf, topologyObject, writeTopology } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

let journal: TestJournal;
const { dir, cleanup } = tempDir('agw-sidecar-');
const topology = writeTopology(dir);
beforeAll(async () => {
  journal = await startJournal();
});
afterAll(async () => {
  await journal?.destroy();
  cleanup();
});

const running: (ChildAdapter | ChildSidecar)[] = [];
afterAll(async () => {
  for (const p of running) if (p.child.exitCode === null) p.child.kill('SIGKILL');
});

async function adapterOn(
  db: string,
  port = 0,
  topologyFile = topology,
  extra: string[] = [],
): Promise<ChildAdapter> {
  // a queue bound above what these tests pile up for qa, who reads only at the end
  const args = [
    '--topology',
    topologyFile,
    '--db',
    db,
    '--listen',
    `127.0.0.1:${port}`,
    '--queue-capacity',
    '5000',
    ...extra,
  ];
  const a = await spawnAdapter(args);
  running.push(a);
  return a;
}
async function sidecarFor(
  agent: string,
  adapterUrl: string,
  extra: Record<string, string> = {},
): Promise<ChildSidecar> {
  const s = await spawnSidecar({
    AGW_ADAPTER_URL: adapterUrl,
    AGW_AGENT_ID: agent,
    AGW_AGENT_TOKEN: tokenOf(agent),
    AGW_OUTBOX: join(dir, `outbox-${agent}-${randomUUID()}.db`),
    AGW_BREAKER_BASE_MS: '50',
    AGW_BREAKER_MAX_MS: '400',
    AGW_JOURNAL_SOCKET: journal.socket,
    ...extra,
  });
  running.push(s);
  return s;
}
const portOf = (url: string) => Number(new URL(url).port);
const send = (sidecar: string, n: number, to = '@qa') =>
  call(sidecar, 'POST', '/v1/messages', { body: { to, kind: 'status', payload: { n } } });
/** Until the sidecar's start gate is open (the adapter's /health answered). */
const gateOpen = (sidecar: string) =>
  until(async () => (await call(sidecar, 'GET', '/readyz')).status === 200, 'the start gate');
/** Until the sidecar's outbox is empty. */
const drained = (sidecar: string) =>
  until(
    async () => (await call(sidecar, 'GET', '/v1/status')).body.outbox.depth === 0,
    'the drain',
  );

/** pm's sidecar with its gate open (it knows the adapter's limits), then the adapter killed. */
async function pmSidecarInOutage(name: string) {
  const db = join(dir, `${name}-${randomUUID()}.db`);
  const adapter = await adapterOn(db);
  const sidecar = await sidecarFor('pm', adapter.url);
  await gateOpen(sidecar.url);
  adapter.child.kill('SIGKILL');
  await adapter.exited;
  return { db, port: portOf(adapter.url), sidecar };
}

/** Everything qa can take from the adapter, acked as it goes. */
async function drainInbox(adapterUrl: string, agent = 'qa'): Promise<Json[]> {
  const all: Json[] = [];
  for (;;) {
    const got = (await call(adapterUrl, 'GET', '/v1/inbox?max=100', { agent })).body
      .deliveries as Json[];
    if (got.length === 0) return all;
    all.push(...got);
    await call(adapterUrl, 'POST', '/v1/acks', {
      agent,
      body: { delivery_ids: got.map((d) => d.delivery_id) },
    });
  }
}

describe('the sidecar', () => {
  it('absorbs an adapter outage: 300 sends answer 202, then reach the recipient once each, in order', {
    timeout: 60_000,
  }, async () => {
    const db = join(dir, `outage-${randomUUID()}.db`);
    let adapter = await adapterOn(db);
    const port = portOf(adapter.url);
    const sidecar = await sidecarFor('pm', adapter.url);
    await gateOpen(sidecar.url);
    const first = await send(sidecar.url, -1);
    expect(first.status).toBe(201);
    expect(first.body.status).toBe('delivered');

    adapter.child.kill('SIGKILL');
    await adapter.exited;
    for (let n = 0; n < 300; n++) {
      const res = await send(sidecar.url, n);
      expect(res.status, JSON.stringify(res.body)).toBe(202);
      expect(res.body).toMatchObject({ status: 'queued', outbox_depth: n + 1 });
    }
    expect((await call(sidecar.url, 'GET', '/readyz')).status).toBe(200); // stays open: the outbox covers it

    adapter = await adapterOn(db, port);
    await drained(sidecar.url);
    const got = await drainInbox(adapter.url);
    expect(got.map((d) => d.message.payload.n)).toEqual([
      -1,
      ...Array.from({ length: 300 }, (_, i) => i),
    ]);
    const status = (await call(sidecar.url, 'GET', '/v1/status')).body;
    expect(status).toMatchObject({ ready: true, outbox: { depth: 0, dead_letters: 0 } });
    sidecar.child.kill('SIGTERM');
    expect((await sidecar.exited).code).toBe(0);
    adapter.child.kill('SIGTERM');
    await adapter.exited;
  });

  it('a full outbox answers 503 outbox_full, keeps what it took, and raises a CRIT entry', {
    timeout: 60_000,
  }, async () => {
    const db = join(dir, `full-${randomUUID()}.db`);
    let adapter = await adapterOn(db);
    const port = portOf(adapter.url);
    const sidecar = await sidecarFor('pm', adapter.url, { AGW_OUTBOX_CAPACITY: '5' });
    await gateOpen(sidecar.url);
    adapter.child.kill('SIGKILL');
    await adapter.exited;
    for (let n = 0; n < 5; n++) expect((await send(sidecar.url, n)).status).toBe(202);
    const refused = await send(sidecar.url, 5);
    expect(refused.status).toBe(503);
    expect(refused.body.error).toBe('outbox_full');
    expect(refused.headers.get('retry-after')).toBe('5');
    await until(
      async () =>
        journal.read(`MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`, 'AGW_REASON=outbox_full').length > 0,
      'the CRIT entry',
    );
    const [crit] = journal.read(`MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`, 'AGW_REASON=outbox_full');
    expect(crit).toMatchObject({ PRIORITY: '2', AGW_AGENT_ID: 'pm' });
    const metrics = await (await fetch(`${sidecar.url}/metrics`)).text();
    expect(metrics).toMatch(/agw_sidecar_outbox_full_total 1\n/);
    expect(metrics).toMatch(/agw_sidecar_outbox_depth 5\n/);

    adapter = await adapterOn(db, port);
    await drained(sidecar.url);
    expect((await drainInbox(adapter.url)).map((d) => d.message.payload.n)).toEqual([
      0, 1, 2, 3, 4,
    ]);
    sidecar.child.kill('SIGTERM');
    adapter.child.kill('SIGTERM');
    await Promise.all([sidecar.exited, adapter.exited]);
  });

  it('after SIGKILL with 1,000 queued, a restarted sidecar delivers them all once', {
    timeout: 90_000,
  }, async () => {
    const db = join(dir, `kill-${randomUUID()}.db`);
    const outbox = join(dir, `outbox-kill-${randomUUID()}.db`);
    let adapter = await adapterOn(db);
    const port = portOf(adapter.url);
    let sidecar = await sidecarFor('pm', adapter.url, { AGW_OUTBOX: outbox });
    await gateOpen(sidecar.url);
    adapter.child.kill('SIGKILL');
    await adapter.exited;
    for (let n = 0; n < 1000; n += 50) {
      const answers = await Promise.all(
        Array.from({ length: 50 }, (_, i) => send(sidecar.url, n + i)),
      );
      for (const a of answers) expect(a.status).toBe(202);
    }
    sidecar.child.kill('SIGKILL');
    await sidecar.exited;

    adapter = await adapterOn(db, port);
    sidecar = await sidecarFor('pm', adapter.url, { AGW_OUTBOX: outbox });
    await drained(sidecar.url);
    const got = (await drainInbox(adapter.url)).map((d) => d.message.payload.n as number);
    expect(got).toHaveLength(1000);
    expect(new Set(got).size).toBe(1000);
    sidecar.child.kill('SIGTERM');
    adapter.child.kill('SIGTERM');
    await Promise.all([sidecar.exited, adapter.exited]);
  });

  it('queues a send after the connect deadline when the adapter takes no connections', {
    timeout: 8_000,
  }, async () => {
    // a listener whose accept queue is full: the kernel drops further SYNs, so a connect hangs
    // as it does to an address that has vanished (a stopped container, a dropping firewall)
    const blackhole = spawn(
      'python3',
      [
        '-c',
        `import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(0)
port = s.getsockname()[1]
held = socket.create_connection(("127.0.0.1", port))
print(port, flush=True)
time.sleep(60)`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    onTestFinished(() => {
      blackhole.kill('SIGKILL');
    });
    const [line] = (await once(blackhole.stdout, 'data')) as [Buffer];
    const sidecar = await sidecarFor('pm', `http://127.0.0.1:${Number(String(line).trim())}`, {
      AGW_ADAPTER_CONNECT_TIMEOUT_MS: '200',
    });
    // without a connect deadline this send would wait out the 10 s call deadline
    const res = await send(sidecar.url, 1);
    expect(res.status).toBe(202);
    expect(res.body.status).toBe('queued');
    const status = (await call(sidecar.url, 'GET', '/v1/status')).body;
    expect(status.last_error).toMatch(/Connect Timeout/);
    expect(status.outbox.depth).toBe(1);
    sidecar.child.kill('SIGKILL');
    await sidecar.exited;
  });

  it('moves a queued message the adapter now refuses for good to the local dead letters, with a CRIT entry, and delivers the rest in order', {
    timeout: 30_000,
  }, async () => {
    const db = join(dir, `refused-${randomUUID()}.db`);
    let adapter = await adapterOn(db);
    const port = portOf(adapter.url);
    const sidecar = await sidecarFor('pm', adapter.url);
    await gateOpen(sidecar.url);
    adapter.child.kill('SIGKILL');
    await adapter.exited;
    // queued while pm may still post to product
    const answers = [await send(sidecar.url, 0), await send(sidecar.url, 1, 'product')];
    answers.push(await send(sidecar.url, 2));
    for (const a of answers) expect(a.status).toBe(202);
    const refusedKey = answers[1]!.body.idempotency_key as string;

    // the adapter comes back with a topology that took pm out of product
    const changed = topologyObject();
    const product = changed.channels.find((c) => c.name === 'product')!;
    product.members = product.members.filter((m) => m !== 'pm');
    mkdirSync(join(dir, 'changed'), { recursive: true });
    adapter = await adapterOn(db, port, writeTopology(join(dir, 'changed'), changed));
    await drained(sidecar.url);
    expect((await call(sidecar.url, 'GET', '/v1/status')).body.outbox.dead_letters).toBe(1);
    // readable by the agent, with the adapter's answer: nothing queued is lost unseen
    const local = (await call(sidecar.url, 'GET', '/v1/outbox/dead-letters')).body.dead_letters;
    expect(local).toEqual([
      {
        id: 1,
        idempotency_key: refusedKey,
        status: 403,
        answer: expect.objectContaining({ status: 403, error: 'not_member' }),
        dead_lettered_at: expect.any(String),
        message: expect.objectContaining({ to: 'product', payload: { n: 1 } }),
      },
    ]);
    expect(await (await fetch(`${sidecar.url}/metrics`)).text()).toMatch(
      /agw_sidecar_local_dead_letters 1\n/,
    );
    // its journey, asked by the key its 202 gave, says so (docs/why-didnt-it-arrive.md)
    const refusedJourney = await call(sidecar.url, 'GET', `/v1/messages/${refusedKey}/journey`);
    expect(refusedJourney.body).toMatchObject({
      idempotency_key: refusedKey,
      cause: 'refused_at_sender',
      outbox: { status: 403 },
      recipients: [],
    });
    expect(refusedJourney.body.explanation).toContain('refused for good by the adapter (403');
    await until(
      async () =>
        journal.read(`MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`, `AGW_IDEMPOTENCY_KEY=${refusedKey}`)
          .length > 0,
      'the CRIT entry',
    );
    const [crit] = journal.read(
      `MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`,
      `AGW_IDEMPOTENCY_KEY=${refusedKey}`,
    );
    expect(crit).toMatchObject({
      PRIORITY: '2',
      AGW_REASON: 'dead_letter',
      AGW_STATUS: '403',
      AGW_AGENT_ID: 'pm',
    });
    // the two around it were not held back by it, and kept their order
    expect((await drainInbox(adapter.url)).map((d) => d.message.payload.n)).toEqual([0, 2]);
    sidecar.child.kill('SIGTERM');
    adapter.child.kill('SIGTERM');
    await Promise.all([sidecar.exited, adapter.exited]);
  });

  it('passes a permanent error back and queues nothing', { timeout: 30_000 }, async () => {
    const adapter = await adapterOn(join(dir, `perm-${randomUUID()}.db`));
    const sidecar = await sidecarFor('pm', adapter.url);
    await gateOpen(sidecar.url);
    const res = await send(sidecar.url, 1, 'platform'); // pm is not a member
    expect(res.status).toBe(403);
    expect(res.body.error).toBe('not_member');
    const bad = await call(sidecar.url, 'POST', '/v1/messages', { body: { to: '@qa' } });
    expect(bad.status).toBe(400);
    expect(bad.body.field).toBe('kind');
    expect((await call(sidecar.url, 'GET', '/v1/status')).body.outbox.depth).toBe(0);
    sidecar.child.kill('SIGTERM');
    adapter.child.kill('SIGTERM');
    await Promise.all([sidecar.exited, adapter.exited]);
  });
  it('never wedges on a batch too large for the adapter: 100 messages of 262,000 bytes queued in an outage drain, in order', {
    timeout: 120_000,
  }, async () => {
    const { db, port, sidecar } = await pmSidecarInOutage('wedge');
    let adapter: ChildAdapter;
    // each just under the adapter's 262,144-byte limit; 100 of them are over its batch limit
    const big = 'x'.repeat(262_000);
    for (let n = 0; n < 100; n++) {
      const r = await call(sidecar.url, 'POST', '/v1/messages', {
        body: { to: '@qa', kind: 'status', payload: { n, big } },
      });
      expect(r.status).toBe(202);
    }
    expect((await send(sidecar.url, 100)).status).toBe(202);
    // one nested 3,500 deep, which a fresh adapter once answered 500 and the drain retried
    // forever: refused at the sidecar's door now, naming the field, never queued
    const deep = `{"to":"@qa","kind":"status","payload":{"d":${'['.repeat(3500)}${']'.repeat(3500)}}}`;
    const refused = await call(sidecar.url, 'POST', '/v1/messages', { raw: deep });
    expect([refused.status, refused.body.error, refused.body.field]).toEqual([
      400,
      'invalid_envelope',
      'payload',
    ]);
    expect((await call(sidecar.url, 'GET', '/v1/status')).body.outbox.depth).toBe(101);
    adapter = await adapterOn(db, port);
    await drained(sidecar.url);
    const got = await drainInbox(adapter.url);
    expect(got.map((d) => d.message.payload.n)).toEqual(Array.from({ length: 101 }, (_, n) => n));
    expect((await call(sidecar.url, 'GET', '/v1/status')).body.outbox.dead_letters).toBe(0);
  });

  it('sets aside only what the adapter refuses for good when it comes back with a lower limit; the rest flows on in order', {
    timeout: 120_000,
  }, async () => {
    const { db, port, sidecar } = await pmSidecarInOutage('lowered');
    let adapter: ChildAdapter;
    const big = 'x'.repeat(262_000);
    const sizes = [0, 0, big, big, big, 0, big, 0];
    for (const [n, pad] of sizes.entries()) {
      const r = await call(sidecar.url, 'POST', '/v1/messages', {
        body: { to: '@qa', kind: 'status', payload: { n, pad } },
      });
      expect(r.status).toBe(202);
    }
    // back with AGW_MAX_MESSAGE_BYTES lowered: the big ones are refused for good, one by one
    adapter = await adapterOn(db, port, topology, ['--max-message-bytes', '200000']);
    await drained(sidecar.url);
    const got = await drainInbox(adapter.url);
    expect(got.map((d) => d.message.payload.n)).toEqual([0, 1, 5, 7]);
    const local = (await call(sidecar.url, 'GET', '/v1/outbox/dead-letters')).body.dead_letters;
    expect(local.map((d: Json) => [d.message.payload.n, d.status])).toEqual([
      [2, 413],
      [3, 413],
      [4, 413],
      [6, 413],
    ]);
    // and a new one over the limit it now knows after a restart is refused at once: covered by
    // the start check (GET /v1/me); here the sidecar still has the old limit, so it is queued
  });
});
