// Runs the benchmarks and writes bench/RESULTS.md from what they print.
//
//   npm run bench                      (from the repository root: builds, then runs this)
//   node bench/run.mjs --seconds 5     (each measurement's length; default 5)
//   node bench/run.mjs --before DIR    (also runs the path benchmarks against DIR, another
//                                       checkout, built: a before/after table from one run)
//   node bench/run.mjs --from FILE     (writes RESULTS.md from the JSON lines in FILE, an earlier
//                                       run's output or RESULTS.md itself, without running)
//   node bench/run.mjs --out FILE      (writes FILE instead of bench/RESULTS.md)
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    // write RESULTS.md from the JSON lines of an earlier run instead of running again
    from: { type: 'string' },
    before: { type: 'string' },
    out: { type: 'string' },
  },
});
const here = new URL('.', import.meta.url).pathname;

/** Runs one benchmark script; its JSON lines, each tagged with `build` (after: this checkout). */
function run(script, args, build = 'after') {
  const env =
    build === 'after'
      ? process.env
      : { ...process.env, AGW_BENCH_CLI: `${values.before}/dist/cli/main.js` };
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [here + script, ...args], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env,
    });
    const rows = [];
    let buf = '';
    child.stdout.on('data', (d) => {
      buf += d;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        const row = { ...JSON.parse(line), build };
        process.stdout.write(`${JSON.stringify(row)}\n`);
        rows.push(row);
      }
    });
    child.once('exit', (code) =>
      code === 0 ? resolve(rows) : reject(new Error(`${script} exited ${code}`)),
    );
  });
}

const seconds = values.seconds;
const rows = values.from
  ? readFileSync(values.from, 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l))
  : [
      ...(await run('path/send.mjs', ['--seconds', seconds])),
      ...(await run('peers/peers.mjs', ['--seconds', seconds])),
      ...(await run('path/e2e.mjs', ['--seconds', String(Number(seconds) * 2)])),
      ...(await run('peers/peers-e2e.mjs', ['--seconds', String(Number(seconds) * 2)])),
      ...(await run('path/fanout.mjs', ['--seconds', seconds, '--acks', 'on-poll'])),
      ...(await run('path/fanout.mjs', ['--seconds', seconds, '--acks', 'separate'])),
      ...(await run('peers/peers-fanout.mjs', ['--seconds', seconds])),
      ...(await run('store/stored.mjs', ['--seconds', seconds])),
      ...(await run('sidecar/sidecar.mjs', ['--seconds', seconds])),
      ...(await run('path/threads.mjs', ['--seconds', seconds])),
      ...(await run('store/replicas.mjs', ['--seconds', seconds])),
      ...(await run('path/trip.mjs', [
        '--seconds',
        String(Number(seconds) * 2),
        '--send-seconds',
        seconds,
        '--fsyncs',
      ])),
      ...(values.before
        ? [
            ...(await run(
              'path/trip.mjs',
              ['--seconds', String(Number(seconds) * 2), '--send-seconds', seconds, '--fsyncs'],
              'before',
            )),
            ...(await run('path/fanout.mjs', ['--seconds', seconds], 'before')),
            ...(await run('sidecar/sidecar.mjs', ['--seconds', seconds], 'before')),
          ]
        : []),
      ...(await run('path/send.mjs', [
        '--seconds',
        seconds,
        '--keys',
        'v4',
        '--floor',
        'no',
        '--sync',
        'full',
      ])),
    ];

const require = createRequire(import.meta.url);
const Database = require('../node_modules/better-sqlite3');
const sqlite = new Database(':memory:').prepare('select sqlite_version() v').get().v;
const pkg = (name) => require(`../node_modules/${name}/package.json`).version;
const disk = (() => {
  try {
    return execFileSync('df', ['-h', '--output=source,fstype', here], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .pop();
  } catch {
    return 'unknown';
  }
})();

const round = (x, digits) => Math.round(x * 10 ** digits) / 10 ** digits;
const find = (q) =>
  rows.find((r) => r.bench === 'send' && Object.entries(q).every(([k, v]) => r[k] === v));
const cell = (r) =>
  r ? `${r.per_second.toLocaleString('en')} | ${r.p50_ms} | ${r.p99_ms}` : '- | - | -';
const table = (label, q) =>
  [1, 16, 64].map((n) => `| ${label} | ${n} | ${cell(find({ ...q, inflight: n }))} |`).join('\n');
const commitRow = (sync, keys, n) => {
  const r = find({ target: 'adapter', sync, keys, inflight: n });
  return r
    ? `| ${sync} | ${keys} | ${n} | ${r.messages_per_commit} | ${r.commit_ms_avg} | ${Math.round(r.commit_share_of_wall * 100)}% |`
    : '';
};
const full1 = find({ target: 'adapter', sync: 'full', keys: 'v7', inflight: 1 });
const normal1 = find({ target: 'adapter', sync: 'normal', keys: 'v7', inflight: 1 });
const floor16 = find({ target: 'http-floor', inflight: 16 });
const full16 = find({ target: 'adapter', sync: 'full', keys: 'v7', inflight: 16 });
const full64 = find({ target: 'adapter', sync: 'full', keys: 'v7', inflight: 64 });
const floor64 = find({ target: 'http-floor', inflight: 64 });
const normal16 = find({ target: 'adapter', sync: 'normal', keys: 'v7', inflight: 16 });
const normal64 = find({ target: 'adapter', sync: 'normal', keys: 'v7', inflight: 64 });
const v4_64 = find({ target: 'adapter', sync: 'full', keys: 'v4', inflight: 64 });
const e2e = rows.find((r) => r.bench === 'e2e');
const peer = (target, inflight) =>
  rows.find((r) => r.bench === 'peer-send' && r.target === target && r.inflight === inflight);
// acks carried on the next poll, as the client library sends them (an older run: its only row)
const fan =
  rows.find((r) => r.bench === 'fanout' && r.acks === 'on-poll') ??
  rows.find((r) => r.bench === 'fanout');
const fanSeparate = rows.find(
  (r) => r.bench === 'fanout' && r.build !== 'before' && r.acks === 'separate',
);
const drain = rows.find((r) => r.bench === 'sidecar-drain');
const idle = rows.find((r) => r.bench === 'sidecar-idle');
const of = (build, bench, q = {}) =>
  rows.find(
    (r) =>
      r.build === build && r.bench === bench && Object.entries(q).every(([k, v]) => r[k] === v),
  );
const pgE2e = rows.find((r) => r.bench === 'peer-e2e' && r.target === 'postgresql');
/** The processes of the route through two sidecars. */
const SIDECAR_PATH = ['adapter', 'pm sidecar', 'qa sidecar'];
/** CPU per message of the processes a route uses (`keys`; all of them if not given). */
const cpuCell = (r, keys) =>
  r
    ? Object.entries(r.cpu_us)
        .filter(([k]) => keys === undefined || keys.includes(k))
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')
    : '-';
/** A row's server CPU per message in all (cpu_us summed over its processes), or undefined. */
const cpuTotal = (r, keys) => {
  if (!r?.cpu_us) return undefined;
  const vs = Object.entries(r.cpu_us)
    .filter(([k]) => keys === undefined || keys.includes(k))
    .map(([, v]) => v);
  return vs.length > 0 && vs.every((v) => typeof v === 'number')
    ? vs.reduce((a, b) => a + b, 0)
    : undefined;
};
/** `N µs` (with each process's share when more than one), or '-' for a row without CPU. */
const cpuUs = (r, keys) => {
  const total = cpuTotal(r, keys);
  if (total === undefined) return '-';
  const parts = Object.entries(r.cpu_us).filter(([k]) => keys === undefined || keys.includes(k));
  return parts.length > 1
    ? `${total.toLocaleString('en')} µs (${parts.map(([k, v]) => `${k} ${v}`).join(', ')})`
    : `${total.toLocaleString('en')} µs`;
};
const fsyncCell = (r, keys) =>
  r
    ? Object.entries(r.per_trip)
        .filter(([k]) => keys === undefined || keys.includes(k))
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')
    : '-';
const sendRatio = (build, n, route = 'sidecars') => {
  const sc = of(build, 'trip-send', { route, inflight: n });
  const d = of(build, 'trip-send', { route: 'direct', inflight: n });
  return sc && d ? `${round(sc.per_second / d.per_second, 2)}×` : '-';
};
// each build's first trip row of a route: acks on the poll where the build takes them (after),
// on their own where it does not (before)
const beforeAfter = [
  ...['direct', 'sidecars'].map((route) => [
    `end to end at 500 msg/s, ${route === 'direct' ? 'direct to the adapter' : 'through two sidecars'}, acks as the client sends them: p50 / p99 ms`,
    (b) => {
      const r = of(b, 'trip', { route });
      return r ? `${r.p50_ms} / ${r.p99_ms} (acks ${r.acks ?? 'separate'})` : '-';
    },
  ]),
  [
    'the same through two sidecars, acks on their own (POST /v1/acks) in both: p50 / p99 ms',
    (b) => {
      const r =
        of(b, 'trip', { route: 'sidecars', acks: 'separate' }) ??
        (b === 'before' ? of(b, 'trip', { route: 'sidecars' }) : undefined);
      return r ? `${r.p50_ms} / ${r.p99_ms}` : '-';
    },
  ],
  ...[1, 16, 64].map((n) => [
    `acked sends/s through the sidecar at ${n} in flight (and its ratio to direct)`,
    (b) => {
      const r = of(b, 'trip-send', { route: 'sidecars', inflight: n });
      return r ? `${r.per_second.toLocaleString('en')} (${sendRatio(b, n)})` : '-';
    },
  ]),
  [
    'fsyncs per trip through two sidecars, send to ack',
    (b) => fsyncCell(of(b, 'trip-fsyncs', { route: 'sidecars' }), SIDECAR_PATH),
  ],
  [
    'CPU µs per message, through two sidecars',
    (b) => cpuCell(of(b, 'trip', { route: 'sidecars' }), SIDECAR_PATH),
  ],
  [
    'fan-out to five: deliveries received and acked per second (acks as the client sends them)',
    (b) => {
      const r = of(b, 'fanout');
      return r
        ? `${r.deliveries_per_second_while_sending.toLocaleString('en')} (acks ${r.acks ?? 'separate'})`
        : '-';
    },
  ],
  [
    'sidecar RSS 2 s after start / idle (30 s), MiB',
    (b) => {
      const r = of(b, 'sidecar-idle');
      return r ? `${r.rss_2s_mib ?? '-'} / ${r.idle_rss_mib}` : '-';
    },
  ],
];

const md = `# Benchmark results

Written by \`bench/run.mjs\` from the run below; numbers from one run on one machine. The machine
is shared and noisy: compare the rows of one run as ratios, not with numbers from elsewhere.

- date: ${new Date().toISOString()}
- machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, disk ${disk}
- Node ${process.version}, SQLite ${sqlite} (better-sqlite3 ${pkg('better-sqlite3')}), undici ${pkg('undici')} (client)
- each figure: ${seconds} s measured after 1 s of warm-up; closed loop of N requests in flight over an
  undici Pool of N connections; client and server on the same 2 cores

## Acknowledged sends (POST /v1/messages, ~1 KiB payload, direct message to one recipient)

An ack is a 201 sent after the COMMIT holding the message returned. With \`full\` the WAL was
fsynced before that; with \`normal\` it was not (a process crash loses nothing, a power loss can).
Keys are UUIDv7 (time-ordered, as the sidecar and client make them) unless marked v4.

| target | in flight | acked msgs/s | p50 ms | p99 ms |
|---|---|---|---|---|
${table('bare HTTP floor (node:http, no work)', { target: 'http-floor' })}
${table('adapter, synchronous=FULL', { target: 'adapter', sync: 'full', keys: 'v7' })}
${table('adapter, synchronous=NORMAL', { target: 'adapter', sync: 'normal', keys: 'v7' })}
${table('adapter, FULL, random v4 keys', { target: 'adapter', sync: 'full', keys: 'v4' })}

### Beside the peers (same run, same client design, same ~1 KiB payload)

Each cell: acked msgs/s, p50 and p99 of the ack, and the server's CPU (user + system time of
all its processes over the measured part, from /proc) per acked send; \`-\` where the row's
benchmark does not measure it.

| system | fsync before the ack | 1 in flight | 16 in flight | 64 in flight |
|---|---|---|---|---|
${[
  [
    'agent-gateway adapter, FULL',
    'yes',
    (n) => find({ target: 'adapter', sync: 'full', keys: 'v7', inflight: n }),
  ],
  [
    'agent-gateway adapter, NORMAL',
    'no (WAL synced at checkpoints)',
    (n) => find({ target: 'adapter', sync: 'normal', keys: 'v7', inflight: n }),
  ],
  [
    'floor: one fdatasync per group, blocking the loop (bench/lib/log-floor.mjs)',
    'yes',
    (n) => find({ target: 'log-floor-sync', inflight: n }),
  ],
  [
    'floor: the same, the write and fdatasync on the thread pool',
    'yes',
    (n) => find({ target: 'log-floor-async', inflight: n }),
  ],
  [
    'floor: node:http, no work (bench/lib/floor-server.mjs)',
    'no',
    (n) => find({ target: 'http-floor', inflight: n }),
  ],
  ...[
    ['NATS JetStream (file stream, PubAck)', 'nats-jetstream'],
    ['RabbitMQ (quorum queue, confirms)', 'rabbitmq-quorum'],
    [
      'PostgreSQL as an acked queue, its send side: INSERT + NOTIFY per transaction (a listener connected)',
      'postgresql-queue',
    ],
    [
      "PostgreSQL INSERT per transaction (the acked queue's send side without its NOTIFY)",
      'postgresql',
    ],
  ].map(([label, target]) => {
    const any = rows.find((r) => r.bench === 'peer-send' && r.target === target);
    return [
      label,
      any ? (any.fsync_per_ack ? 'yes' : 'no (synced on an interval)') : '?',
      (n) => peer(target, n),
    ];
  }),
]
  .map(
    ([label, fsync, get]) =>
      `| ${label} | ${fsync} | ${[1, 16, 64]
        .map((n) => {
          const r = get(n);
          return r
            ? `${r.per_second.toLocaleString('en')}/s, p50 ${r.p50_ms} ms, p99 ${r.p99_ms} ms, CPU ${cpuUs(r)}`
            : '-';
        })
        .join(' | ')} |`,
  )
  .join('\n')}

Ours as a ratio to the best peer that also fsyncs before its ack, and to the best peer of all:
${[1, 16, 64]
  .map((n) => {
    const ours = find({ target: 'adapter', sync: 'full', keys: 'v7', inflight: n });
    const peers = rows.filter((r) => r.bench === 'peer-send' && r.inflight === n);
    const durable = peers.filter((r) => r.fsync_per_ack);
    const best = (xs) =>
      xs.reduce((a, b) => (b.per_second > (a?.per_second ?? 0) ? b : a), undefined);
    const bd = best(durable);
    const ba = best(peers);
    if (!ours || !bd || !ba) return '';
    return `- ${n} in flight: ${round(ours.per_second / bd.per_second, 2)}× ${bd.target}, ${round(ours.per_second / ba.per_second, 2)}× ${ba.target}`;
  })
  .join('\n')}

The floors are not peers: they do none of the adapter's work. The log floor is the write path
the adapter's profile points to (below), one append per message and one fdatasync per group,
with its key and sequence lookups in memory, behind the same node:http server. Its distance to
RabbitMQ is what the Node process and its HTTP requests cost whatever the store does:
${[1, 16, 64]
  .map((n) => {
    const rabbit = peer('rabbitmq-quorum', n);
    const f = ['log-floor-sync', 'log-floor-async', 'http-floor'].map((t) =>
      find({ target: t, inflight: n }),
    );
    const ours = find({ target: 'adapter', sync: 'full', keys: 'v7', inflight: n });
    if (!rabbit || f.some((x) => !x) || !ours) return '';
    const r = (x) => `${round(x.per_second / rabbit.per_second, 2)}×`;
    return `- ${n} in flight, as a ratio to RabbitMQ quorum's acked sends: log floor ${r(f[0])} (on the pool ${r(f[1])}), HTTP floor ${r(f[2])}, the adapter ${r(ours)}`;
  })
  .join('\n')}

### Against the bar

The write-path work set the bar for FULL at NATS JetStream's figures on this kind of machine,
about 21,000 and 28,000 acked msgs/s at 16 and 64 in flight (JetStream does not fsync per
message), with the bare HTTP floor then at 31,000 to 34,000. Floors differ from run to run, so
compare shares of the floor: JetStream's were about 65% and 85%. Ours in this run, with an fsync
behind every ack: ${full16 && floor16 ? Math.round((full16.per_second / floor16.per_second) * 100) : '?'}% at 16 and ${full64 && floor64 ? Math.round((full64.per_second / floor64.per_second) * 100) : '?'}% at 64 (NORMAL: ${normal16 && floor16 ? Math.round((normal16.per_second / floor16.per_second) * 100) : '?'}% and ${normal64 && floor64 ? Math.round((normal64.per_second / floor64.per_second) * 100) : '?'}%). We trail it; the table above has
JetStream measured beside us in this run.

## Where the time goes

| sync | keys | in flight | messages per commit | ms per commit | share of wall time in commits |
|---|---|---|---|---|---|
${['full', 'normal'].flatMap((s) => [1, 16, 64].map((n) => commitRow(s, 'v7', n))).join('\n')}
${[1, 16, 64].map((n) => commitRow('full', 'v4', n)).join('\n')}

- **The commit.** A commit blocks the event loop (better-sqlite3 is synchronous): statements,
  WAL frame writes and, with FULL, the fsync. Alone, a FULL commit takes ${full1?.commit_ms_avg} ms against
  ${normal1?.commit_ms_avg} ms for NORMAL, so the fsync costs about ${full1 && normal1 ? Math.round((full1.commit_ms_avg - normal1.commit_ms_avg) * 1000) : '?'} µs here. Group commit spreads it: at 16 in flight a
  commit carries ${full16?.messages_per_commit} messages, at 64 about ${full64?.messages_per_commit}; the loop spends roughly half its time
  in commits. With 16 in flight the groups cannot grow past ~8: half the requests are on
  their way back to the client while the other half commit. One turn of the loop then costs
  the commit plus the HTTP work of a group, both on one thread.
- **A profile** of the adapter at 16 in flight with FULL (\`node --cpu-prof\`, 5 s, 13,143 msgs/s,
  taken 2026-11-29 on this machine): COMMIT (WAL frame writes and fsync) 37% of the main thread,
  the statements inside the transaction 13% (~12 µs a message: idempotency lookup, sequence
  increment, message row, delivery row), writing responses (writev) 8%, the idempotency
  fingerprint (canonical JSON and SHA-256) 7.5%, JSON parsing and zod 3%, GC 3%, idle 12%.
  The bare HTTP floor does ${floor16?.per_second.toLocaleString('en')}/s at 16 in flight with no work at all.
- **Random keys.** The unique index on (sender, idempotency_key) puts each random v4 key on its
  own B-tree page, so every message dirties (and writes to the WAL) one more 4 KiB page:
  ${v4_64 ? v4_64.per_second.toLocaleString('en') : '?'}/s against ${full64?.per_second.toLocaleString('en')}/s with v7 keys at 64 in flight, and the gap widens as the
  table grows. The sidecar and client generate UUIDv7 keys for this reason; any key works.
- **Tried and not kept: a writer thread.** Moving the connection to a worker thread (the main
  thread reads requests while the writer commits) gave the same throughput within noise at 16
  and 64 in flight and ~0.05 ms more latency at 1. In that run the main thread idled half the
  time and the writer a third: with the client process on the same 2 cores, the machine's CPU
  and the fsync latency, not the one loop, set the pace. Not worth a second thread.
- **Not done on purpose: an fsync of our own.** Committing at NORMAL and fsyncing the WAL on the
  libuv pool before acking would overlap commits with fsyncs, but it makes a commit visible to
  readers before it is durable: a power loss could take back a message a reader already saw
  and give its sequence number to another. FULL makes a commit visible only after its fsync.
  Measured once more (2026-12-02) as a prototype that kept every answer behind the fsync (each
  group's answers and wake-ups released in commit order after its fsync): acked sends at 16 in
  flight were 5,743-9,074/s against 6,301-7,439/s at FULL over three alternating pairs, at 64
  8,238-13,511/s against 7,927-12,975/s, and 1 in flight 3-4% slower. The gain is inside this
  machine's noise; reads outside the group (replay, a duplicate's 200) would also need a
  barrier. Not built.

## Delivery

| figure | value |
|---|---|
| end-to-end latency, send to long-poll receive, at ${e2e?.rate} msg/s (p50 / p99 / max) | ${e2e?.p50_ms} / ${e2e?.p99_ms} / ${e2e?.max_ms} ms (${e2e?.received} of ${e2e?.sent} received) |
| fan-out to a 5-member channel, 16 in flight: messages accepted | ${fan?.messages_per_second?.toLocaleString('en')}/s |
| fan-out: deliveries received and acked by the five, acks carried on the next poll | ${fan?.deliveries_per_second_while_sending?.toLocaleString('en')}/s |
| the same, acks on their own (POST /v1/acks before the next poll) | ${fanSeparate?.deliveries_per_second_while_sending?.toLocaleString('en') ?? '-'}/s |
${rows
  .filter((r) => r.bench === 'peer-fanout')
  .map(
    (r) =>
      `| fan-out, ${r.target} (same shape): messages / deliveries | ${r.messages_per_second.toLocaleString('en')}/s / ${r.deliveries_per_second_while_sending.toLocaleString('en')}/s (ours: ${fan ? round(fan.deliveries_per_second_while_sending / r.deliveries_per_second_while_sending, 2) : '-'}×)${r.cpu_us ? `; server CPU ${cpuUs(r)} per message accepted` : ''} |`,
  )
  .join('\n')}

End-to-end beside the peers, same rate, same process design (sender and consumer in one client
process; each peer's durable path). Server CPU is the user + system time of the server's
processes (the adapter, and the sidecars where the route has them; all of a peer's processes,
PostgreSQL's backends included) per delivered message, from /proc; \`-\` where the row's
benchmark does not measure it. The trip.mjs rows are from the path table below (acks on the next
poll), at the same rate.

| system | p50 ms | p99 ms | our p50 as a ratio to it | server CPU per delivered message |
|---|---|---|---|---|
${(() => {
  const pe = (target) => rows.find((r) => r.bench === 'peer-e2e' && r.target === target);
  const queue = pe('postgresql-queue');
  // ours: our own rows, no ratio; keys: the processes whose CPU counts; cpu: the cell's text
  return [
    { label: 'agent-gateway (send, long-poll inbox, ack)', r: e2e },
    {
      label: 'agent-gateway direct to the adapter (trip.mjs)',
      r: of('after', 'trip', { route: 'direct', acks: 'on-poll' }),
      ours: true,
      keys: ['adapter'],
    },
    {
      label: 'agent-gateway through two sidecars (trip.mjs)',
      r: of('after', 'trip', { route: 'sidecars', acks: 'on-poll' }),
      ours: true,
      keys: SIDECAR_PATH,
    },
    { label: 'NATS JetStream (PubAck, ordered consumer)', r: pe('nats-jetstream') },
    { label: 'RabbitMQ (quorum queue, confirms, consumer acks)', r: pe('rabbitmq-quorum') },
    {
      label: `PostgreSQL as an acked queue (INSERT + NOTIFY; ${queue?.consumers ?? '?'} consumers: SELECT ... FOR UPDATE SKIP LOCKED, DELETE, COMMIT), to the row in hand`,
      r: queue,
    },
    {
      label: "the same, to the DELETE's commit (its ack)",
      r: queue && { p50_ms: queue.ack_p50_ms, p99_ms: queue.ack_p99_ms },
      cpu: 'the same messages',
    },
    {
      label: 'PostgreSQL (INSERT + pg_notify per transaction, LISTEN; no ack)',
      r: pe('postgresql'),
    },
  ]
    .filter(({ r }) => r !== undefined)
    .map(
      ({ label, r, ours, keys, cpu }) =>
        `| ${label} | ${r.p50_ms} | ${r.p99_ms} | ${e2e && !ours ? `${round(e2e.p50_ms / r.p50_ms, 2)}×` : '-'} | ${cpu ?? cpuUs(r, keys)} |`,
    )
    .join('\n');
})()}

${(() => {
  const path = cpuTotal(of('after', 'trip', { route: 'sidecars', acks: 'on-poll' }), SIDECAR_PATH);
  const adapterOnly = cpuTotal(of('after', 'trip', { route: 'sidecars', acks: 'on-poll' }), [
    'adapter',
  ]);
  const peers = [
    ['RabbitMQ quorum', 'rabbitmq-quorum'],
    ["PostgreSQL's acked queue", 'postgresql-queue'],
  ]
    .map(([label, target]) => [
      label,
      cpuTotal(rows.find((r) => r.bench === 'peer-e2e' && r.target === target)),
    ])
    .filter(([, v]) => v);
  const sc = of('after', 'trip', { route: 'sidecars', acks: 'on-poll' });
  // the better (lower p50) of RabbitMQ quorum and PostgreSQL's acked queue, to the row in hand
  const better = ['rabbitmq-quorum', 'postgresql-queue']
    .map((target) => rows.find((r) => r.bench === 'peer-e2e' && r.target === target))
    .filter((r) => r !== undefined)
    .sort((a, b) => a.p50_ms - b.p50_ms)[0];
  return [
    sc && better
      ? `The agent path end to end (two sidecars) as a ratio to the better of RabbitMQ quorum and PostgreSQL's acked queue (${better.target}, p50 ${better.p50_ms} / p99 ${better.p99_ms} ms): p50 ${round(sc.p50_ms / better.p50_ms, 2)}×, p99 ${round(sc.p99_ms / better.p99_ms, 2)}×.`
      : '',
    path !== undefined && peers.length > 0
      ? `Server CPU per delivered message on the agent path (adapter and both sidecars, ${path.toLocaleString('en')} µs; the adapter alone ${adapterOnly?.toLocaleString('en') ?? '?'} µs) as a ratio to ${peers.map(([label, v]) => `${label}'s: ${round(path / v, 2)}×`).join(', ')}.`
      : '',
  ]
    .filter(Boolean)
    .join('\n\n');
})()}

An end-to-end trip here is one commit when the receiver's poll is parked as the message arrives:
the poll's lease is queued into the send's own group (docs/design/delivery.md), so the message
and its hand-over share one fsync; a poll that arrives later leases in a commit of its own,
NORMAL (docs/design/durability.md: a lost lease is a redelivery). The ack rides on the next
poll and shares its commit.

## Stored messages

Sends at 16 in flight on a database already holding N messages (~1 KiB payloads, seeded through
the store, all delivered), and the time from spawning the adapter to its first 200 from /health
(WAL recovery, migrations, the first sweep; \`PRAGMA quick_check\` over the whole file runs after
ready, in its worker) with the file in the page cache.

| stored | database | restart to ready | acked msgs/s | p50 ms | p99 ms |
|---|---|---|---|---|---|
${rows
  .filter((r) => r.bench === 'stored')
  .map(
    (r) =>
      `| ${r.stored.toLocaleString('en')} | ${r.db_mib} MiB | ${r.restart_to_ready_ms} ms | ${r.per_second.toLocaleString('en')} | ${r.p50_ms} | ${r.p99_ms} |`,
  )
  .join('\n')}

## The sidecar

| figure | via the sidecar | direct to the adapter | added |
|---|---|---|---|
${[1, 16]
  .map((n) => {
    const a = rows.find(
      (r) => r.bench === 'sidecar-latency' && r.target === 'adapter' && r.inflight === n,
    );
    const sc = rows.find(
      (r) => r.bench === 'sidecar-latency' && r.target === 'sidecar' && r.inflight === n,
    );
    if (!a || !sc) return '';
    return `| send p50 / p99 at ${n} in flight | ${sc.p50_ms} / ${sc.p99_ms} ms | ${a.p50_ms} / ${a.p99_ms} ms | +${round(sc.p50_ms - a.p50_ms, 3)} / +${round(sc.p99_ms - a.p99_ms, 3)} ms |`;
  })
  .join('\n')}

- ${drain ? `1,000 queued messages: ${drain.adapter_back_to_outbox_empty_ms} ms from the adapter being back (ready) to an empty outbox, with AGW_BREAKER_BASE_MS=${drain.breaker_base_ms} and AGW_BREAKER_MAX_MS=${drain.breaker_max_ms}; with the defaults (1 s doubling to 60 s, full jitter) the wait for the next probe dominates` : ''}
- ${idle ? `start to listening: ${idle.start_to_listening_ms} ms; RSS 2 s after start ${idle.rss_2s_mib ?? '?'} MiB, idle (30 s after start) ${idle.idle_rss_mib} MiB, with NODE_OPTIONS \`${idle.node_options ?? ''}\` as the image sets them` : ''}

The aim is +0.25 ms p50 and +0.6 ms p99 (Dapr's sidecar: +0.53 / +1.72 ms). Where the
sidecar's time goes: it parses and checks the envelope (so a bad one is never queued), then
makes one more loopback HTTP round trip through an undici Pool and the breaker. Under load its
sends travel together (at most two requests in flight, the rest gathered into the next batch),
so at 16 and 64 in flight it spares the adapter most of its HTTP work: the table of the path
agents use below compares it with sending direct.

## Threads and budgets on the send path

\`bench/path/threads.mjs\`: acked sends at 16 in flight, plain (each starts a thread) against replies
in long threads (each names the previous message of its thread; the orchestrator continues a
thread before a budget would refuse), same adapter, same run.

| sends | acked msgs/s | p50 ms | p99 ms | messages per commit |
|---|---|---|---|---|
${rows
  .filter((r) => r.bench === 'threads' && r.build === 'after' && r.per_second !== undefined)
  .map(
    (r) =>
      `| ${r.kind} | ${r.per_second.toLocaleString('en')} | ${r.p50_ms} | ${r.p99_ms} | ${r.messages_per_commit} |`,
  )
  .join('\n')}

## The path agents use: agent → sidecar → adapter → sidecar → agent

\`bench/path/trip.mjs\`: pm's sidecar takes the sends, qa's sidecar serves qa's long polls and acks; the
same sends direct to the adapter beside it. CPU is each process's user + system time over the
measured part, per message; fsyncs are counted by strace in each process over 500 trips sent
one at a time.

| figure | direct to the adapter | through two bare proxies | through two sidecars |
|---|---|---|---|
${(() => {
  const routes = ['direct', 'proxies', 'sidecars'];
  const trips = (acks) => routes.map((route) => of('after', 'trip', { route, acks }));
  const [d, px, sc] = trips('on-poll');
  const e2eCell = (r) => (r ? `${r.p50_ms} / ${r.p99_ms} / ${r.max_ms}` : '-');
  const pgCell = (r) =>
    r && pgE2e
      ? `${round(r.p50_ms / pgE2e.p50_ms, 2)}× / ${round(r.p99_ms / pgE2e.p99_ms, 2)}×`
      : '-';
  const addedCell = (r) => (r && d ? `+${round(r.p50_ms - d.p50_ms, 3)} ms` : '-');
  const row = (label, cells) => `| ${label} | ${cells.join(' | ')} |`;
  return [
    row(
      `end to end at ${sc?.rate ?? '?'} msg/s, acks carried on the next poll: p50 / p99 / max ms`,
      [d, px, sc].map(e2eCell),
    ),
    row('the same, acks on their own before the next poll', trips('separate').map(e2eCell)),
    row(
      `the same, as a ratio to PostgreSQL LISTEN/NOTIFY's p50 / p99 (${pgE2e?.p50_ms} / ${pgE2e?.p99_ms} ms)`,
      [d, px, sc].map(pgCell),
    ),
    row('p50 added to the direct trip (acks on the poll)', ['-', addedCell(px), addedCell(sc)]),
    row(
      'deliveries per poll answer (acks on the poll / on their own)',
      trips('separate').map((sep, i) => {
        const on = [d, px, sc][i];
        return on?.per_poll === undefined ? '-' : `${on.per_poll} / ${sep?.per_poll ?? '-'}`;
      }),
    ),
    ...[1, 16, 64].map((n) => {
      const sends = routes.map((route) => of('after', 'trip-send', { route, inflight: n }));
      return row(
        `acked sends at ${n} in flight: msgs/s, p50 / p99 ms`,
        sends.map((r, i) =>
          r
            ? `${r.per_second.toLocaleString('en')}, ${r.p50_ms} / ${r.p99_ms}${i > 0 ? ` (${sendRatio('after', n, routes[i])})` : ''}`
            : '-',
        ),
      );
    }),
    row('fsyncs per trip, send to ack', [
      fsyncCell(of('after', 'trip-fsyncs', { route: 'direct' }), ['adapter']),
      '-',
      fsyncCell(of('after', 'trip-fsyncs', { route: 'sidecars' }), SIDECAR_PATH),
    ]),
    row(`CPU µs per message at ${sc?.rate ?? '?'} msg/s`, [
      cpuCell(d, ['adapter']),
      cpuCell(px, ['adapter', 'research proxy', 'orchestrator proxy']),
      cpuCell(sc, SIDECAR_PATH),
    ]),
  ].join('\n');
})()}

${(() => {
  const at = (route) => of('after', 'trip', { route, acks: 'on-poll' });
  const [d, px, sc] = ['direct', 'proxies', 'sidecars'].map(at);
  if (!d || !px || !sc || !pgE2e) return '';
  const hops = round(px.p50_ms - d.p50_ms, 3);
  const ours = round(sc.p50_ms - px.p50_ms, 3);
  return `The bare proxies (\`bench/lib/bare-proxy.mjs\`: node:http in, an undici Pool out, no check, no
store, no breaker) stand where the sidecars stand, so their column is the floor of the path's
shape: what two more loopback HTTP hops in Node cost with no work at all. In this run they added
${hops} ms to the direct trip's p50, and the sidecars' p50 was ${Math.abs(ours)} ms ${ours >= 0 ? 'above' : 'below'} theirs. The aim puts
the whole path at or under PostgreSQL's p50 (${pgE2e.p50_ms} ms here): ${
    pgE2e.p50_ms > d.p50_ms
      ? `a margin of ${round(pgE2e.p50_ms - d.p50_ms, 3)} ms over the direct trip for both hops and both sidecars' work, ${hops > pgE2e.p50_ms - d.p50_ms ? 'less than the two bare hops take alone' : 'more than the two bare hops take alone'}`
      : `in this run the direct trip alone was ${round(d.p50_ms - pgE2e.p50_ms, 3)} ms over it, before any hop`
  }.

The trip's p50 follows the receiver's poll cycle more than any one process's work: at ${sc.rate}
msg/s a message comes every ${round(1000 / sc.rate, 1)} ms, and one that arrives while the receiver's
next poll is still on its way back to the adapter waits for it. With one delivery per answer the
next poll is parked before the next message; a path slower by a fraction of a millisecond tips
into answers of two or more, and every message then waits a part of a poll's round trip (the
row above; runs of the same build fall into either regime, which is most of the noise between
them). PostgreSQL's LISTEN/NOTIFY pushes each notification on an open connection, with no request
between them. And a lane hands over in order, one lease at a time: a message waits for the ack
of the one before it in its lane, and that ack comes on the agent's next poll through its
sidecar. RabbitMQ's consumer takes the next message before it acks the last (its prefetch).
So the trip's p50 at a given rate is about the poll-and-ack cycle through both sidecars, not one
process's work: a contract choice (strict order per recipient and channel, and an acked
message never handed over again), not a cost to shave.

Where the sidecars' CPU goes (\`node --cpu-prof\` of both during the sidecars' trip at 500
msg/s, 2026-12-07, shares of each one's busy time):
- pm's sidecar, which takes the sends (about 620-790 µs per message):
  - socket writes (writev, mostly the kernel's loopback path): 17 %;
  - node's HTTP server and streams: 28 %;
  - undici, the client to the adapter: 10 %;
  - GC and V8: 13 %;
  - our code: 18 % (routing, the envelope check, the forwarder and its batches, the breaker);
  - zod: 3 %; opossum: 2 %.
- qa's sidecar, which serves the polls (about 530-590 µs per message):
  - node's HTTP and undici: 28 %;
  - socket writes: 10 %;
  - our code: 20 %;
  - the marks' commit before each answer (better-sqlite3, NORMAL): 9 %.
- A bare proxy costs about 300 µs per message. The sidecars' own work over it is spread thin:
  no function holds more than 3 % of a sidecar's time. The rest is two HTTP exchanges per
  message in each sidecar, one with the agent and one with the adapter.
`;
})()}

${
  values.before || rows.some((r) => r.build === 'before')
    ? `### Before and after, in this run

"Before" is the checkout given with \`--before\` (${values.before ?? 'an earlier checkout'}), run in the same
session on the same machine, right after "after".

| figure | before | after |
|---|---|---|
${beforeAfter.map(([label, get]) => `| ${label} | ${get('before')} | ${get('after')} |`).join('\n')}
`
    : ''
}
## Several adapters on PostgreSQL

\`bench/store/replicas.mjs\`: the adapter with \`AGW_DB\` a PostgreSQL URL, through one replica and through
three (the senders' loops spread over them), beside the SQLite adapter and PostgreSQL itself doing
one INSERT per transaction, all in this run (FULL: each message's commit is fsynced before its 201).
End to end: pm sends at a fixed rate through one replica, research long-polls and acks through another;
the wake is the time from a message's 201 to the parked poll's answer.

| target | 1 in flight | 16 in flight | 64 in flight |
|---|---|---|---|
${[
  ['SQLite adapter (one)', { target: 'adapter-sqlite' }],
  ['PostgreSQL: INSERT per transaction (the peer row)', { target: 'postgres-insert' }],
  ['adapter on PostgreSQL, one replica', { target: 'adapter-postgres', replicas: 1 }],
  ['adapter on PostgreSQL, three replicas', { target: 'adapter-postgres', replicas: 3 }],
]
  .map(
    ([label, q]) =>
      `| ${label} | ${[1, 16, 64]
        .map((n) => {
          const r = of('after', 'replicas', { ...q, inflight: n });
          return r ? `${r.per_second.toLocaleString('en')}/s, p50 ${r.p50_ms} ms` : '-';
        })
        .join(' | ')} |`,
  )
  .join('\n')}

${(() => {
  const one = of('after', 'replicas', { target: 'adapter-postgres', replicas: 1, inflight: 16 });
  const peerRow = of('after', 'replicas', { target: 'postgres-insert', inflight: 16 });
  return one && peerRow
    ? `One adapter on PostgreSQL at 16 in flight: ${round(one.per_second / peerRow.per_second, 2)}× the INSERT-per-transaction row.`
    : '';
})()}

| end to end | rate msg/s | received | p50 ms | p99 ms | wake p50 ms | wake p99 ms |
|---|---|---|---|---|---|---|
${rows
  .filter((r) => r.bench === 'replicas' && r.e2e && r.build === 'after')
  .map(
    (r) =>
      `| ${r.target}${r.cross_replica ? ', sender and receiver on different replicas' : ''} | ${r.rate} | ${r.received}/${r.sent} | ${r.p50_ms} | ${r.p99_ms} | ${r.wake_p50_ms} | ${r.wake_p99_ms} |`,
  )
  .join('\n')}

Three replicas on this 2-core machine share its two cores with PostgreSQL and the client: they
prove the guarantees hold across replicas (test/replicas/), not speed. With a machine per replica
the HTTP and JSON work (most of an adapter's CPU) would spread over them, while the database's
commit rate, one WAL flush per group of each replica, stays the ceiling.

## Raw measurements

\`\`\`
${rows.map((r) => JSON.stringify(r)).join('\n')}
\`\`\`
`;
writeFileSync(values.out ?? new URL('./RESULTS.md', import.meta.url), md);
console.log(`wrote ${values.out ?? 'bench/RESULTS.md'}`);
