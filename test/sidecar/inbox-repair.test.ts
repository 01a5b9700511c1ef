/**
 * Inbox repair, through a real sidecar and adapter (child processes):
 * - a message taken with the agent's token behind the sidecar's back and acked there leaves a
 *   gap; the sidecar fills it from replay with a copy of its own, in order, and a copy the agent
 *   never acks comes again;
 * - a redelivery of what the agent acked through the sidecar is acked upstream, never shown;
 * - a flood past the agent's bounded queue: the sidecar scans the gap page by page with its
 *   place on disk, survives a SIGKILL in the middle of it, and hands over nothing the adapter
 *   evicted, the rest in order.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, expect, it } from 'vitest';
import { type ChildProcessOfCli, spawnAdapter, spawnSidecar } from '../helpers/cli.js';
import { call, forward, type Json } from '../helpers/http.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-repair-');
afterAll(cleanup);

const started: ChildProcessOfCli[] = [];
afterAll(async () => {
  for (const c of started) c.child.kill('SIGKILL');
  await Promise.all(started.map((c) => c.exited));
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

const inbox = async (url: string, max = 10, wait = 0) =>
  (await call(url, 'GET', `/v1/inbox?max=${max}&wait=${wait}`)).body.deliveries as Json[];
const ack = (url: string, ids: number[]) =>
  call(url, 'POST', '/v1/acks', { body: { delivery_ids: ids } });

it('fills a gap left by a message acked elsewhere with a copy, in order; an unacked copy comes again', {
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
  started.push(adapter);
  const sidecar = await sidecarFor('qa', adapter.url, join(dir, 'qa.db'));
  const send = (n: number) =>
    call(adapter.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: { n } },
    });

  await send(0);
  const first = await inbox(sidecar.url);
  expect(first.map((d) => d.message.payload.n)).toEqual([0]);
  await ack(
    sidecar.url,
    first.map((d) => d.delivery_id),
  );

  await send(1);
  await send(2);
  // someone takes n=1 with qa's token, behind the sidecar's back, and acks it there
  const stolen = (await call(adapter.url, 'GET', '/v1/inbox?max=1', { agent: 'qa' })).body
    .deliveries as Json[];
  expect(stolen.map((d) => d.message.payload.n)).toEqual([1]);
  await call(adapter.url, 'POST', '/v1/acks', {
    agent: 'qa',
    body: { delivery_ids: [stolen[0].delivery_id] },
  });

  const repaired = await inbox(sidecar.url);
  expect(repaired.map((d) => d.message.payload.n)).toEqual([1, 2]); // the gap first, in order
  expect(repaired[0].delivery_id).toBeLessThan(0); // the sidecar's own copy from replay
  expect(repaired[1].delivery_id).toBeGreaterThan(0);
  // the agent acks n=2 but never the copy of n=1: once the copy's lease is over, it comes again
  await ack(sidecar.url, [repaired[1].delivery_id]);
  let again: Json[] = [];
  const deadline = Date.now() + 20_000; // generous: it only bounds a failing test
  while (again.length === 0 && Date.now() < deadline) {
    again = await inbox(sidecar.url, 10, 1);
  }
  expect(again.map((d) => [d.delivery_id, d.attempt, d.message.payload.n])).toEqual([
    [repaired[0].delivery_id, 2, 1],
  ]);
  // a copy's lease extends like any other; an acked one does not
  const ext = await call(sidecar.url, 'POST', '/v1/leases', {
    body: { delivery_ids: [again[0].delivery_id], extend_ms: 60_000 },
  });
  expect(ext.body.leases.map((l: Json) => l.delivery_id)).toEqual([again[0].delivery_id]);
  expect(await inbox(sidecar.url, 10, 1)).toEqual([]); // held by its lease
  const acked = await ack(sidecar.url, [again[0].delivery_id]);
  expect(acked.body.acked).toEqual([again[0].delivery_id]);
  expect(await inbox(sidecar.url)).toEqual([]); // acked: never again
  const late = await call(sidecar.url, 'POST', '/v1/leases', {
    body: { delivery_ids: [again[0].delivery_id], extend_ms: 60_000 },
  });
  expect([late.status, late.body.error]).toEqual([409, 'not_leased']);
});

it('acks upstream, and never shows, a redelivery of what the agent acked through it', {
  timeout: 60_000,
}, async () => {
  const args = ['--topology', writeTopology(dir), '--db', join(dir, 'b.db'), '--lease-ms', '1000'];
  let adapter = await spawnAdapter(args);
  started.push(adapter);
  const port = new URL(adapter.url).port;
  const sidecar = await sidecarFor('qa', adapter.url, join(dir, 'qa-b.db'));
  await call(adapter.url, 'POST', '/v1/messages', {
    agent: 'pm',
    body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: { n: 7 } },
  });
  const [d] = await inbox(sidecar.url);
  expect(d.message.payload.n).toBe(7);
  // the adapter goes away; the agent's ack reaches the sidecar but not the adapter
  adapter.child.kill('SIGKILL');
  await adapter.exited;
  expect((await ack(sidecar.url, [d.delivery_id])).status).toBe(503);
  adapter = await spawnAdapter([...args, '--listen', `127.0.0.1:${port}`]);
  started.push(adapter);
  // the lease runs out at the adapter and the message is redelivered to the sidecar, which
  // acks it upstream instead of showing it again
  let pending = -1;
  const deadline = Date.now() + 20_000; // generous: it only bounds a failing test
  while (pending !== 0 && Date.now() < deadline) {
    expect(await inbox(sidecar.url, 10, 1)).toEqual([]);
    pending = (await call(adapter.url, 'POST', '/v1/heartbeat', { agent: 'qa' })).body.pending;
  }
  expect(pending).toBe(0);
});

/**
 * A proxy between the sidecar and the adapter that can hold replay requests: `hold()` makes the
 * next ones wait until `release()`; `replays` lists every replay path the sidecar asked for.
 */
function replayGate(target: string) {
  const replays: string[] = [];
  let held: (() => void)[] | undefined;
  const arrived: (() => void)[] = [];
  const server: Server = createServer((req, res) => {
    const pass = () => {
      forward(target, req, res);
    };
    if (req.url?.startsWith('/v1/channels/')) {
      replays.push(req.url);
      for (const a of arrived.splice(0)) a();
      if (held !== undefined) {
        held.push(pass);
        return;
      }
    }
    pass();
  });
  return {
    replays,
    listen: () =>
      new Promise<string>((resolve) =>
        server.listen(0, '127.0.0.1', () => {
          const { port } = server.address() as { port: number };
          resolve(`http://127.0.0.1:${port}`);
        }),
      ),
    hold: () => {
      held = [];
    },
    release: () => {
      const h = held ?? [];
      held = undefined;
      for (const f of h) f();
    },
    /** Resolves when the next replay request arrives. */
    nextReplay: () => new Promise<void>((resolve) => arrived.push(resolve)),
    close: () => new Promise((r) => server.close(r)),
  };
}

it('a flood past the bound: the gap is scanned page by page, survives a SIGKILL, and nothing evicted is handed over', {
  timeout: 120_000,
}, async () => {
  const adapter = await spawnAdapter(['--topology', writeTopology(dir), '--db', join(dir, 'c.db')]);
  started.push(adapter);
  const gate = replayGate(adapter.url);
  const via = await gate.listen();
  const file = join(dir, 'qa-c.db');
  let sidecar = await sidecarFor('qa', via, file);
  const post = (messages: object[]) =>
    call(adapter.url, 'POST', '/v1/messages/batch', { agent: 'pm', body: { messages } });
  const status = (n: number) => ({
    idempotency_key: randomUUID(),
    to: 'product',
    kind: 'status',
    payload: { n },
  });

  // qa has seen product #1 through its sidecar: the sidecar knows where qa is in the channel
  await post([status(1)]);
  const seen = await inbox(sidecar.url);
  expect(seen.map((d) => d.message.channel_sequence_id)).toEqual([1]);
  await ack(sidecar.url, [seen[0].delivery_id]);

  // 1,600 more while qa's agent does not poll: its queue keeps 500, the oldest 1,100 are evicted
  for (let b = 0; b < 16; b++) {
    const r = await post(Array.from({ length: 100 }, (_, i) => status(2 + b * 100 + i)));
    expect(r.body.results.every((x: Json) => x.status === 201)).toBe(true);
  }
  const depth = await call(adapter.url, 'POST', '/v1/heartbeat', { agent: 'qa' });
  expect(depth.body.pending).toBe(500);

  // the first poll meets #1102 after #1: a gap of 1,100, scanned by replay; SIGKILL the sidecar
  // while its third page is on the way
  gate.hold();
  const third = (async () => {
    await gate.nextReplay();
    gate.release();
    gate.hold();
    await gate.nextReplay();
    gate.release();
    gate.hold();
    await gate.nextReplay();
  })();
  const poll = inbox(sidecar.url).catch(() => 'killed');
  await third;
  expect(gate.replays).toHaveLength(3);
  sidecar.child.kill('SIGKILL');
  await sidecar.exited;
  expect(await poll).toBe('killed');
  gate.release();
  // its place was on disk: two pages scanned
  const db = new Database(file, { readonly: true });
  const saved = db.prepare('SELECT after, until FROM gaps').all();
  db.close();
  expect(saved).toEqual([{ after: 201, until: 1102 }]);

  // restarted, it goes on from there, not from the start
  sidecar = await sidecarFor('qa', via, file);
  const got: Json[] = [];
  const deadline = Date.now() + 60_000; // generous: it only bounds a failing test
  while (got.length < 500 && Date.now() < deadline) {
    const ds = await inbox(sidecar.url, 100, 1);
    expect(ds.length).toBeLessThanOrEqual(100); // max holds
    got.push(...ds);
    if (ds.length > 0)
      await ack(
        sidecar.url,
        ds.map((d) => d.delivery_id),
      );
  }
  const resumed = gate.replays.slice(3);
  expect(resumed[0]).toContain('after=201&');
  // nothing evicted, none twice, everything else in order
  expect(got.map((d) => d.message.channel_sequence_id)).toEqual(
    Array.from({ length: 500 }, (_, i) => 1102 + i),
  );
  expect(got.every((d) => d.delivery_id > 0)).toBe(true);
  // and those it did not hand over are exactly qa's 1,100 dead letters
  let evicted = 0;
  for (let after = 0; ; ) {
    const page = (
      await call(adapter.url, 'GET', `/v1/dead-letters?after=${after}&limit=1000`, {
        agent: 'orchestrator',
      })
    ).body.dead_letters as Json[];
    if (page.length === 0) break;
    evicted += page.filter((x) => x.recipient === 'qa' && x.reason === 'evicted').length;
    after = page.at(-1).id;
  }
  expect(evicted).toBe(1100);
  await gate.close();
});
