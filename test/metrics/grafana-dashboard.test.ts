/**
 * The Grafana dashboard (k8s/monitoring/grafana-dashboard.json, docs/deploy.md "Metrics") reads
 * only metrics the programs serve: every name in its queries is one a real adapter or a real
 * sidecar (from its listener for Prometheus) exports, and it shows what an operator needs of
 * both: the adapter's messages by outcome, deliveries, dead letters, queue depths, parked polls
 * and commit latency; the sidecars' outbox depth and breaker state. Each panel asks the one
 * Prometheus data source the dashboard is given. (promtool checks the queries' syntax:
 * promtool-accepts-both-expositions.test.ts.)
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, expect, it } from 'vitest';
import { readSettings } from '../../src/cli/settings.js';
import { Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { startSidecar } from '../../src/sidecar/server.js';
import { SIDECAR_SETTINGS, SidecarSettingsSchema } from '../../src/sidecar/settings.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { ROOT } from '../helpers/rendered.js';
import { tempDir, tokenOf } from '../helpers/topology.js';
import { parseExposition } from './exposition.js';

// biome-ignore lint/suspicious/noExplicitAny: a Grafana dashboard, checked field by field below
type Panel = any;
const dashboard = JSON.parse(
  readFileSync(join(ROOT, 'k8s/monitoring/grafana-dashboard.json'), 'utf8'),
) as { uid: string; title: string; panels: Panel[]; templating: { list: Panel[] } };
const queries = dashboard.panels.flatMap((p) =>
  (p.targets ?? []).map((t: Panel) => ({ panel: p.title as string, expr: t.expr as string })),
);
/** The metric names a query reads (ours and prom-client's process and Node ones). */
const namesIn = (expr: string) => [
  ...new Set(expr.match(/\b(?:agw|process|nodejs)_[a-z0-9_]+\b/g) ?? []),
];

const { dir, cleanup } = tempDir('agw-dashboard-');
const stops: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const stop of stops.reverse()) await stop();
  cleanup();
});

it('queries only metrics the adapter and the sidecar serve', { timeout: 30_000 }, async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const { settings } = readSettings(SIDECAR_SETTINGS, SidecarSettingsSchema, [], {
    AGW_LISTEN: '127.0.0.1:0',
    AGW_METRICS_LISTEN: '127.0.0.1:0',
    AGW_ADAPTER_URL: adapter.url,
    AGW_AGENT_ID: 'qa',
    AGW_AGENT_TOKEN: tokenOf('qa'),
    AGW_OUTBOX: join(dir, 'outbox.db'),
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal.sock'),
    AGW_SHUTDOWN_GRACE_MS: '0',
  });
  const writer = new JournalWriter({ socketPath: settings.journalSocket, stderr: { write() {} } });
  const sidecar = await startSidecar({
    settings,
    logger: pino({ level: 'silent' }),
    emergencies: new Emergencies(writer, { agentId: 'qa' }),
  });
  stops.push(() => writer.close(), sidecar.close);
  const served = new Set<string>();
  for (const url of [`${adapter.url}/metrics`, `${sidecar.metricsUrl}/metrics`]) {
    const families = parseExposition(await (await fetch(url)).text());
    for (const f of families.values()) {
      served.add(f.name);
      for (const s of f.samples) served.add(s.name);
    }
  }
  expect(queries.length).toBeGreaterThan(0);
  for (const { panel, expr } of queries) {
    expect(namesIn(expr).length, `${panel}: ${expr}`).toBeGreaterThan(0);
    for (const name of namesIn(expr)) expect(served.has(name), `${panel}: ${name}`).toBe(true);
  }
});

it('shows what an operator needs of both programs', () => {
  const read = new Set(queries.flatMap((q) => namesIn(q.expr)));
  for (const name of [
    'agw_messages_total',
    'agw_deliveries_enqueued_total',
    'agw_deliveries_handed_out_total',
    'agw_acks_total',
    'agw_dead_letters_total',
    'agw_queue_depth',
    'agw_agent_parked_polls',
    'agw_commit_seconds_bucket',
    'agw_sidecar_outbox_depth',
    'agw_sidecar_breaker_open',
    'agw_sidecar_local_dead_letters',
    'agw_build_info',
  ])
    expect(read.has(name), name).toBe(true);
  // messages by outcome, dead letters by reason, queues by agent
  const exprOf = (name: string) => queries.filter((q) => namesIn(q.expr).includes(name));
  expect(exprOf('agw_messages_total')[0]?.expr).toMatch(/by \(outcome\)/);
  expect(exprOf('agw_dead_letters_total')[0]?.expr).toMatch(/by \(reason\)/);
  expect(exprOf('agw_queue_depth')[0]?.expr).toMatch(/by \(agent\)/);
});

it('is one dashboard on one Prometheus data source, its panels laid out apart', () => {
  expect(dashboard.uid).toBe('agent-gateway');
  const source = dashboard.templating.list.find((v) => v.type === 'datasource');
  expect(source?.query).toBe('prometheus');
  const ids = dashboard.panels.map((p) => p.id);
  expect(new Set(ids).size).toBe(ids.length);
  const places = new Set<string>();
  for (const p of dashboard.panels) {
    const at = `${p.gridPos.x},${p.gridPos.y}`;
    expect(places.has(at), `${p.title} at ${at}`).toBe(false);
    places.add(at);
    expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
    if (p.type === 'row') continue;
    expect(p.datasource, p.title).toEqual({ type: 'prometheus', uid: `\${${source.name}}` });
    expect(p.description, p.title).toBeTruthy();
  }
});
