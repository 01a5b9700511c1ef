/**
 * The chaos soak: the adapter and six sidecars for the seed's agents, each agent sending and
 * receiving through its sidecar with the client, while the adapter is SIGKILLed and restarted
 * every ~15 s and a sidecar now and then. At the end every message a sidecar accepted (201 or
 * 202) has reached every recipient at least once and, after the client's dedup, exactly once;
 * every channel's sequence is 1..N; every dead letter is accounted for; no process is left.
 *
 *   AGW_CHAOS_SECONDS=600 npx vitest run test/chaos     (CI runs 90 s)
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, expect, it } from 'vitest';
import { GatewayClient } from '../../src/client/index.js';
import { type ChildProcessOfCli, spawnAdapter, spawnSidecar } from '../helpers/cli.js';
import { AGENTS, CHANNELS, tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

const SECONDS = Number(process.env.AGW_CHAOS_SECONDS ?? 90);
const { dir, cleanup } = tempDir('agw-chaos-');
const all: ChildProcessOfCli[] = [];
afterAll(async () => {
  for (const p of all)
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  await Promise.all(all.map((p) => p.exited));
  cleanup();
});

const routes = Object.fromEntries(
  AGENTS.map((a) => [
    a,
    [
      ...Object.entries(CHANNELS)
        .filter(([, m]) => m.includes(a) && m.length > 1)
        .map(([c]) => c),
      ...AGENTS.filter((b) => b !== a).map((b) => `@${b}`),
    ],
  ]),
);
const recipientsOf = (sender: string, to: string): string[] =>
  to.startsWith('@') ? [to.slice(1)] : CHANNELS[to]!.filter((m) => m !== sender);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it(`keeps every accepted message through ${SECONDS} s of kills`, {
  timeout: (SECONDS + 240) * 1000,
}, async () => {
  const db = join(dir, 'adapter.db');
  const topology = writeTopology(dir);
  const adapterArgs = [
    '--topology',
    topology,
    '--db',
    db,
    '--lease-ms',
    '3000',
    '--retry-base-ms',
    '200',
    '--max-retries',
    '20',
  ];
  let adapter = await spawnAdapter(adapterArgs);
  all.push(adapter);
  const adapterPort = Number(new URL(adapter.url).port);
  adapterArgs.push('--listen', `127.0.0.1:${adapterPort}`);

  const sidecars = new Map<
    string,
    { proc: ChildProcessOfCli; port: number; env: Record<string, string> }
  >();
  for (const agent of AGENTS) {
    const env = {
      AGW_ADAPTER_URL: adapter.url,
      AGW_AGENT_ID: agent,
      AGW_AGENT_TOKEN: tokenOf(agent),
      AGW_OUTBOX: join(dir, `${agent}.outbox.db`),
      AGW_BREAKER_BASE_MS: '100',
      AGW_BREAKER_MAX_MS: '1000',
      AGW_JOURNAL_SOCKET: join(dir, 'no-journal'),
    };
    const proc = await spawnSidecar(env);
    all.push(proc);
    const port = Number(new URL(proc.url).port);
    sidecars.set(agent, { proc, port, env });
  }

  const accepted = new Map<string, { sender: string; recipients: string[] }>(); // payload id → who must get it
  const handled = new Map<string, number>(); // `${agent}/${id}` → handler calls
  let deliveriesSeen = 0;
  let redeliveries = 0;
  let adapterKills = 0;
  let sidecarKills = 0;
  let longestOutageMs = 0;
  let running = true;
  const controller = new AbortController();

  // senders: ~8 messages/s each, a message resent with the same key until a sidecar takes it
  const senders = AGENTS.map(async (agent) => {
    const gw = new GatewayClient({ url: `http://127.0.0.1:${sidecars.get(agent)!.port}` });
    while (running) {
      const id = randomUUID();
      const to = pick(routes[agent]!);
      const key = randomUUID();
      for (;;) {
        try {
          await gw.send({ to, kind: 'status', payload: { id }, idempotency_key: key });
          accepted.set(id, { sender: agent, recipients: recipientsOf(agent, to) });
          break;
        } catch {
          await sleep(100); // the sidecar is restarting, or its outbox is full: same key again
        }
      }
      await sleep(60 + Math.random() * 120);
    }
  });
  // receivers: the client's loop, which dedups by message_id and acks after the handler
  const receivers = AGENTS.map((agent) =>
    new GatewayClient({ url: `http://127.0.0.1:${sidecars.get(agent)!.port}` }).receive(
      async (m, d) => {
        if (m.sender === 'adapter') return; // the adapter's alerts: not ours to count
        deliveriesSeen++;
        if (d.attempt > 1) redeliveries++;
        const id = String(m.payload.id);
        handled.set(`${agent}/${id}`, (handled.get(`${agent}/${id}`) ?? 0) + 1);
      },
      { waitS: 2, signal: controller.signal },
    ),
  );

  // chaos: the adapter every ~15 s, a sidecar now and then
  const until = Date.now() + SECONDS * 1000;
  while (Date.now() < until) {
    await sleep(Math.min(until - Date.now(), 10_000 + Math.random() * 10_000));
    if (Date.now() >= until) break;
    adapter.child.kill('SIGKILL');
    await adapter.exited;
    adapterKills++;
    const down = Date.now();
    await sleep(500 + Math.random() * 1500);
    if (Math.random() < 0.5) {
      const victim = pick(AGENTS);
      const s = sidecars.get(victim)!;
      s.proc.child.kill('SIGKILL');
      await s.proc.exited;
      sidecarKills++;
      s.proc = await spawnSidecar(s.env, ['--listen', `127.0.0.1:${s.port}`]);
      all.push(s.proc);
    }
    adapter = await spawnAdapter(adapterArgs);
    all.push(adapter);
    longestOutageMs = Math.max(longestOutageMs, Date.now() - down);
  }
  running = false;
  await Promise.all(senders);

  // everything accepted reaches every recipient
  const missing = () => {
    const out: string[] = [];
    for (const [id, { recipients }] of accepted)
      for (const r of recipients) if (!handled.has(`${r}/${id}`)) out.push(`${r}/${id}`);
    return out;
  };
  const deadline = Date.now() + 120_000;
  while (missing().length > 0 && Date.now() < deadline) await sleep(250);
  controller.abort();
  await Promise.all(receivers);

  // stop everything, then read the store
  for (const s of sidecars.values()) s.proc.child.kill('SIGTERM');
  adapter.child.kill('SIGTERM');
  await Promise.all([adapter.exited, ...[...sidecars.values()].map((s) => s.proc.exited)]);
  // no process left behind: every adapter and sidecar this test started has exited
  expect(
    all.filter((p) => p.child.exitCode === null && p.child.signalCode === null).map((p) => p.pid),
  ).toEqual([]);
  const conn = new Database(db, { readonly: true });
  const seqs = conn
    .prepare(
      'SELECT c.name, c.last_seq, count(m.id) AS n, max(m.seq) AS hi FROM channels c LEFT JOIN messages m ON m.channel = c.name GROUP BY c.name',
    )
    .all() as { name: string; last_seq: number; n: number; hi: number | null }[];
  const dead = conn
    .prepare(
      'SELECT recipient, reason, body FROM dead_letters d JOIN messages m ON m.id = d.message',
    )
    .all() as {
    recipient: string;
    reason: string;
    body: string;
  }[];
  conn.close();

  const deadFor = new Set(
    dead.map(
      (d) => `${d.recipient}/${(JSON.parse(d.body) as { payload: { id?: string } }).payload.id}`,
    ),
  );
  const unexplained = missing().filter((k) => !deadFor.has(k));
  const twice = [...handled.entries()].filter(([, n]) => n > 1);
  const expected = [...accepted.values()].reduce((n, a) => n + a.recipients.length, 0);
  console.log(
    `chaos soak, ${SECONDS} s: ${accepted.size} messages accepted, ${expected} deliveries expected, ` +
      `${deliveriesSeen} handed to handlers, ${redeliveries} of them redeliveries, ` +
      `${adapterKills} adapter kills, ${sidecarKills} sidecar kills, ${dead.length} dead letters ` +
      `(${[...new Set(dead.map((d) => d.reason))].join(', ') || 'none'}), longest adapter outage absorbed ${longestOutageMs} ms`,
  );
  expect(adapterKills).toBeGreaterThanOrEqual(Math.floor(SECONDS / 25));
  expect(unexplained, `never delivered: ${unexplained.slice(0, 5).join(', ')}`).toEqual([]);
  expect(twice, 'handled twice after the client dedup').toEqual([]);
  for (const c of seqs)
    expect(c, c.name).toEqual({
      name: c.name,
      last_seq: c.last_seq,
      n: c.last_seq,
      hi: c.n ? c.last_seq : null,
    });
});
