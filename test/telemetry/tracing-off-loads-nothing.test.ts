/**
 * Tracing is decided at start by the OTEL_* variables alone (CONTRACT.md, "Trace context"):
 * without them, or with OTEL_TRACES_EXPORTER=none, neither program loads any OpenTelemetry
 * module (Node's own module log, NODE_DEBUG=esm,module, lists every module it loads; with an
 * endpoint set, the same log shows the SDK, so the check can fail); an exporter or protocol we
 * do not ship is one line at start and exit 2.
 */
import { once } from 'node:events';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type ChildProcessOfCli, runCli, spawnAdapter, spawnSidecar } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const { dir, cleanup } = tempDir('agw-otel-off-');
const topology = writeTopology(dir);
const running: ChildProcessOfCli[] = [];
afterAll(async () => {
  for (const p of running) if (p.child.exitCode === null) p.child.kill('SIGKILL');
  await Promise.all(running.map((p) => p.exited));
  cleanup();
});

const MODULE_LOG = { NODE_DEBUG: 'esm,module' };
/** An address nothing answers on: the exporter's sends fail quietly, the program runs. */
const NOWHERE = 'http://127.0.0.1:9';

async function sidecar(env: Record<string, string>, n: number): Promise<ChildProcessOfCli> {
  const s = await spawnSidecar({
    AGW_ADAPTER_URL: NOWHERE,
    AGW_AGENT_ID: 'pm',
    AGW_AGENT_TOKEN: tokenOf('pm'),
    AGW_OUTBOX: join(dir, `outbox-${n}.db`),
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal.sock'),
    ...MODULE_LOG,
    ...env,
  });
  running.push(s);
  return s;
}

async function adapter(env: Record<string, string>, n: number): Promise<ChildProcessOfCli> {
  const a = await spawnAdapter(['--topology', topology, '--db', join(dir, `a-${n}.db`)], {
    ...MODULE_LOG,
    ...env,
  });
  running.push(a);
  return a;
}

/**
 * Stops it and waits for the last of its stderr: the log of what it loaded is complete only
 * then (the ready line on stdout can come before stderr chunks written earlier).
 */
async function finished(p: ChildProcessOfCli): Promise<void> {
  p.child.kill('SIGTERM');
  await p.exited;
  if (!p.child.stderr!.closed) await once(p.child.stderr!, 'close');
}

const otelModules = (p: ChildProcessOfCli) =>
  p.lines.join('\n').match(/@opentelemetry\/[a-z-]+/g) ?? [];

/** The OpenTelemetry packages whose files a program loaded (CommonJS or ESM). */
function otelPackagesLoaded(p: ChildProcessOfCli): string[] {
  // stderr arrives in chunks that may cut a line: joined as they came
  const loaded = p.lines
    .join('')
    .split('\n')
    .filter((l) => /load "|Storing file:/.test(l))
    .flatMap((l) =>
      [...l.matchAll(/node_modules\/@opentelemetry\/([a-z-]+)\//g)].map((m) => m[1]!),
    );
  return [...new Set(loaded)].sort();
}

/** Who asked for an OpenTelemetry package by name (a CommonJS require), as "package ← parent". */
function otelRequesters(p: ChildProcessOfCli): string[] {
  return [
    ...new Set(
      [...p.lines.join('').matchAll(/REQUEST (@opentelemetry\/[a-z-]+) parent: (\S+)/g)].map(
        (m) => `${m[1]} ← ${m[2]!.replace(/.*node_modules\//, '')}`,
      ),
    ),
  ];
}

describe('which OpenTelemetry modules each program loads', () => {
  it.each([
    ['no OTEL_* variable', {}],
    [
      'OTEL_TRACES_EXPORTER=none over an endpoint',
      { OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: NOWHERE },
    ],
    ['OTEL_SDK_DISABLED=true', { OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: NOWHERE }],
    ['only a service name', { OTEL_SERVICE_NAME: 'x' }],
  ])('none with %s', async (_, env) => {
    const n = running.length;
    const [s, a] = await Promise.all([sidecar(env, n), adapter(env, n)]);
    await Promise.all([finished(s), finished(a)]);
    // the log is there (the check can see modules), and names none of OpenTelemetry's
    expect(s.lines.join('\n')).toMatch(/sidecar\/server\.js/);
    expect(a.lines.join('\n')).toMatch(/adapter\/server\.js/);
    for (const p of [s, a]) expect(p.lines.join('')).not.toMatch(/telemetry\/otel\.js/);
    // the sidecar loads none; the adapter @opentelemetry/api alone, which prom-client 15
    // requires when it is installed, for its exemplars (lib/metrics/processCpuTotal.js): the
    // no-op API, loaded tracing on or off (the sidecar loads prom-client at its first scrape)
    expect([otelPackagesLoaded(s), otelRequesters(s)]).toEqual([[], []]);
    expect(otelPackagesLoaded(a)).toEqual(['api']);
    expect(otelRequesters(a)).toEqual([
      '@opentelemetry/api ← prom-client/lib/metrics/processCpuTotal.js',
    ]);
  });

  it.each([
    ['an endpoint', { OTEL_EXPORTER_OTLP_ENDPOINT: NOWHERE }],
    ['OTEL_TRACES_EXPORTER=otlp', { OTEL_TRACES_EXPORTER: 'otlp' }],
  ])('the SDK and the exporter with %s', async (_, env) => {
    const n = running.length;
    const [s, a] = await Promise.all([sidecar(env, n), adapter(env, n)]);
    await Promise.all([finished(s), finished(a)]);
    for (const p of [s, a]) {
      expect(p.lines.join('\n')).toMatch(/telemetry\/otel\.js/);
      expect(otelModules(p)).toEqual(
        expect.arrayContaining([
          '@opentelemetry/api',
          '@opentelemetry/sdk-trace-base',
          '@opentelemetry/exporter-trace-otlp-proto',
        ]),
      );
      expect(otelModules(p)).not.toContain('@opentelemetry/exporter-trace-otlp-http');
    }
  });
});

describe('a bad OTEL_* setting', () => {
  it.each([
    ['OTEL_TRACES_EXPORTER', { OTEL_TRACES_EXPORTER: 'zipkin' }, /OTEL_TRACES_EXPORTER: "zipkin"/],
    [
      'OTEL_EXPORTER_OTLP_PROTOCOL',
      { OTEL_EXPORTER_OTLP_ENDPOINT: NOWHERE, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
      /OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" is not spoken here/,
    ],
  ])('%s: one line at start, exit 2', async (_, env, line) => {
    for (const args of [
      ['adapter', '--topology', topology, '--db', join(dir, 'bad.db')],
      [
        'sidecar',
        '--agent-id',
        'pm',
        '--adapter-url',
        NOWHERE,
        '--agent-token',
        'x',
        '--outbox',
        join(dir, 'bad.db'),
      ],
    ]) {
      const r = await runCli(args, env);
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toEqual([expect.stringMatching(line)]);
    }
  });
});

describe('a collector that is away', () => {
  it('costs the spans, not the program: sends go on, one warning a minute', {
    timeout: 60_000,
  }, async () => {
    const a = await adapter(
      { OTEL_EXPORTER_OTLP_ENDPOINT: NOWHERE, OTEL_BSP_SCHEDULE_DELAY: '50' },
      99,
    );
    const send = async (i: number) =>
      (
        await call(a.url, 'POST', '/v1/messages', {
          agent: 'pm',
          body: { idempotency_key: `away-${i}`, to: '@qa', kind: 'status', payload: {} },
        })
      ).status;
    const warnings = () =>
      a.lines.filter((l) => l.includes('"level":40') && l.includes('tracing: ')).length;
    expect(await send(0)).toBe(201);
    await until(() => warnings() > 0, 'a warning that the spans cannot be exported');
    // more exports fail meanwhile (every 50 ms): still one line, and every send stored
    for (let i = 1; i <= 5; i++) expect(await send(i)).toBe(201);
    await until(
      () => a.lines.join('').split('"msg"').length > 0 && warnings() === 1,
      'still one warning',
    );
    expect(a.child.exitCode).toBeNull();
  });
});
