/**
 * Credentials reloaded without a restart (CONTRACT.md, "Topology file"): new token hashes are
 * taken at once, `token_sha256` lists let two tokens be valid while one is rotated, a file whose
 * agents or channels differ is refused and the old credentials stay, and a long poll open during
 * a reload ends as any poll does. The audit log holds the start, each reload, failed
 * authentications counted per source and minute, and the stop.
 */
import { writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, sendAs } from '../helpers/http.js';
import { sha256Hex, topologyObject, writeTopology } from '../helpers/topology.js';
import { until, untilParked } from '../helpers/wait.js';

const OP = 'operator:alice';
let a: TestAdapter | undefined;
afterEach(async () => {
  await a?.stop();
  a = undefined;
});

/** A topology whose pm has the token hashes `hashes` (the rest as the test topology). */
function withPm(hashes: string | string[]) {
  const t = topologyObject();
  t.agents.find((x) => x.id === 'pm')!.token_sha256 = hashes;
  return t;
}

function asToken(url: string, token: string) {
  return call(url, 'GET', '/v1/inbox?wait=0', { headers: { authorization: `Bearer ${token}` } });
}

async function auditOf(url: string): Promise<Json[]> {
  return (await call(url, 'GET', '/v1/audit?limit=1000', { agent: OP })).body.entries;
}

it('rotates a token with both valid for a while, then only the new one', async () => {
  a = await startTestAdapter({}, { fileWatchMs: 0 });
  const oldHash = sha256Hex('token-pm');
  writeTopology(a.dir, withPm([oldHash, sha256Hex('token-pm-2')]));
  expect(a.adapter.reload('test')).toEqual({ taken: true });
  expect((await asToken(a.url, 'token-pm')).status).toBe(200);
  expect((await asToken(a.url, 'token-pm-2')).status).toBe(200);
  writeTopology(a.dir, withPm(sha256Hex('token-pm-2')));
  expect(a.adapter.reload('test')).toEqual({ taken: true });
  expect((await asToken(a.url, 'token-pm')).status).toBe(401);
  expect((await asToken(a.url, 'token-pm-2')).status).toBe(200);
});

it('takes a changed file by itself (the file is watched), operators included', async () => {
  a = await startTestAdapter({}, { fileWatchMs: 20 });
  const t = topologyObject();
  t.operators = [...(t.operators ?? []), { id: 'bob', token_sha256: sha256Hex('token-bob') }];
  writeTopology(a.dir, t);
  await until(async () => (await asToken(a!.url, 'token-bob')).status === 403, 'bob known');
  // an operator has no inbox: 403 not_an_agent, which says the token was recognized
  expect((await asToken(a.url, 'token-bob')).body.error).toBe('not_an_agent');
  expect(
    (await call(a.url, 'GET', '/v1/agents', { headers: { authorization: 'Bearer token-bob' } }))
      .status,
  ).toBe(200);
});

it('refuses a file whose agents or channels differ, keeping the credentials in force', async () => {
  a = await startTestAdapter({}, { fileWatchMs: 0 });
  writeTopology(a.dir, withPm([sha256Hex('token-pm'), sha256Hex('token-pm-2')]));
  expect(a.adapter.reload('test').taken).toBe(true);
  const more = withPm(sha256Hex('token-pm-3'));
  more.agents.push({ id: 'intruder', token_sha256: sha256Hex('token-intruder') });
  writeTopology(a.dir, more);
  const refused = a.adapter.reload('test');
  expect(refused.taken).toBe(false);
  expect(refused.reason).toMatch(/agents differ.*intruder.*restart/);
  const fewer = withPm(sha256Hex('token-pm-3'));
  fewer.channels = fewer.channels.filter((c) => c.name !== 'platform');
  writeTopology(a.dir, fewer);
  expect(a.adapter.reload('test').reason).toMatch(/channels/);
  writeFileSync(join(a.dir, 'topology.json'), '{ not json');
  expect(a.adapter.reload('test').reason).toMatch(/not valid JSON/);
  // what was in force stays: both of pm's tokens, not the third, nor the intruder
  expect((await asToken(a.url, 'token-pm-2')).status).toBe(200);
  expect((await asToken(a.url, 'token-pm-3')).status).toBe(401);
  expect((await asToken(a.url, 'token-intruder')).status).toBe(401);
  const reloads = (await auditOf(a.url)).filter((e) => e.action === 'reload');
  expect(reloads.map((e) => e.detail.taken)).toEqual([true, false, false, false]);
  expect(reloads[1].detail.reason).toMatch(/intruder/);
  expect(reloads[0]).toMatchObject({ actor: 'adapter', target: expect.stringMatching(/topology/) });
});

it('lets a long poll open during a reload finish normally, with what came for it', async () => {
  a = await startTestAdapter({}, { fileWatchMs: 0 });
  const parked = call(a.url, 'GET', '/v1/inbox?wait=10&max=1', { agent: 'qa' });
  await untilParked(a.url, 'qa');
  writeTopology(a.dir, withPm([sha256Hex('token-pm'), sha256Hex('token-pm-2')]));
  expect(a.adapter.reload('SIGHUP').taken).toBe(true);
  const id = await sendAs(a.url, 'pm', '@qa');
  const done = await parked;
  expect(done.status).toBe(200);
  expect(done.body.deliveries.map((d: Json) => d.message.message_id)).toEqual([id]);
});

it('audits failed authentication per source and minute, and the start and the stop', async () => {
  a = await startTestAdapter({}, { fileWatchMs: 0 });
  for (const token of ['wrong-1', 'wrong-2', 'wrong-3'])
    expect((await asToken(a.url, token)).status).toBe(401);
  expect((await call(a.url, 'GET', '/v1/inbox?wait=0')).status).toBe(401);
  a.adapter.credentials.flushFailures();
  await until(
    async () => (await auditOf(a!.url)).some((e) => e.action === 'auth_failed'),
    'the failures written',
  );
  const failed = (await auditOf(a.url)).filter((e) => e.action === 'auth_failed');
  expect(failed).toHaveLength(1);
  expect(failed[0]).toMatchObject({
    actor: 'adapter',
    target: expect.stringMatching(/127\.0\.0\.1/),
    detail: { count: 4, codes: { unauthorized: 4 } },
  });
  expect(failed[0].detail.minute).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:00\.000Z$/);

  await a.adapter.close();
  const store = await openStore(a.db, { sync: 'full' } as never);
  try {
    const entries = await store.audit(0, 100);
    expect(entries[0]).toMatchObject({ actor: 'adapter', action: 'start', target: hostname() });
    expect(entries.at(-1)).toMatchObject({ actor: 'adapter', action: 'stop', target: hostname() });
  } finally {
    await store.close();
  }
});
