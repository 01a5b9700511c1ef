// What tracing costs (docs/design/tracing.md): acked sends at 1, 16 and 64 in flight, straight
// to the adapter and through a sidecar, with tracing off (no OTEL_* variable: no OpenTelemetry
// module loaded) and on (OTLP/HTTP protobuf to a sink in this process that answers every export
// and keeps nothing, sampling everything); with --before DIR, also another checkout's build with
// no tracing code at all, for "off costs nothing". Each stack (adapter and pm's sidecar) runs at
// once and the measurements alternate between them, so drift on a noisy machine spreads evenly;
// the sidecars' idle RSS is read after 30 s. One JSON line per measurement.
//
//   node bench/path/tracing.mjs [--seconds 4] [--inflight 1,16,64] [--before DIR] [--rounds 2]

import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  benchDir,
  CLI,
  closedLoop,
  round,
  startAdapter,
  startProcess,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '4' },
    inflight: { type: 'string', default: '1,16,64' },
    before: { type: 'string' },
    rounds: { type: 'string', default: '2' },
  },
});
const seconds = Number(values.seconds);
const levels = values.inflight.split(',').map(Number);

// the collector stand-in: every export answered 200 at once, counted, dropped
let exports = 0;
let exportedBytes = 0;
const sink = createServer((req, res) => {
  req.on('data', (c) => {
    exportedBytes += c.length;
  });
  req.on('end', () => {
    exports++;
    res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
  });
});
await new Promise((r) => sink.listen(0, '127.0.0.1', r));
const sinkUrl = `http://127.0.0.1:${sink.address().port}`;
const TRACING = {
  OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl,
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
  OTEL_TRACES_SAMPLER: 'always_on',
};

const modes = [
  ...(values.before ? [{ name: 'before', cli: `${values.before}/dist/cli/main.js`, env: {} }] : []),
  { name: 'off', cli: CLI, env: {} },
  { name: 'on', cli: CLI, env: TRACING },
];

const rssOf = (pid) =>
  round(
    Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024,
    1,
  );

const stacks = [];
for (const mode of modes) {
  const { dir, topology, cleanup } = benchDir();
  const adapter = await startAdapter(
    dir,
    topology,
    ['--queue-capacity', '1000000'],
    mode.env,
    mode.cli,
  );
  const sidecar = await startProcess(
    [mode.cli, 'sidecar', '--listen', '127.0.0.1:0'],
    {
      AGW_ADAPTER_URL: adapter.url,
      AGW_AGENT_ID: 'pm',
      AGW_AGENT_TOKEN: tokenOf('pm'),
      AGW_OUTBOX: join(dir, 'outbox.db'),
      ...mode.env,
    },
    (e) => e.msg?.includes('listening on'),
  );
  stacks.push({ mode, adapter, sidecar, cleanup });
}
await new Promise((r) => setTimeout(r, 30_000));
for (const s of stacks) {
  console.log(
    JSON.stringify({
      bench: 'tracing-idle',
      mode: s.mode.name,
      sidecar_idle_rss_mib: rssOf(s.sidecar.pid),
      adapter_idle_rss_mib: rssOf(s.adapter.pid),
    }),
  );
}

const text = 'x'.repeat(1000);
const direct = { authorization: `Bearer ${tokenOf('pm')}`, 'content-type': 'application/json' };
const viaSidecar = { 'content-type': 'application/json' };
for (let r = 0; r < Number(values.rounds); r++) {
  for (const inflight of levels) {
    for (const target of ['adapter', 'sidecar']) {
      // alternate which stack goes first from round to round
      const order = r % 2 === 0 ? stacks : [...stacks].reverse();
      for (const s of order) {
        const url = target === 'adapter' ? s.adapter.url : s.sidecar.url;
        const res = await closedLoop(url, {
          inflight,
          seconds,
          makeRequest: () => ({
            method: 'POST',
            path: '/v1/messages',
            headers: target === 'adapter' ? direct : viaSidecar,
            body: JSON.stringify({
              idempotency_key: uuidv7(),
              to: '@qa',
              kind: 'status',
              payload: { text },
            }),
          }),
          check: (st) => st === 201,
        });
        console.log(
          JSON.stringify({
            bench: 'tracing',
            round: r,
            mode: s.mode.name,
            target,
            inflight,
            ...res,
          }),
        );
      }
    }
  }
}
for (const s of stacks) {
  await s.sidecar.stop();
  await s.adapter.stop();
  s.cleanup();
}
console.log(
  JSON.stringify({
    bench: 'tracing-sink',
    exports,
    exported_mib: round(exportedBytes / 2 ** 20, 1),
  }),
);
sink.close();
