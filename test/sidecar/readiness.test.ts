import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EMERGENCY_MESSAGE_ID } from '../../src/journald/emergency.js';
import { runCli, spawnAdapter, spawnSidecar } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

let journal: TestJournal;
const { dir, cleanup } = tempDir('agw-ready-');
beforeAll(async () => {
  journal = await startJournal();
});
afterAll(async () => {
  await journal?.destroy();
  cleanup();
});

/** A port nothing listens on (yet). */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

it('holds the start until the adapter answers, then stays open; alarms if it does not', {
  timeout: 60_000,
}, async () => {
  const port = await freePort();
  const sidecar = await spawnSidecar({
    AGW_ADAPTER_URL: `http://127.0.0.1:${port}`,
    AGW_AGENT_ID: 'qa',
    AGW_AGENT_TOKEN: tokenOf('qa'),
    AGW_OUTBOX: join(dir, 'outbox.db'),
    AGW_BREAKER_BASE_MS: '50',
    AGW_BREAKER_MAX_MS: '300',
    AGW_STARTUP_ALARM_S: '1',
    AGW_JOURNAL_SOCKET: journal.socket,
  });
  let adapter: Awaited<ReturnType<typeof spawnAdapter>> | undefined;
  try {
    expect((await call(sidecar.url, 'GET', '/readyz')).status).toBe(503);
    const timedOut = await runCli([
      'wait-ready',
      '--url',
      `${sidecar.url}/readyz`,
      '--timeout',
      '0.5',
    ]);
    expect(timedOut.code).toBe(1);
    expect(timedOut.stderr).toContain('did not answer 2xx within 0.5 s');
    // past AGW_STARTUP_ALARM_S: the CRIT entry, followed as journald stores it
    const crit = await journal.next(
      `MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`,
      'AGW_REASON=adapter_unreachable',
    );
    expect(crit).toMatchObject({ PRIORITY: '2', AGW_AGENT_ID: 'qa' });

    const waiting = runCli(['wait-ready', '--url', `${sidecar.url}/readyz`, '--timeout', '20']);
    adapter = await spawnAdapter([
      '--topology',
      writeTopology(dir),
      '--db',
      join(dir, 'a.db'),
      '--listen',
      `127.0.0.1:${port}`,
    ]);
    expect((await waiting).code).toBe(0);
    expect((await call(sidecar.url, 'GET', '/readyz')).status).toBe(200);
    adapter.child.kill('SIGKILL');
    await adapter.exited;
    adapter = undefined;
    expect((await call(sidecar.url, 'GET', '/readyz')).status).toBe(200); // the outbox covers outages
  } finally {
    adapter?.child.kill('SIGKILL');
    sidecar.child.kill('SIGTERM');
    await sidecar.exited;
  }
});
