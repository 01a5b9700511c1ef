// Shared pieces of the benchmarks: start a target process, drive it with a closed loop of
// in-flight requests over an undici Pool, and summarise latencies.
import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
 * of the measured part; an answer `check` refuses counts as an error.
 */
export async function closedLoop(
  url,
  { inflight, seconds, warmupSeconds = 1, makeRequest, check },
) {
  const pool = new Pool(url, { connections: inflight, pipelining: 1, keepAliveTimeout: 60_000 });
  try {
    return await closedLoopFn({
      inflight,
      seconds,
      warmupSeconds,
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
 */
export async function closedLoopFn({ inflight, seconds, warmupSeconds = 1, send }) {
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
  const started = performance.now();
  await run(started + seconds * 1000, true);
  const elapsed = (performance.now() - started) / 1000;
  const { p50_ms, p99_ms } = latencySummary(latencies);
  return {
    n: latencies.length,
    seconds: round(elapsed, 2),
    per_second: Math.round(latencies.length / elapsed),
    p50_ms,
    p99_ms,
    errors,
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
