/**
 * Many agents on one adapter (issue 36, "4,000 agents without a late copy"): N simulated agents
 * each keep one long poll open (GET /v1/inbox?wait=25, its acks carried on the next poll), and
 * one sender sends `--rate` messages a second in all, each a direct message to a random agent.
 * Measured: the hand-over time of each message, from its 201 at the sender to the answer of the
 * poll that carries it (0 when the poll answered first: the message and its lease shared one
 * commit); the copies handed over more than 1 s after their 201 by a poll open when it came
 * ("late": a poll that missed the wake of the commit that gave it the copy waits for its timeout
 * or the next wake), apart from those this process was slow to poll for again; errors;
 * the adapter's RSS. One line of JSON per agent count, then a table.
 *
 *   node bench/path/agents.mjs --agents 10,1000,4000 --rate 200 --seconds 20
 *   AGW_BENCH_CLI=/path/to/old/dist/cli/main.js node bench/path/agents.mjs   (before/after)
 */
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import {
  benchDir,
  CLI,
  cpuMeter,
  latencySummary,
  pgDatabase,
  round,
  startAdapter,
  startProcess,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    agents: { type: 'string', default: '10,1000' },
    rate: { type: 'string', default: '200' },
    seconds: { type: 'string', default: '20' },
    wait: { type: 'string', default: '25' },
    sync: { type: 'string', default: 'full' },
    // > 0: that many adapters on one fresh PostgreSQL database (--url's server), the agents and
    // the sends spread over them: hand-overs then cross replicas through LISTEN/NOTIFY
    replicas: { type: 'string', default: '0' },
    url: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/postgres' },
  },
});
const replicas = Number(values.replicas);
const counts = values.agents.split(',').map(Number);
const rate = Number(values.rate);
const seconds = Number(values.seconds);
const wait = Number(values.wait);
const LATE_MS = 1000;
const LEASE_MS = 30_000;

const headers = (a) => ({
  authorization: `Bearer ${tokenOf(a)}`,
  'content-type': 'application/json',
});

function rssMiB(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) / 1024;
}

async function run(n) {
  const ids = Array.from({ length: n }, (_, i) => `a${String(i).padStart(5, '0')}`);
  const { dir, topology, cleanup } = benchDir({
    agents: ['orchestrator', 'boss', ...ids],
    channels: [],
  });
  const env = {
    // one address (this process) holds every agent's connection: a cluster's are spread
    AGW_MAX_CONNECTIONS: String(n + 1000),
    AGW_MAX_CONNECTIONS_PER_ADDRESS: String(n + 1000),
    AGW_LEASE_MS: String(LEASE_MS),
  };
  const db = replicas > 0 ? await pgDatabase(values.url) : undefined;
  const adapters =
    db === undefined
      ? [await startAdapter(dir, topology, ['--sync', values.sync], env)]
      : await Promise.all(
          Array.from({ length: replicas }, () =>
            startProcess(
              [CLI, 'adapter', '--listen', '127.0.0.1:0', '--topology', topology, '--db', db.url],
              { AGW_SEND_RATE: '0', ...env },
            ),
          ),
        );
  const adapter = adapters[0];
  const urlOf = (i) => adapters[i % adapters.length].url;
  const dispatcher = new Agent({ connections: null, keepAliveTimeout: 60_000, pipelining: 1 });
  const sentAt = new Map();
  const handOver = [];
  let late = 0;
  let serverLate = 0;
  const serverHandOver = [];
  let latePolling = 0;
  let lateBehindAck = 0;
  let errors = 0;
  let received = 0;
  let stopping = false;

  const countError = (err) => {
    if (errors++ === 0) console.error(`first error: ${err?.code ?? ''} ${err?.message ?? err}`);
  };

  async function agent(id, i) {
    let acks = [];
    while (!stopping) {
      const askedAt = performance.now();
      // a poll that carries acks: the copy it brings may have waited behind the one acked (its
      // lane's order), however promptly the adapter served it
      const carried = acks.length > 0;
      try {
        // acks ride on the next poll (POST /v1/inbox); with none to carry, a plain GET
        const res = await request(`${urlOf(i)}/v1/inbox?wait=${wait}&max=10`, {
          ...(acks.length > 0
            ? { method: 'POST', body: JSON.stringify({ delivery_ids: acks }) }
            : { method: 'GET' }),
          headers: headers(id),
          dispatcher,
        });
        const body = await res.body.json();
        const at = performance.now();
        if (res.statusCode !== 200) {
          if (errors++ === 0)
            console.error(`poll ${id}: ${res.statusCode} ${JSON.stringify(body)}`);
          continue;
        }
        acks = body.deliveries.map((d) => d.delivery_id);
        for (const d of body.deliveries) {
          received++;
          // the adapter's own count, by its clock: lease time (its expiry less the lease) less
          // receipt; free of this process's own delays
          const server =
            Date.parse(d.lease_expires_at) - LEASE_MS - Date.parse(d.message.timestamp_iso8601);
          serverHandOver.push(Math.max(0, server));
          if (server > LATE_MS) serverLate++;
          const t = sentAt.get(d.message.message_id);
          if (t === undefined) continue; // its 201 is still on its way: the poll came first
          const ms = Math.max(0, at - t);
          handOver.push(ms);
          // late on a poll that was open when the 201 came: it missed a wake (issue 36); late
          // on a poll sent after it, this process was slow to poll again (a loaded machine)
          if (ms > LATE_MS) {
            if (askedAt >= t) latePolling++;
            else if (carried) lateBehindAck++;
            else late++;
          }
        }
      } catch (err) {
        if (!stopping) countError(err);
      }
    }
  }

  // every agent parked before the sends begin
  const polls = ids.map((id, i) => agent(id, i));
  await new Promise((r) => setTimeout(r, Math.max(2000, n)));
  const rssParked = rssMiB(adapter.pid);

  // the adapters' CPU (all replicas) from the first send to the last hand-over, per message
  const meter = cpuMeter({ adapters: adapters.map((a) => a.pid) });
  meter.start();
  let sent = 0;
  const started = performance.now();
  const sends = [];
  while (performance.now() - started < seconds * 1000) {
    const due = started + (sent * 1000) / rate;
    const ahead = due - performance.now();
    if (ahead > 0) await new Promise((r) => setTimeout(r, ahead));
    const to = ids[Math.floor(Math.random() * n)];
    sent++;
    sends.push(
      request(`${urlOf(sent)}/v1/messages`, {
        method: 'POST',
        headers: headers('boss'),
        body: JSON.stringify({
          idempotency_key: uuidv7(),
          to: `@${to}`,
          kind: 'status',
          payload: { n: sent },
        }),
        dispatcher,
      }).then(async (res) => {
        const body = await res.body.json();
        if (res.statusCode !== 201) {
          errors++;
          return;
        }
        // a poll that answered before this 201 came back counted it as 0 (sentAt unknown)
        sentAt.set(body.message_id, performance.now());
      }, countError),
    );
  }
  await Promise.all(sends);
  // the last hand-overs: at most the late bound past the last 201, and every copy counted
  const end = performance.now() + 2 * LATE_MS + wait * 1000;
  while (received < sent && performance.now() < end) await new Promise((r) => setTimeout(r, 50));
  const rss = rssMiB(adapter.pid);
  const { cpu_us } = meter.stop(received);
  stopping = true;
  for (const a of adapters) await a.stop();
  await db?.drop();
  await Promise.allSettled(polls);
  await dispatcher.close().catch(() => undefined);
  cleanup();
  const s = latencySummary(handOver);
  return {
    bench: 'agents',
    agents: n,
    replicas: Math.max(1, replicas),
    store: replicas > 0 ? 'postgresql' : 'sqlite',
    rate,
    seconds,
    sent,
    received,
    missing: sent - received,
    late_over_1s: late,
    late_not_polling: latePolling,
    late_behind_ack: lateBehindAck,
    adapter_late_over_1s: serverLate,
    adapter_hand_over_p99_ms: latencySummary(serverHandOver).p99_ms,
    errors,
    hand_over_p50_ms: s.p50_ms,
    hand_over_p99_ms: s.p99_ms,
    hand_over_max_ms: round(Math.max(0, ...handOver), 1),
    rss_parked_mib: round(rssParked, 0),
    rss_mib: round(rss, 0),
    adapter_cpu_us: cpu_us.adapters,
  };
}

console.log(
  `agents.mjs: ${cpus().length} cores, load ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}, cli ${process.env.AGW_BENCH_CLI ?? CLI}`,
);
const rows = [];
for (const n of counts) {
  const r = await run(n);
  console.log(JSON.stringify(r));
  rows.push(r);
}
console.log(
  '\n| agents | replicas | sent | missing | late > 1 s (parked poll) | behind an ack | p50 ms | p99 ms | max ms | adapter p99 ms | errors | RSS MiB | adapter CPU µs/msg |',
);
console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
for (const r of rows) {
  console.log(
    `| ${r.agents} | ${r.replicas} | ${r.sent} | ${r.missing} | ${r.late_over_1s} | ${r.late_behind_ack} | ${r.hand_over_p50_ms} | ${r.hand_over_p99_ms} | ${r.hand_over_max_ms} | ${r.adapter_hand_over_p99_ms} | ${r.errors} | ${r.rss_mib} | ${r.adapter_cpu_us} |`,
  );
}
