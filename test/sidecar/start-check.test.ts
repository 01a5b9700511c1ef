/**
 * The start check: once the adapter answers, the sidecar asks it who its token is
 * (GET /v1/me) and stops with one line and exit 2 unless it is AGW_AGENT_ID's: a token of another
 * agent would send as that agent, one of no agent would dead-letter everything it queued.
 */
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { type ChildProcessOfCli, spawnAdapter, spawnSidecar } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-startcheck-');
const started: ChildProcessOfCli[] = [];
afterAll(async () => {
  for (const c of started) c.child.kill('SIGKILL');
  await Promise.all(started.map((c) => c.exited));
  cleanup();
});

it("stops with its line when its token is another agent's, or no agent's; starts when it is its own", {
  timeout: 60_000,
}, async () => {
  const adapter = await spawnAdapter(['--topology', writeTopology(dir), '--db', join(dir, 'a.db')]);
  started.push(adapter);
  const sidecar = (agent: string, token: string) =>
    spawnSidecar({
      AGW_ADAPTER_URL: adapter.url,
      AGW_AGENT_ID: agent,
      AGW_AGENT_TOKEN: token,
      AGW_OUTBOX: join(dir, `${agent}-${token}.db`),
      AGW_JOURNAL_SOCKET: join(dir, 'no-journal'),
    }).then((s) => {
      started.push(s);
      return s;
    });
  const stderr = (s: ChildProcessOfCli) => s.lines.filter((l) => !l.startsWith('{')).join('');

  const impostor = await sidecar('qa', tokenOf('pm'));
  expect(await impostor.exited).toEqual({ code: 2, signal: null });
  expect(stderr(impostor)).toContain(
    "agent-gateway sidecar: AGW_AGENT_TOKEN: the adapter says this token is pm's, not AGW_AGENT_ID qa's",
  );

  const nobody = await sidecar('qa', 'token-of-nobody');
  expect(await nobody.exited).toEqual({ code: 2, signal: null });
  expect(stderr(nobody)).toContain('AGW_AGENT_TOKEN: the adapter at');
  expect(stderr(nobody)).toContain('knows no agent with this token');

  const qa = await sidecar('qa', tokenOf('qa'));
  // its own token: the gate opens and it stays up
  let ready = 0;
  const deadline = Date.now() + 20_000; // generous: it only bounds a failing test
  while (ready !== 200 && Date.now() < deadline) {
    ready = (await call(qa.url, 'GET', '/readyz')).status;
    if (ready !== 200) await new Promise((r) => setTimeout(r, 50));
  }
  expect(ready).toBe(200);
  expect(qa.child.exitCode).toBeNull();
});
