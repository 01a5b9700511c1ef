/**
 * AGW_METRICS_LISTEN is a setting like the others (docs/reference/configuration.md): a bad
 * value stops `agent-gateway sidecar` at start with one line on stderr naming it, exit 2; a good
 * one makes the program say where Prometheus scrapes, and serve it there.
 */
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type ChildSidecar, runCli, spawnSidecar } from '../helpers/cli.js';
import { tempDir, tokenOf } from '../helpers/topology.js';
import { parseExposition } from './exposition.js';

const { dir, cleanup } = tempDir('agw-metrics-listen-cli-');
const children: ChildSidecar[] = [];
afterAll(async () => {
  for (const c of children) {
    c.child.kill('SIGKILL');
    await c.exited;
  }
  cleanup();
});

const env = {
  // nothing listens there: the sidecar starts anyway, its outbox covers the adapter
  AGW_ADAPTER_URL: 'http://127.0.0.1:9',
  AGW_AGENT_ID: 'qa',
  AGW_AGENT_TOKEN: tokenOf('qa'),
  AGW_OUTBOX: join(dir, 'outbox.db'),
  AGW_JOURNAL_SOCKET: join(dir, 'no-journal.socket'),
};

describe('a bad AGW_METRICS_LISTEN', () => {
  it.each([
    [{ AGW_METRICS_LISTEN: '9464' }, [], ['AGW_METRICS_LISTEN', 'host:port', '"9464"']],
    [{ AGW_METRICS_LISTEN: '0.0.0.0:99999' }, [], ['AGW_METRICS_LISTEN', 'host:port']],
    [{ AGW_METRICS_LISTEN: '' }, [], ['AGW_METRICS_LISTEN', 'host:port']],
    [{}, ['--metrics-listen', 'anywhere'], ['AGW_METRICS_LISTEN (--metrics-listen)', 'host:port']],
    [
      { AGW_LISTEN: '127.0.0.1:7071', AGW_METRICS_LISTEN: '127.0.0.1:7071' },
      [],
      ['AGW_METRICS_LISTEN', "AGW_LISTEN's own address"],
    ],
  ])('%o %o: one line naming it, exit 2', async (vars, args, parts) => {
    const res = await runCli(['sidecar', ...args], { ...env, ...vars });
    expect(res.code, res.stderr).toBe(2);
    const lines = res.stderr.trim().split('\n');
    expect(lines, res.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/^agent-gateway sidecar: /);
    for (const p of parts) expect(lines[0]).toContain(p);
    expect(res.stdout).toBe('');
  });
});

it('says where Prometheus scrapes, and serves it there', { timeout: 30_000 }, async () => {
  const sidecar = await spawnSidecar({ ...env, AGW_METRICS_LISTEN: '127.0.0.1:0' });
  children.push(sidecar);
  const line = sidecar.lines
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { msg: string; metrics?: string })
    .find((l) => l.metrics !== undefined);
  expect(line?.msg).toMatch(/^metrics for Prometheus at http:\/\/127\.0\.0\.1:\d+\/metrics /);
  const res = await fetch(line!.metrics!);
  expect(res.status).toBe(200);
  const families = parseExposition(await res.text());
  expect(families.has('agw_sidecar_outbox_depth')).toBe(true);
  expect(families.has('process_cpu_seconds_total')).toBe(true);
});
