// Do 100,000 scheduled messages waiting in the store slow ordinary sends? (docs/design/time.md:
// "a million messages waiting cost no more while idle than none".) One adapter (AGW_SYNC full)
// on a fresh store, in one run:
//   1. before: after a warm-up (--warmup s of sends at 16 in flight), acked plain sends (pm ->
//      @research, ~1 KiB) at 1 and 16 in flight, --rounds times, and the adapter's idle CPU
//      (utime+stime of /proc/<pid>/stat) over --idle-seconds;
//   2. --scheduled messages sent through the API as a sender would (POST /v1/messages/batch, 100
//      a batch, 4 in flight), all from pm (the sender measured: its key probes go through them),
//      deliver_at --days ahead and one second apart, so none fires during the run;
//   3. after: the idle CPU with them waiting, then --rounds rounds of the same plain sends
//      alternating with sends of a scheduled message itself (the same envelope with deliver_at
//      --days ahead) at 1 and 16 in flight;
//   4. the due timer past setTimeout's limit: a second, fresh adapter holding one scheduled
//      message --far-days ahead (more than 2^31-1 ms, ~24.8 days), its idle CPU.
// One JSON line per measurement, then markdown tables of the medians over the rounds, with
// ratios. Copies to @research pile up pending (nobody polls): the "after" sends find a few
// thousand more messages and copies in the store than the "before" ones, besides the scheduled.
// --store pg runs the same against a fresh database on --url; while the PostgreSQL store keeps
// no time, its first scheduled send is refused (400 naming deliver_at) and the run stops there.
//
//   node bench/store/scheduled.mjs [--store sqlite|pg] [--scheduled 100000] [--seconds 3]
//     [--inflight 1,16] [--rounds 3] [--warmup 5] [--idle-seconds 5] [--days 2] [--far-days 30]
//     [--url postgres://postgres@127.0.0.1:5432/postgres]
import { existsSync, readFileSync, statSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import {
  benchDir,
  CLI,
  closedLoop,
  pgDatabase,
  round,
  startProcess,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    scheduled: { type: 'string', default: '100000' },
    seconds: { type: 'string', default: '3' },
    inflight: { type: 'string', default: '1,16' },
    rounds: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '5' },
    'idle-seconds': { type: 'string', default: '5' },
    days: { type: 'string', default: '2' },
    'far-days': { type: 'string', default: '30' },
    url: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/postgres' },
  },
});
if (!['sqlite', 'pg'].includes(values.store)) throw new Error('--store: sqlite or pg');
const seconds = Number(values.seconds);
const levels = values.inflight.split(',').map(Number);
const scheduledCount = Number(values.scheduled);
const rounds = Number(values.rounds);
const warmupSeconds = Number(values.warmup);
const idleSeconds = Number(values['idle-seconds']);
const DAY = 86_400_000;
const text = 'x'.repeat(1000);
const emit = (o) => console.log(JSON.stringify({ bench: 'scheduled', store: values.store, ...o }));
const headers = { authorization: `Bearer ${tokenOf('pm')}`, 'content-type': 'application/json' };
const iso = (ms) => new Date(ms).toISOString();

/** An adapter on a store of its own (a temp SQLite file, or a fresh PostgreSQL database). */
async function adapter(env = {}) {
  const { dir, topology, cleanup } = benchDir();
  const pgDb = values.store === 'pg' ? await pgDatabase(values.url) : undefined;
  const db = pgDb?.url ?? join(dir, 'adapter.db');
  const proc = await startProcess(
    [
      CLI,
      'adapter',
      '--listen',
      '127.0.0.1:0',
      '--topology',
      topology,
      '--db',
      db,
      // this measures the write path, not eviction: @research's copies stay pending
      '--queue-capacity',
      '1000000',
    ],
    { AGW_SEND_RATE: '0', AGW_SYNC: 'full', ...env },
  );
  return {
    ...proc,
    db,
    /** Bytes of the SQLite file and its WAL; undefined on PostgreSQL. */
    bytes: () =>
      pgDb === undefined
        ? [db, `${db}-wal`].reduce((s, f) => s + (existsSync(f) ? statSync(f).size : 0), 0)
        : undefined,
    close: async () => {
      await proc.stop();
      await pgDb?.drop();
      cleanup();
    },
  };
}

/** CPU seconds (user + system) the process has used: /proc/<pid>/stat fields 14 and 15. */
function cpuSeconds(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // field 3 is fields[0]
  return (Number(fields[11]) + Number(fields[12])) / 100; // USER_HZ: 100 on Linux
}

/** The adapter's CPU while nobody sends, as % of one core, after a second to settle. */
async function idleCpu(pid) {
  await new Promise((r) => setTimeout(r, 1000));
  const c0 = cpuSeconds(pid);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, idleSeconds * 1000));
  const wall = (performance.now() - t0) / 1000;
  return { idle_cpu_pct: round(((cpuSeconds(pid) - c0) / wall) * 100, 2), idle_s: round(wall, 2) };
}

function envelope(deliverAt) {
  return {
    idempotency_key: uuidv7(),
    to: '@research',
    kind: 'status',
    payload: { text },
    ...(deliverAt === undefined ? {} : { deliver_at: iso(deliverAt) }),
  };
}

/** Acked sends at `inflight`: plain, or each scheduled --days ahead (201 with a null sequence). */
function sends(url, inflight, scheduled, forSeconds = seconds) {
  const at = Date.now() + Number(values.days) * DAY;
  return closedLoop(url, {
    inflight,
    seconds: forSeconds,
    makeRequest: () => ({
      method: 'POST',
      path: '/v1/messages',
      headers,
      body: JSON.stringify(envelope(scheduled ? at + Math.floor(Math.random() * DAY) : undefined)),
    }),
    check: (status, body) =>
      status === 201 && body.includes('"channel_sequence_id":null') === scheduled,
  });
}

/** POSTs a batch; throws on anything but 201 for every item. */
async function batch(pool, messages) {
  const res = await pool.request({
    method: 'POST',
    path: '/v1/messages/batch',
    headers,
    body: JSON.stringify({ messages }),
  });
  const body = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`batch: ${res.statusCode} ${body}`);
  const refused = JSON.parse(body).results.find((r) => r.status !== 201);
  if (refused !== undefined) throw new Error(`batch item: ${JSON.stringify(refused)}`);
  return JSON.parse(body).results;
}

/** `n` scheduled messages from pm, one second apart from `from` on, 100 a batch, 4 in flight. */
async function schedule(url, n, from) {
  const pool = new Pool(url, { connections: 4, keepAliveTimeout: 60_000 });
  const recipients = ['@research', '@qa', '@engineering', 'product'];
  let next = 0;
  let last;
  try {
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < n) {
          const start = next;
          next = Math.min(n, next + 100);
          const results = await batch(
            pool,
            Array.from({ length: next - start }, (_, k) => ({
              ...envelope(from + (start + k) * 1000),
              to: recipients[(start + k) % recipients.length],
            })),
          );
          last = results.at(-1).message_id;
        }
      }),
    );
  } finally {
    await pool.close();
  }
  return last;
}

/** GET /v1/messages/{id} as pm: its scheduled_for, or null once sent. */
async function scheduledFor(url, id) {
  const res = await fetch(`${url}/v1/messages/${id}`, { headers });
  const body = await res.json();
  if (res.status !== 200) throw new Error(`GET message: ${res.status} ${JSON.stringify(body)}`);
  return body.message.channel_sequence_id === null ? body.scheduled_for : null;
}

console.error(
  `scheduled.mjs: ${values.store}, ${cpus().length} cores, load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);
/** Per measure, the runs of every round; the tables show their medians. */
const runs = {};
const measure = async (key, fields, run) => {
  const r = await run();
  runs[key] = [...(runs[key] ?? []), r];
  emit({ ...fields, ...r });
  return r;
};
const a = await adapter();
try {
  // the adapter's code and the store's pages warm before anything counts
  emit({ what: 'warm-up', ...(await sends(a.url, 16, false, warmupSeconds)) });
  for (let pass = 1; pass <= rounds; pass++)
    for (const inflight of levels)
      await measure(
        `before plain ${inflight}`,
        { what: 'plain sends', scheduled_waiting: 0, round: pass, inflight },
        () => sends(a.url, inflight, false),
      );
  await measure('before idle', { what: 'idle', scheduled_waiting: 0 }, () => idleCpu(a.pid));

  const t0 = performance.now();
  const lastId = await schedule(a.url, scheduledCount, Date.now() + Number(values.days) * DAY);
  const fillSeconds = (performance.now() - t0) / 1000;
  const waiting = await scheduledFor(a.url, lastId);
  if (waiting === null) throw new Error(`scheduled ${lastId} was sent already`);
  const bytes = a.bytes();
  emit({
    what: 'schedule',
    n: scheduledCount,
    seconds: round(fillSeconds, 2),
    per_second: Math.round(scheduledCount / fillSeconds),
    ...(bytes === undefined ? {} : { db_mib: round(bytes / 2 ** 20, 1) }),
    last_scheduled_for: waiting,
  });

  await measure('after idle', { what: 'idle', scheduled_waiting: scheduledCount }, () =>
    idleCpu(a.pid),
  );
  // plain and scheduled sends alternate, so that drift of a noisy machine falls on both
  for (let pass = 1; pass <= rounds; pass++)
    for (const inflight of levels)
      for (const scheduled of [false, true]) {
        const what = scheduled ? 'scheduled' : 'plain';
        await measure(
          `after ${what} ${inflight}`,
          { what: `${what} sends`, scheduled_waiting: scheduledCount, round: pass, inflight },
          () => sends(a.url, inflight, scheduled),
        );
      }
} finally {
  await a.close();
}

// The due timer with the earliest deliver_at past what setTimeout can wait (2^31-1 ms). (Node
// warns on stderr at each such timer; NODE_NO_WARNINGS keeps the output readable.)
const far = await adapter({ NODE_NO_WARNINGS: '1' });
try {
  const farDays = Number(values['far-days']);
  const pool = new Pool(far.url);
  await batch(pool, [envelope(Date.now() + farDays * DAY)]);
  await pool.close();
  await measure('far idle', { what: 'idle', scheduled_waiting: 1, far_days: farDays }, () =>
    idleCpu(far.pid),
  );
} finally {
  await far.close();
}

/** The median of each measured field over the rounds of `key`. */
function median(key) {
  const all = runs[key];
  const mid = (xs) => {
    const s = [...xs].sort((x, y) => x - y);
    return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  return Object.fromEntries(
    Object.keys(all[0]).map((f) => [f, round(mid(all.map((r) => r[f])), 3)]),
  );
}
const results = Object.fromEntries(Object.keys(runs).map((k) => [k, median(k)]));
const ratio = (x, y) => (y > 0 ? `${round(x / y, 2)}` : '–');
const rows = [
  '| measure | before (0 scheduled) | after (' +
    scheduledCount.toLocaleString('en') +
    ' scheduled) | after/before |',
  '|---|---:|---:|---:|',
];
for (const inflight of levels) {
  const b = results[`before plain ${inflight}`];
  const x = results[`after plain ${inflight}`];
  rows.push(
    `| plain sends/s, ${inflight} in flight | ${b.per_second} | ${x.per_second} | ${ratio(x.per_second, b.per_second)} |`,
    `| p50 ms, ${inflight} in flight | ${b.p50_ms} | ${x.p50_ms} | ${ratio(x.p50_ms, b.p50_ms)} |`,
    `| p99 ms, ${inflight} in flight | ${b.p99_ms} | ${x.p99_ms} | ${ratio(x.p99_ms, b.p99_ms)} |`,
  );
}
const bi = results['before idle'].idle_cpu_pct;
const ai = results['after idle'].idle_cpu_pct;
rows.push(`| idle CPU, % of a core over ${idleSeconds} s | ${bi} | ${ai} | ${ratio(ai, bi)} |`);
rows.push(
  '',
  `| with ${scheduledCount.toLocaleString('en')} waiting | plain send | scheduled send | scheduled/plain |`,
  '|---|---:|---:|---:|',
);
for (const inflight of levels) {
  const p = results[`after plain ${inflight}`];
  const s = results[`after scheduled ${inflight}`];
  rows.push(
    `| sends/s, ${inflight} in flight | ${p.per_second} | ${s.per_second} | ${ratio(s.per_second, p.per_second)} |`,
    `| p50 ms, ${inflight} in flight | ${p.p50_ms} | ${s.p50_ms} | ${ratio(s.p50_ms, p.p50_ms)} |`,
    `| p99 ms, ${inflight} in flight | ${p.p99_ms} | ${s.p99_ms} | ${ratio(s.p99_ms, p.p99_ms)} |`,
  );
}
rows.push(
  '',
  `Idle CPU with one message scheduled ${values['far-days']} days ahead (past setTimeout's ~24.8 days): ${results['far idle'].idle_cpu_pct} % of a core.`,
  `Machine: ${cpus().length} cores, load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')} at the end; sends refused or failed: ${Object.values(runs)
    .flat()
    .reduce((s, r) => s + (r.errors ?? 0), 0)}. Medians of ${rounds} rounds of ${seconds} s each.`,
);
console.log(`\n${rows.join('\n')}`);
