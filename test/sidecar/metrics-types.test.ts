/**
 * The sidecar's /metrics by Prometheus' conventions: every `*_total` is a counter and only
 * counters end in `_total`. A sidecar with no adapter behind it still answers its metrics.
 */
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { type ChildSidecar, spawnSidecar } from '../helpers/cli.js';
import { tempDir, tokenOf } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-sidecar-metrics-');
let sidecar: ChildSidecar | undefined;
afterAll(async () => {
  sidecar?.child.kill('SIGKILL');
  await sidecar?.exited;
  cleanup();
});

it('exports agw_sidecar_outbox_full_total as a counter, and no counter without _total', {
  timeout: 30_000,
}, async () => {
  sidecar = await spawnSidecar({
    // nothing listens there: the sidecar starts anyway, its outbox covers the adapter
    AGW_ADAPTER_URL: 'http://127.0.0.1:9',
    AGW_AGENT_ID: 'qa',
    AGW_AGENT_TOKEN: tokenOf('qa'),
    AGW_OUTBOX: join(dir, 'outbox.db'),
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal.socket'),
  });
  const text = await (await fetch(`${sidecar.url}/metrics`)).text();
  const types = new Map(
    [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!] as const),
  );
  expect(types.get('agw_sidecar_outbox_full_total')).toBe('counter');
  expect(text).toMatch(/^agw_sidecar_outbox_full_total 0$/m);
  for (const name of [
    'agw_sidecar_outbox_depth',
    'agw_sidecar_breaker_open',
    'agw_sidecar_local_dead_letters',
  ])
    expect(types.get(name), name).toBe('gauge');
  for (const [name, type] of types)
    expect(name.endsWith('_total'), `${name} is a ${type}`).toBe(type === 'counter');
});
