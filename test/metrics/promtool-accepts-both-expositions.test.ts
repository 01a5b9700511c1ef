/**
 * promtool, Prometheus' own checker, takes both programs' /metrics as served after traffic, and
 * finds nothing to lint (names, units, _total on counters only, HELP on every family): the
 * adapter's, and a sidecar's from its listener for Prometheus (AGW_METRICS_LISTEN), a real
 * process. It also parses every query of the Grafana dashboard (as recording rules). promtool
 * is installed by test/setup.sh (unpacked from Debian's prometheus package); without it these
 * fail, never skip.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { type ChildSidecar, spawnSidecar } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { ROOT } from '../helpers/rendered.js';
import { tempDir, tokenOf } from '../helpers/topology.js';

const promtool = [...(process.env.PATH ?? '').split(delimiter), '/usr/bin', '/usr/local/bin']
  .map((d) => join(d, 'promtool'))
  .find((p) => existsSync(p));

const { dir, cleanup } = tempDir('agw-promtool-');
let adapter: TestAdapter | undefined;
let sidecar: ChildSidecar | undefined;
afterAll(async () => {
  sidecar?.child.kill('SIGKILL');
  await sidecar?.exited;
  await adapter?.stop();
  cleanup();
});

function needPromtool(): string {
  if (promtool === undefined)
    throw new Error('promtool is not installed: test/setup.sh installs it');
  return promtool;
}

/** promtool check metrics on `text`: its exit status and what it said. */
function check(text: string): { status: number | null; said: string } {
  const r = spawnSync(needPromtool(), ['check', 'metrics'], { input: text, encoding: 'utf8' });
  return { status: r.status, said: `${r.stdout}${r.stderr}`.trim() };
}

it('promtool check metrics passes both expositions without a word', {
  timeout: 30_000,
}, async () => {
  adapter = await startTestAdapter();
  // traffic: a batch with a new message, a duplicate and a refusal, a poll and an ack
  const key = 'promtool-1';
  const m = (k: string, to: string) => ({ idempotency_key: k, to, kind: 'status', payload: {} });
  await call(adapter.url, 'POST', '/v1/messages', { agent: 'pm', body: m(key, '@qa') });
  const batch = await call(adapter.url, 'POST', '/v1/messages/batch', {
    agent: 'pm',
    body: { messages: [m('promtool-2', '@qa'), m(key, '@qa'), m('promtool-3', 'platform')] },
  });
  expect(batch.status).toBe(200);
  const poll = await call(adapter.url, 'GET', '/v1/inbox?wait=0', { agent: 'qa' });
  await call(adapter.url, 'POST', '/v1/acks', {
    agent: 'qa',
    body: { delivery_ids: [poll.body.deliveries[0].delivery_id] },
  });
  const adapterText = (await call(adapter.url, 'GET', '/metrics')).body as string;
  expect(adapterText).toContain('agw_messages_total{outcome="not_member"} 1');
  expect(check(adapterText)).toEqual({ status: 0, said: '' });

  sidecar = await spawnSidecar({
    AGW_ADAPTER_URL: adapter.url,
    AGW_AGENT_ID: 'pm',
    AGW_AGENT_TOKEN: tokenOf('pm'),
    AGW_OUTBOX: join(dir, 'outbox.db'),
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal.socket'),
    AGW_METRICS_LISTEN: '127.0.0.1:0',
  });
  const at = sidecar.lines
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { metrics?: string })
    .find((l) => l.metrics !== undefined)?.metrics;
  expect(at).toBeDefined();
  const sidecarText = await (await fetch(at!)).text();
  expect(sidecarText).toContain('agw_sidecar_outbox_depth 0');
  expect(check(sidecarText)).toEqual({ status: 0, said: '' });
  // and it can fail: a gauge named as a counter is linted
  expect(check('# HELP x_total x\n# TYPE x_total gauge\nx_total 1\n').said).toMatch(/_total/);
});

it('promtool parses every query of the Grafana dashboard', () => {
  const dashboard = JSON.parse(
    readFileSync(join(ROOT, 'k8s/monitoring/grafana-dashboard.json'), 'utf8'),
  ) as { panels: { targets?: { expr: string }[] }[] };
  const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
  expect(exprs.length).toBeGreaterThan(0);
  // Grafana's variables as Grafana fills them in
  const rules = exprs.map((expr, i) => ({
    record: `dashboard:query_${i}`,
    expr: expr.replaceAll('$__rate_interval', '1m').replaceAll('$namespace', '.*'),
  }));
  const file = join(dir, 'dashboard-rules.yaml');
  writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules }] }));
  const r = spawnSync(needPromtool(), ['check', 'rules', file], { encoding: 'utf8' });
  expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);
  expect(r.stdout).toContain(`${rules.length} rules found`);
});
