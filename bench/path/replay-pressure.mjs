// Replays under pressure (docs/reference/adapter-api.md, "Reads are bounded too"), before and
// after a change:
//
//   node replay-pressure.mjs noread [--db postgres://...]   40 replays that never read their answers:
//                                                         the adapter's peak RSS over 8 s
//   node replay-pressure.mjs health --db postgres://...   48 replays in a loop, read in full, for
//                                                         8 s: /health latency meanwhile
//
// SPREAD=1: the 48 readers are the six agents in turn, replaying all-agents (else all are pm,
// replaying @pm). AGW_MAX_READS_PER_AGENT is passed on to the adapter when set (a build that
// does not know it refuses to start).
//
// AGW_BENCH_CLI names another build (before/after). One JSON line per measurement. Short on
// purpose: the machine's cores are shared.
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { Agent, request } from 'undici';
import { AGENTS, benchDir, latencySummary, round, startAdapter, tokenOf } from '../lib/lib.mjs';

const mode = process.argv[2] ?? 'noread';
const dbAt = process.argv.indexOf('--db');
const db = dbAt > 0 ? process.argv[dbAt + 1] : undefined;
const SECONDS = Number(process.env.SECONDS_ ?? 8);
const MESSAGES = 40;
const BODY = 'x'.repeat(250 * 1024);
const SPREAD = process.env.SPREAD === '1';
const CHANNEL = SPREAD ? 'all-agents' : '@pm';
const readerOf = (i) => (SPREAD ? AGENTS[i % AGENTS.length] : 'pm');

const rssMiB = (pid) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const { dir, topology, cleanup } = benchDir();
const adapter = await startAdapter(dir, topology, db ? ['--db', db] : [], {
  AGW_SYNC: 'normal',
  ...(process.env.AGW_MAX_READS_PER_AGENT
    ? { AGW_MAX_READS_PER_AGENT: process.env.AGW_MAX_READS_PER_AGENT }
    : {}),
});
// a bound on the whole run: the adapter is stopped whatever happens
const watchdog = setTimeout(async () => {
  console.error('replay-pressure: 120 s passed; stopping');
  await adapter.stop('SIGKILL');
  process.exit(3);
}, 120_000);
const dispatcher = new Agent({ connections: 128 });
const auth = { authorization: `Bearer ${tokenOf('pm')}` };
try {
  for (let i = 0; i < MESSAGES; i++) {
    const r = await request(`${adapter.url}/v1/messages`, {
      method: 'POST',
      dispatcher,
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({
        idempotency_key: crypto.randomUUID(),
        to: CHANNEL,
        kind: 'status',
        payload: { i, text: BODY },
      }),
    });
    await r.body.text();
    if (r.statusCode !== 201) throw new Error(`send: ${r.statusCode}`);
  }
  const path = `/v1/channels/${encodeURIComponent(CHANNEL)}/messages?limit=1000`;
  const u = new URL(adapter.url);
  const base = rssMiB(adapter.pid);

  if (mode === 'noread') {
    const sockets = [];
    const heads = [];
    for (let i = 0; i < 40; i++) {
      const s = connect({ host: u.hostname, port: Number(u.port) });
      s.on('error', () => {});
      let head = '';
      let seen = false;
      s.once('data', (d) => {
        head = d.toString('latin1').slice(0, 12);
        seen = true;
        s.pause(); // one read for the status line, then never again
      });
      heads.push(() => (seen ? head : ''));
      s.write(`GET ${path} HTTP/1.1\r\nHost: a\r\nAuthorization: ${auth.authorization}\r\n\r\n`);
      sockets.push(s);
    }
    let peak = base;
    const until = Date.now() + SECONDS * 1000;
    while (Date.now() < until) {
      await sleep(250);
      peak = Math.max(peak, rssMiB(adapter.pid));
    }
    const statuses = {};
    for (const h of heads) {
      const k = h().slice(9, 12) || 'none';
      statuses[k] = (statuses[k] ?? 0) + 1;
    }
    const open = sockets.filter((s) => !s.destroyed && s.readyState === 'open').length;
    console.log(
      JSON.stringify({
        mode,
        store: db ? 'postgres' : 'sqlite',
        rss_before_mib: round(base, 0),
        rss_peak_mib: round(peak, 0),
        rss_end_mib: round(rssMiB(adapter.pid), 0),
        statuses,
        sockets_still_open: open,
        seconds: SECONDS,
      }),
    );
    for (const s of sockets) s.destroy();
  } else {
    let stop = false;
    const counts = {};
    const readers = Array.from({ length: 48 }, async (_, i) => {
      const headers = { authorization: `Bearer ${tokenOf(readerOf(i))}` };
      while (!stop) {
        const r = await request(adapter.url + path, { dispatcher, headers });
        await r.body.text();
        counts[r.statusCode] = (counts[r.statusCode] ?? 0) + 1;
        if (r.statusCode !== 200) await sleep(Number(r.headers['retry-after'] ?? 1) * 1000);
      }
    });
    const health = [];
    const healthStatus = {};
    let peak = base;
    const until = Date.now() + SECONDS * 1000;
    while (Date.now() < until) {
      const t0 = performance.now();
      const r = await request(`${adapter.url}/health`, { dispatcher });
      await r.body.text();
      health.push(performance.now() - t0);
      healthStatus[r.statusCode] = (healthStatus[r.statusCode] ?? 0) + 1;
      peak = Math.max(peak, rssMiB(adapter.pid));
      await sleep(100);
    }
    stop = true;
    console.error('replay-pressure: waiting for the readers to end');
    await Promise.all(readers);
    console.log(
      JSON.stringify({
        mode,
        store: db ? 'postgres' : 'sqlite',
        spread: SPREAD,
        health_ms: { n: health.length, ...latencySummary(health) },
        health_status: healthStatus,
        replays: counts,
        rss_before_mib: round(base, 0),
        rss_peak_mib: round(peak, 0),
        seconds: SECONDS,
      }),
    );
  }
} finally {
  clearTimeout(watchdog);
  await dispatcher.destroy();
  await adapter.stop();
  cleanup();
}
