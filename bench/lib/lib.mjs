// Shared pieces of the benchmarks: start a target process, drive it with a closed loop of
// in-flight requests over an undici Pool, summarise latencies, and measure a server's CPU time
// per message from /proc (cpuMeter).
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import {
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';

/** The CLI under test: this checkout's build, or another's (AGW_BENCH_CLI, for before/after). */
export const CLI =
  process.env.AGW_BENCH_CLI ?? fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
export const AGENTS = ['orchestrator', 'pm', 'engineering', 'qa', 'research', 'growth'];

export function tokenOf(agent) {
  return `bench-token-${agent}`;
}

/** The seed's agents and channels, tokens `bench-token-<id>`. */
const SEED = {
  agents: AGENTS,
  channels: [
    { name: 'all-agents', members: AGENTS },
    { name: 'product', members: AGENTS.slice(1) },
    { name: 'platform', members: ['orchestrator'] },
  ],
};

/**
 * A temp folder with a topology in it: the seed's, or `agents` (ids) and `channels` of your
 * own, each agent's token `bench-token-<id>`, alerts to orchestrator.
 */
export function benchDir({ agents, channels } = SEED) {
  const dir = mkdtempSync(join(tmpdir(), 'agw-bench-'));
  const sha = (s) => createHash('sha256').update(s).digest('hex');
  const topology = join(dir, 'topology.json');
  writeFileSync(
    topology,
    JSON.stringify({
      agents: agents.map((id) => ({ id, token_sha256: sha(tokenOf(id)) })),
      channels,
      alerts_to: 'orchestrator',
    }),
  );
  return { dir, topology, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * Extra node flags for every process a benchmark starts (AGW_BENCH_NODE_ARGS, split on spaces):
 * `--cpu-prof --cpu-prof-dir=/tmp/prof` profiles each of them; node takes no such flag from
 * NODE_OPTIONS.
 */
const NODE_ARGS = (process.env.AGW_BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);

/** Starts a process that prints a JSON line with `url` when ready; resolves with {url, stop}. */
export function startProcess(
  args,
  env = {},
  readyWhen = (e) => e.msg?.startsWith('adapter ready'),
) {
  const child = spawn(process.execPath, [...NODE_ARGS, ...args], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        return;
      }
      if (readyWhen(entry) && entry.url) {
        resolve({
          url: entry.url,
          pid: child.pid,
          stop: async (signal = 'SIGTERM') => {
            child.kill(signal);
            return exited;
          },
        });
      }
    });
    exited.then(({ code, signal }) =>
      reject(new Error(`process exited (${code ?? signal}) before ready`)),
    );
  });
}

/**
 * The benchmarks measure the adapter, not the per-sender rate (AGW_SEND_RATE, 100 a second by
 * default), which any closed loop here passes at once: AGW_SEND_RATE=0 for a CLI that has the
 * setting. An older build (AGW_BENCH_CLI, for before/after) refuses an AGW_* variable it does
 * not know, and has no limit to turn off.
 */
function noSendRate(cli) {
  try {
    const settings = readFileSync(join(dirname(cli), '..', 'adapter', 'settings.js'), 'utf8');
    return settings.includes('AGW_SEND_RATE') ? { AGW_SEND_RATE: '0' } : {};
  } catch {
    return {};
  }
}

/**
 * Starts `agent-gateway adapter` (the CLI at `cli`, this checkout's by default) on a free port,
 * with no send rate (noSendRate) unless `env` sets one.
 */
export function startAdapter(dir, topology, extraArgs = [], env = {}, cli = CLI) {
  return startProcess(
    [
      cli,
      'adapter',
      '--listen',
      '127.0.0.1:0',
      '--topology',
      topology,
      '--db',
      join(dir, 'adapter.db'),
      ...extraArgs,
    ],
    { ...noSendRate(cli), ...env },
  );
}

/**
 * Runs `inflight` concurrent loops of `makeRequest(i)` against url for `seconds` after a warm-up,
 * over an undici Pool of that many connections, and returns throughput and latency percentiles
 * of the measured part; an answer `check` refuses counts as an error. `meter`: as closedLoopFn's.
 */
export async function closedLoop(
  url,
  { inflight, seconds, warmupSeconds = 1, makeRequest, check, meter },
) {
  const pool = new Pool(url, { connections: inflight, pipelining: 1, keepAliveTimeout: 60_000 });
  try {
    return await closedLoopFn({
      inflight,
      seconds,
      warmupSeconds,
      meter,
      send: async (i) => {
        const res = await pool.request(makeRequest(i));
        const body = await res.body.text();
        if (!check(res.statusCode, body)) throw new Error(`unexpected ${res.statusCode}`);
      },
    });
  } finally {
    await pool.close();
  }
}

export function round(x, digits) {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Sums of a Prometheus histogram from /metrics text. */
export async function histogram(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (suffix) =>
    Number(new RegExp(`^${name}_${suffix} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  return { sum: value('sum'), count: value('count') };
}

/** A UUIDv7: 48 bits of milliseconds, then randomness (as the sidecar makes them). */
export function uuidv7() {
  const time = Date.now().toString(16).padStart(12, '0');
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${randomUUID().slice(15)}`;
}

/**
 * A closed loop of `inflight` concurrent calls of `send(i)` (a promise that settles when the
 * system acknowledged), measured for `seconds` after a warm-up; the same shape as closedLoop.
 * `meter` (optional, a cpuMeter): started when the warm-up's sends have all settled, stopped when
 * the measured part's have, its fields (`cpu_us` per acked send) merged into the result.
 */
export async function closedLoopFn({ inflight, seconds, warmupSeconds = 1, send, meter }) {
  const latencies = [];
  let i = 0;
  let errors = 0;
  const run = async (until, record) => {
    await Promise.all(
      Array.from({ length: inflight }, async () => {
        while (performance.now() < until) {
          const t0 = performance.now();
          try {
            await send(i++);
          } catch {
            errors++;
          }
          if (record) latencies.push(performance.now() - t0);
        }
      }),
    );
  };
  await run(performance.now() + warmupSeconds * 1000, false);
  meter?.start();
  const started = performance.now();
  await run(started + seconds * 1000, true);
  const elapsed = (performance.now() - started) / 1000;
  const cpu = meter?.stop(latencies.length);
  const { p50_ms, p99_ms } = latencySummary(latencies);
  return {
    n: latencies.length,
    seconds: round(elapsed, 2),
    per_second: Math.round(latencies.length / elapsed),
    p50_ms,
    p99_ms,
    errors,
    ...cpu,
  };
}

/** p50, p99 and max of latencies in ms (sorts them in place), rounded to µs. */
export function latencySummary(latencies) {
  latencies.sort((a, b) => a - b);
  const pct = (p) =>
    latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))];
  return {
    p50_ms: round(pct(50), 3),
    p99_ms: round(pct(99), 3),
    max_ms: round(latencies.at(-1), 3),
  };
}

/**
 * A fresh database on the PostgreSQL server of `adminUrl` (a URL of a database to connect to
 * for CREATE DATABASE); `drop()` removes it, whoever is still connected.
 */
export async function pgDatabase(adminUrl) {
  const { default: pg } = await import('pg');
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const name = `agw_bench_${process.pid}_${randomUUID().slice(0, 8)}`;
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    },
  };
}

// Server CPU per message, from /proc. A server is a process tree: the process that listens on
// its port (the PostgreSQL postmaster, RabbitMQ's beam.smp, nats-server) and all its descendants
// (PostgreSQL's backends and background workers, beam's erl_child_setup and its ports). Linux
// only; the numbers are meaningful only if nothing else uses the server meanwhile.

let clkTck;
/** Clock ticks per second of /proc's times (`getconf CLK_TCK`; 100 if it cannot be asked). */
export function clockTicks() {
  if (clkTck === undefined) {
    try {
      clkTck = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clkTck = 100;
    }
  }
  return clkTck;
}

/**
 * A process's parent, its own CPU time (utime + stime, all its threads, live and exited) and
 * that of its children it has waited for (cutime + cstime), in clock ticks, from
 * /proc/<pid>/stat; undefined once it is gone.
 */
export function procStat(pid) {
  let stat;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // fields after the command, which is in parentheses and may hold spaces and parentheses:
  // state ppid ... utime (14th field of the line) stime cutime cstime
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return {
    ppid: Number(f[1]),
    self: Number(f[11]) + Number(f[12]),
    reaped: Number(f[13]) + Number(f[14]),
  };
}

const pids = () =>
  readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .map(Number);

/** The processes of the trees rooted at `roots` (pids), from one pass over /proc: pid → procStat. */
export function processTrees(roots) {
  const all = new Map();
  const children = new Map();
  for (const pid of pids()) {
    const st = procStat(pid);
    if (st === undefined) continue;
    all.set(pid, st);
    if (!children.has(st.ppid)) children.set(st.ppid, []);
    children.get(st.ppid).push(pid);
  }
  const tree = new Map();
  const stack = roots.filter((pid) => all.has(pid));
  while (stack.length > 0) {
    const pid = stack.pop();
    if (tree.has(pid)) continue;
    tree.set(pid, all.get(pid));
    stack.push(...(children.get(pid) ?? []));
  }
  return tree;
}

/** The command name (/proc/<pid>/comm) of a process; undefined once it is gone. */
function commOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/**
 * The pids that hold a socket listening on TCP `port` (/proc/net/tcp and tcp6, then each
 * process's fds; needs the right to read them: root, or the server's user), keeping those whose
 * parent does not also hold it: the server's root processes. [] if none is found.
 */
export function pidsListeningOn(port) {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  const inodes = new Set();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st ... inode (10th column); st 0A is LISTEN
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && f[1].endsWith(hex) && f[3] === '0A') inodes.add(f[9]);
    }
  }
  const holders = new Set();
  if (inodes.size === 0) return [];
  for (const pid of pids()) {
    let fds;
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let link;
      try {
        link = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      if (link.startsWith('socket:[') && inodes.has(link.slice(8, -1))) {
        holders.add(pid);
        break;
      }
    }
  }
  return [...holders].filter((pid) => !holders.has(procStat(pid)?.ppid));
}

/** The peers' servers on this machine: their standard port, and their command name. */
export const SERVERS = {
  postgresql: { port: 5432, comm: 'postgres' },
  rabbitmq: { port: 5672, comm: 'beam.smp' },
  'nats-server': { port: 4222, comm: 'nats-server' },
};

/**
 * The root pids of a server of SERVERS: whoever listens on its port, or failing that (no right
 * to read other users' fds) the processes of its command name whose parent has another name.
 */
export function serverRoots(name) {
  const { port, comm } = SERVERS[name];
  const listening = pidsListeningOn(port);
  if (listening.length > 0) return listening;
  return pids().filter((pid) => {
    if (commOf(pid) !== comm) return false;
    const ppid = procStat(pid)?.ppid;
    return ppid !== undefined && commOf(ppid) !== comm;
  });
}

/**
 * Measures the CPU time (user + system) that process trees use between start() and stop(n):
 * `groups` maps a name to root pids (serverRoots); stop(n) returns `{ cpu_us: { name: µs per
 * message } }` for n messages (null for a group whose roots were not found).
 *
 * Each tree is listed at start and again at stop, and its CPU is the sum over the processes at
 * stop of their own time plus the time of the children they reaped, less the same sum over the
 * processes at start. That counts exactly, for:
 * - a process there at both: what it used between them, its own and that of children it reaped;
 * - one that started meanwhile and still runs: all its time (it began after start);
 * - one that started and ended meanwhile: all its time, through its parent's reaped time;
 * - one there at start that ended meanwhile: its whole life's time enters its parent's reaped
 *   time and its time at start is taken off, leaving what it used after start.
 * Provided that every process that ends is reaped by a process of its tree (the postmaster reaps
 * its backends, beam's erl_child_setup its ports); one orphaned to init instead would be taken
 * off without being added back. Times are in clock ticks (clockTicks(): 10 ms at 100/s), so each
 * process's figure is up to a tick short or long at each end.
 */
export function cpuMeter(groups) {
  const sum = (tree) => [...tree.values()].reduce((a, st) => a + st.self + st.reaped, 0);
  let at;
  return {
    start() {
      at = Object.fromEntries(
        Object.entries(groups).map(([name, roots]) => [name, sum(processTrees(roots))]),
      );
    },
    stop(n) {
      const hz = clockTicks();
      return {
        cpu_us: Object.fromEntries(
          Object.entries(groups).map(([name, roots]) => [
            name,
            roots.length === 0 || n === 0
              ? null
              : round((((sum(processTrees(roots)) - at[name]) / hz) * 1e6) / n, 0),
          ]),
        ),
      };
    },
  };
}

/** A cpuMeter of one server of SERVERS, found by serverRoots; says so on stderr if not found. */
export function serverCpuMeter(name) {
  const roots = serverRoots(name);
  if (roots.length === 0)
    process.stderr.write(`no ${name} process found: its cpu_us will be null\n`);
  return cpuMeter({ [name]: roots });
}
