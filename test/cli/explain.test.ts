/**
 * `agent-gateway explain` (the built CLI) against a real adapter and sidecars on loopback: the
 * sentence per recipient and the timeline, through the sidecar and from the adapter with a
 * token file; `--json`; a message still in the sender's outbox; exit 1 for an unknown message.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { GatewayClient } from '../../src/client/index.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { runCli } from '../helpers/cli.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { tempDir, tokenOf } from '../helpers/topology.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

it('explains where each copy is and how it got there, by the sidecar or the adapter', {
  timeout: 60_000,
}, async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await startTestSidecar('pm', adapter.url);
  stops.push(pm.stop);
  const qa = await startTestSidecar('qa', adapter.url);
  stops.push(qa.stop);
  const pmc = new GatewayClient({ url: pm.url });
  const qac = new GatewayClient({ url: qa.url });
  const first = await pmc.send({
    to: '@qa',
    kind: 'task/request',
    payload: { task_id: 'T-1', description: 'one' },
  });
  const second = await pmc.send({ to: '@qa', kind: 'status' });
  if (first.status !== 'delivered' || second.status !== 'delivered') throw new Error('not sent');
  const { deliveries } = await qac.call('inbox', { wait: 5, max: 1 }); // first leased, not acked
  expect(deliveries.map((d) => d.message.message_id)).toEqual([first.message_id]);

  const viaSidecar = await runCli(['explain', second.message_id, '--url', pm.url]);
  expect(viaSidecar.code, viaSidecar.stderr).toBe(0);
  expect(viaSidecar.stdout).toContain(`message ${second.message_id}: status from pm to @qa`);
  expect(viaSidecar.stdout).toContain('qa: waiting_behind');
  expect(viaSidecar.stdout).toContain('Behind #1 (task/request from pm), leased to qa since');
  expect(viaSidecar.stdout).toMatch(/ {2}\S+Z {2}queued\n/);

  const { dir, cleanup } = tempDir();
  stops.push(cleanup);
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, `${tokenOf('pm')}\n`);
  const direct = await runCli([
    'explain',
    first.message_id,
    '--url',
    adapter.url,
    '--token-file',
    tokenFile,
    '--json',
  ]);
  expect(direct.code, direct.stderr).toBe(0);
  const journey = JSON.parse(direct.stdout);
  expect(journey.recipients).toEqual([
    expect.objectContaining({
      agent: 'qa',
      cause: 'leased',
      events: [
        expect.objectContaining({ event: 'queued' }),
        expect.objectContaining({ event: 'leased', attempt: 1 }),
      ],
    }),
  ]);

  const unknown = await runCli([
    'explain',
    '0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11',
    '--url',
    pm.url,
  ]);
  expect(unknown.code).toBe(1);
  expect(unknown.stderr).toContain('404 not_found');

  // the adapter gone: a send is queued at pm's sidecar, and explained there by its key
  await adapter.stop();
  const queued = await pmc.send({ to: '@qa', kind: 'status' });
  if (queued.status !== 'queued') throw new Error('not queued');
  const atSender = await runCli(['explain', queued.idempotency_key, '--url', pm.url]);
  expect(atSender.code, atSender.stderr).toBe(0);
  expect(atSender.stdout).toContain(`${queued.idempotency_key}: queued_at_sender`);
  expect(atSender.stdout).toContain("Still in pm's sidecar since");
});
