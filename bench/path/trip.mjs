// The path agents use: agent → its sidecar → adapter → the recipient's sidecar → agent.
// pm's sidecar takes the sends, qa's sidecar serves qa's long polls and acks.
//
// - `trip`: end-to-end latency at a fixed rate (open loop, default 500 msg/s), send to
//   long-poll receive, through the two sidecars; the same run direct to the adapter beside it,
//   and through two bare proxies (bare-proxy.mjs) where the sidecars are: the floor of the two
//   extra loopback hops alone, what the sidecars cost without any of their work.
//   For each process, CPU time per message (utime + stime from /proc over the measured part).
//   Each route twice: acks carried on the next poll (POST /v1/inbox), and acks on their own
//   before the next poll (POST /v1/acks, then GET /v1/inbox; the only way before the first).
// - `trip-send`: acked sends at 1 / 16 / 64 in flight through pm's sidecar and direct.
// - `trip-fsyncs` (with --fsyncs, needs strace): fsync and fdatasync calls per trip in each
//   process, counted by strace attached for a run of 500 trips one at a time.
//
//   node bench/path/trip.mjs [--rate 500] [--seconds 10] [--send-seconds 5 (0: none)] [--fsyncs]
//                       [--routes direct,proxies,sidecars] [--warmup-seconds 8]
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import {
  benchDir,
  CLI,
  closedLoop,
  latencySummary,
  round,
  startAdapter,
  startProcess,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '500' },
    seconds: { type: 'string', default: '10' },
    'send-seconds': { type: 'string', default: '5' },
    fsyncs: { type: 'boolean', default: false },
    routes: { type: 'string', default: 'direct,proxies,sidecars' },
    'warmup-seconds': { type: 'string', default: '8' },
  },
});
const rate = Number(values.rate);
const seconds = Number(values.seconds);
const sendSeconds = Number(values['send-seconds']);
const tripRoutes = values.routes.split(',');
const warmupSeconds = Number(values['warmup-seconds']);
const text = 'x'.repeat(1000);

const { dir, topology, cleanup } = benchDir();
const adapter = await startAdapter(dir, topology, ['--queue-capacity', '1000000']);
const sidecarOf = (agent) =>
  startProcess(
    [CLI, 'sidecar', '--listen', '127.0.0.1:0'],
    {
      AGW_ADAPTER_URL: adapter.url,
      AGW_AGENT_ID: agent,
      AGW_AGENT_TOKEN: tokenOf(agent),
      AGW_OUTBOX: join(dir, `${agent}-outbox.db`),
      AGW_LOG_LEVEL: 'info',
    },
    (e) => e.msg?.includes('listening on'),
  );
const proxyOf = (agent) =>
  startProcess(
    [new URL('../lib/bare-proxy.mjs', import.meta.url).pathname, adapter.url, tokenOf(agent)],
    {},
    (e) => e.msg === 'proxy ready',
  );
const [pm, qa, research, orchestrator] = await Promise.all([
  sidecarOf('pm'),
  sidecarOf('qa'),
  proxyOf('research'),
  proxyOf('orchestrator'),
]);
const processes = {
  adapter,
  'pm sidecar': pm,
  'qa sidecar': qa,
  'research proxy': research,
  'orchestrator proxy': orchestrator,
};

const json = { 'content-type': 'application/json' };
const auth = (a) => ({ authorization: `Bearer ${tokenOf(a)}`, ...json });
// Each route has a pair of agents of its own. Were the direct route to receive as qa, the
// messages it took behind qa's sidecar would be a gap in the pm-qa channel to that sidecar, which
// it repairs by handing them to qa again as copies (inbox-repair.ts): the sidecars' run would then
// count each direct message a second time, at its age (the 2.5 s p50 of earlier runs).
const routes = {
  sidecars: { send: [pm.url, json], receive: [qa.url, json], to: '@qa' },
  direct: {
    send: [adapter.url, auth('engineering')],
    receive: [adapter.url, auth('growth')],
    to: '@growth',
  },
  // two bare proxies (bare-proxy.mjs) where the sidecars are: the hops' own cost
  proxies: { send: [research.url, json], receive: [orchestrator.url, json], to: '@orchestrator' },
};

/** CPU seconds (user + system) a process has used so far. */
function cpuSeconds(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
}

/**
 * Whether this build takes acks on the poll (POST /v1/inbox); a build from before it answers
 * 405, and its trips ack on their own only.
 */
async function acksOnPoll() {
  const [url, headers] = routes.direct.receive;
  const pool = new Pool(url, { connections: 1 });
  const res = await pool.request({
    method: 'POST',
    path: '/v1/inbox?wait=0&max=1',
    headers,
    body: '{"delivery_ids":[1]}',
  });
  await res.body.text();
  await pool.close();
  return res.statusCode === 200;
}
const ackModes = (await acksOnPoll()) ? ['on-poll', 'separate'] : ['separate'];

/**
 * Sends at `rate` for `secs` while the receiver long-polls and acks; latencies in ms. `acks`:
 * `on-poll` carries each answer's acks on the next poll (POST /v1/inbox, as the client library
 * does), `separate` acks with POST /v1/acks before polling again (GET /v1/inbox).
 */
async function trip(route, secs, perSecond, { warmup = 1000, acks = ackModes[0] } = {}) {
  const [sendUrl, sendHeaders] = routes[route].send;
  const [recvUrl, recvHeaders] = routes[route].receive;
  const { to } = routes[route];
  const sendPool = new Pool(sendUrl, { connections: 32 });
  const recvPool = new Pool(recvUrl, { connections: 2 });
  const latencies = [];
  let answers = 0; // poll answers that brought deliveries
  let receiving = true;
  const settle = async (method, path, ids) => {
    const res = await recvPool.request({
      method,
      path,
      headers: recvHeaders,
      ...(ids.length > 0 ? { body: JSON.stringify({ delivery_ids: ids }) } : {}),
    });
    return res.body.json();
  };
  const receiver = (async () => {
    let carry = [];
    while (receiving) {
      const inbox = '/v1/inbox?wait=1&max=100';
      const { deliveries } = await settle(carry.length > 0 ? 'POST' : 'GET', inbox, carry);
      carry = [];
      const t = performance.now();
      if (deliveries.length === 0) continue;
      answers++;
      for (const d of deliveries) latencies.push(t - d.message.payload.t);
      const ids = deliveries.map((d) => d.delivery_id);
      if (acks === 'on-poll') carry = ids;
      else await settle('POST', '/v1/acks', ids);
    }
    if (carry.length > 0) await settle('POST', '/v1/acks', carry);
  })();
  const total = Math.round(perSecond * secs);
  const start = performance.now() + warmup;
  const sends = [];
  let cpu0;
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / perSecond;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    if (i === 0) {
      latencies.length = 0; // what arrived in the warm-up does not count
      answers = 0;
      cpu0 = Object.fromEntries(Object.entries(processes).map(([k, p]) => [k, cpuSeconds(p.pid)]));
    }
    sends.push(
      sendPool
        .request({
          method: 'POST',
          path: '/v1/messages',
          headers: sendHeaders,
          body: JSON.stringify({
            idempotency_key: uuidv7(),
            to,
            kind: 'status',
            payload: { t: performance.now(), text },
          }),
        })
        .then((r) => r.body.text()),
    );
  }
  await Promise.all(sends);
  const deadline = performance.now() + 10_000;
  while (latencies.length < total && performance.now() < deadline)
    await new Promise((r) => setTimeout(r, 20));
  const cpu = Object.fromEntries(
    Object.entries(processes).map(([k, p]) => [
      k,
      round(((cpuSeconds(p.pid) - cpu0[k]) / total) * 1e6, 0),
    ]),
  );
  receiving = false;
  await receiver;
  await Promise.all([sendPool.close(), recvPool.close()]);
  // deliveries per answer: 1 while the receiver's next poll is back at the adapter before the
  // next message; more once the poll's round trip is longer than the gap between messages
  const perPoll = round(latencies.length / Math.max(answers, 1), 2);
  return {
    sent: total,
    received: latencies.length,
    ...latencySummary(latencies),
    per_poll: perPoll,
    cpu_us: cpu,
  };
}

// warm-up, unmeasured: the first run after start also pays for the store's files growing and
// for the JIT, which would fall on whichever route ran first; each route in each ack mode, so
// that no measured run is the first of its kind. 8 s each: with 2 s, the first measured run
// through the sidecars was slower whichever ack mode it was (p50 1.64-5.19 ms against 1.15-1.89
// for the second, over five runs; reversing the order moved the slowness with it), while with
// 8 s the order no longer decided it (2026-12-02)
for (const acks of ackModes) {
  for (const route of tripRoutes) await trip(route, warmupSeconds, rate, { acks });
}
for (const acks of ackModes) {
  for (const route of tripRoutes) {
    const r = await trip(route, seconds, rate, { acks });
    console.log(JSON.stringify({ bench: 'trip', route, acks, rate, seconds, ...r }));
  }
}

for (const inflight of sendSeconds > 0 ? [1, 16, 64] : []) {
  for (const route of tripRoutes) {
    const [url, headers] = routes[route].send;
    const r = await closedLoop(url, {
      inflight,
      seconds: sendSeconds,
      makeRequest: () => ({
        method: 'POST',
        path: '/v1/messages',
        headers,
        body: JSON.stringify({
          idempotency_key: uuidv7(),
          // nobody receives as research or engineering here; research sends through the proxies
          to: route === 'proxies' ? '@engineering' : '@research',
          kind: 'status',
          payload: { text },
        }),
      }),
      check: (s) => s === 201,
    });
    console.log(JSON.stringify({ bench: 'trip-send', route, inflight, ...r }));
  }
}

if (values.fsyncs) {
  // strace -c on each process while trips run one at a time: syscall counts per trip
  const n = 500;
  for (const route of ['direct', 'sidecars']) {
    const tracers = Object.entries(processes).map(([name, p]) => {
      const child = spawn('strace', ['-f', '-c', '-e', 'trace=fsync,fdatasync', '-p', p.pid], {
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let out = '';
      child.stderr.on('data', (b) => {
        out += b;
      });
      const done = new Promise((r) => child.once('exit', () => r(out)));
      return { name, child, done };
    });
    await new Promise((r) => setTimeout(r, 1000)); // strace attached
    const r = await trip(route, n / 50, 50, { warmup: 200 });
    await new Promise((r) => setTimeout(r, 300));
    const perTrip = {};
    for (const t of tracers) {
      t.child.kill('SIGINT');
      const out = await t.done;
      // strace -c rows: % time, seconds, usecs/call, calls, [errors,] syscall
      const count = (name) => {
        const row = out.split('\n').find((l) => l.trim().split(/\s+/).at(-1) === name);
        return Number(row?.trim().split(/\s+/)[3] ?? 0);
      };
      perTrip[t.name] = round((count('fsync') + count('fdatasync')) / r.sent, 2);
    }
    console.log(
      JSON.stringify({
        bench: 'trip-fsyncs',
        route,
        acks: ackModes[0],
        trips: r.sent,
        per_trip: perTrip,
      }),
    );
  }
}

await Promise.all([pm.stop(), qa.stop(), research.stop(), orchestrator.stop()]);
await adapter.stop();
cleanup();
