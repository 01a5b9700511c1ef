// The sidecar's cost and its recovery: send latency agent→sidecar→adapter against
// agent→adapter at 1 and 16 in flight; the time from the adapter coming back to an outbox of
// 1,000 queued messages being empty; the sidecar's start-to-listening time and idle RSS. The
// sidecar runs with the NODE_OPTIONS of its image (docker/Dockerfile, stage `sidecar`), as it
// runs in a pod.
//
//   node bench/sidecar/sidecar.mjs [--seconds 5]
import { readFileSync } from 'node:fs';
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

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '5' } } });

/** A variable the sidecar image sets (its `ENV ... NAME=...` line), '' without one. */
function imageEnv(name) {
  // the Dockerfile of the checkout whose CLI runs (bench/run.mjs --before runs an older one)
  const dockerfile = readFileSync(join(CLI, '../../../docker/Dockerfile'), 'utf8');
  const stage = dockerfile.split(/^FROM /m).find((s) => /^\S+ AS sidecar\s/.test(s)) ?? '';
  const m = new RegExp(`\\b${name}=(?:"([^"]*)"|(\\S+))`).exec(stage.replace(/^\s*#.*$/gm, ''));
  return m?.[1] ?? m?.[2] ?? '';
}
const nodeOptions = imageEnv('NODE_OPTIONS');
const arenas = imageEnv('MALLOC_ARENA_MAX');
const seconds = Number(values.seconds);
const text = 'x'.repeat(1000);
const { dir, topology, cleanup } = benchDir();
const db = join(dir, 'adapter.db');
const adapterArgs = ['--db', db, '--queue-capacity', '1000000'];
let adapter = await startAdapter(dir, topology, adapterArgs);
const port = Number(new URL(adapter.url).port);

const t0 = performance.now();
const sidecar = await startProcess(
  [CLI, 'sidecar', '--listen', '127.0.0.1:0'],
  {
    AGW_ADAPTER_URL: adapter.url,
    AGW_AGENT_ID: 'pm',
    AGW_AGENT_TOKEN: tokenOf('pm'),
    AGW_OUTBOX: join(dir, 'outbox.db'),
    AGW_BREAKER_BASE_MS: '100',
    AGW_BREAKER_MAX_MS: '1000',
    AGW_LOG_LEVEL: 'info',
    ...(nodeOptions === '' ? {} : { NODE_OPTIONS: nodeOptions }),
    ...(arenas === '' ? {} : { MALLOC_ARENA_MAX: arenas }),
  },
  (e) => e.msg?.includes('listening on'),
);
const startMs = performance.now() - t0;
const rss = () =>
  round(
    Number(
      /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${sidecar.pid}/status`, 'utf8'))?.[1] ?? 0,
    ) / 1024,
    1,
  );
// 2 s after start is still the start's peak; V8's memory reducer shrinks the heap 8-15 s later,
// and a sidecar then idles for hours: both are reported
await new Promise((r) => setTimeout(r, 2000));
const startRss = rss();
await new Promise((r) => setTimeout(r, 28_000));
console.log(
  JSON.stringify({
    bench: 'sidecar-idle',
    start_to_listening_ms: Math.round(startMs),
    rss_2s_mib: startRss,
    idle_rss_mib: rss(),
    idle_after_s: 30,
    node_options: nodeOptions,
    malloc_arena_max: arenas,
  }),
);

const direct = { authorization: `Bearer ${tokenOf('pm')}`, 'content-type': 'application/json' };
const viaSidecar = { 'content-type': 'application/json' };
for (const inflight of [1, 16]) {
  for (const [target, url, headers] of [
    ['adapter', adapter.url, direct],
    ['sidecar', sidecar.url, viaSidecar],
  ]) {
    const r = await closedLoop(url, {
      inflight,
      seconds,
      makeRequest: () => ({
        method: 'POST',
        path: '/v1/messages',
        headers,
        body: JSON.stringify({
          idempotency_key: uuidv7(),
          to: '@qa',
          kind: 'status',
          payload: { text },
        }),
      }),
      check: (s) => s === 201,
    });
    console.log(JSON.stringify({ bench: 'sidecar-latency', target, inflight, ...r }));
  }
}

// 1,000 queued while the adapter is away, then the adapter comes back
await adapter.stop('SIGKILL');
const status = async () => (await (await fetch(`${sidecar.url}/v1/status`)).json()).outbox.depth;
for (let i = 0; i < 1000; i += 50) {
  await Promise.all(
    Array.from({ length: 50 }, () =>
      fetch(`${sidecar.url}/v1/messages`, {
        method: 'POST',
        headers: viaSidecar,
        body: JSON.stringify({ to: '@qa', kind: 'status', payload: { text } }),
      }).then((r) => r.arrayBuffer()),
    ),
  );
}
const queued = await status();
adapter = await startAdapter(dir, topology, [...adapterArgs, '--listen', `127.0.0.1:${port}`]);
const back = performance.now();
while ((await status()) > 0 && performance.now() - back < 60_000)
  await new Promise((r) => setTimeout(r, 5));
console.log(
  JSON.stringify({
    bench: 'sidecar-drain',
    queued,
    adapter_back_to_outbox_empty_ms: Math.round(performance.now() - back),
    breaker_base_ms: 100,
    breaker_max_ms: 1000,
  }),
);
await sidecar.stop();
await adapter.stop();
cleanup();
