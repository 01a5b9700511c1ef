/**
 * The chaos soak: six sidecars for the seed's agents, each agent sending and receiving through its
 * sidecar with the client, while adapters are SIGKILLed and restarted every ~15 s and a sidecar
 * every 2-5 s (one of the six, on its own file and port). At the end every message a sidecar
 * accepted (201 or 202) has reached every recipient at least once and, after the client's dedup,
 * exactly once; no message whose ack a sidecar answered 2xx was handed to its agent again (seen
 * before the client's dedup, which would hide it; docs/reference/sidecar.md, "Receiving"); every
 * channel's sequence is 1..N; every dead letter is accounted for; no process is left.
 *
 * Two modes, one after the other, with the same agents and the same end checks:
 * - SQLite: one adapter on a SQLite file, killed and restarted;
 * - replicas: three adapters on one PostgreSQL database (test/helpers/pg.ts), two sidecars on
 *   each; one replica at a time is killed and restarted on its own port (a sidecar's adapter
 *   URL is fixed), its sidecars' messages waiting in their outboxes meanwhile, while the other
 *   replicas go on serving (deliveries leased through the killed one come back when their
 *   leases run out, through whichever replica sweeps them). The database is on a PostgreSQL
 *   server of the soak's own (test/helpers/pg-server.ts), and one kill in three SIGKILLs that
 *   server instead (postmaster and backends), restarting it on its directory (crash recovery).
 *   Meanwhile the replicas answer 503 with Retry-After and the sidecars queue; the soak reports
 *   how long each replica took from the restart to its first commit and to /health 200.
 *
 *   AGW_CHAOS_SECONDS=600 npx vitest run test/chaos     (CI: 90 s SQLite, 80 s replicas)
 *   AGW_CHAOS_REPLICA_SECONDS sets the replicas mode's alone (default: AGW_CHAOS_SECONDS, else 80).
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, expect, it } from 'vitest';
import { GatewayClient } from '../../src/client/index.js';
import { type ChildProcessOfCli, spawnAdapter, spawnSidecar } from '../helpers/cli.js';
import { PgServer } from '../helpers/pg-server.js';
import { type ReplicaSet, startReplicaSet } from '../helpers/replicas.js';
import { AGENTS, CHANNELS, tempDir, tokenOf, writeTopology } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const SECONDS = Number(process.env.AGW_CHAOS_SECONDS ?? 90);
/** 80 s by default: with its three replicas' start and the drain, CI's soak grows by ~90 s. */
const REPLICA_SECONDS = Number(
  process.env.AGW_CHAOS_REPLICA_SECONDS ?? process.env.AGW_CHAOS_SECONDS ?? 80,
);
/** Lease, backoff and retries of every adapter: short, so that the soak sees many of each. */
const DELIVERY_ARGS = ['--lease-ms', '3000', '--retry-base-ms', '200', '--max-retries', '20'];

const { dir, cleanup } = tempDir('agw-chaos-');
const all: ChildProcessOfCli[] = [];
const replicaSets: ReplicaSet[] = [];
const servers: PgServer[] = [];
afterAll(async () => {
  for (const p of all)
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  await Promise.all(all.map((p) => p.exited));
  for (const set of replicaSets) await set.cleanup();
  for (const server of servers) await server.stop(); // (cleanup stopped it already: no-op)
  cleanup();
}, 60_000);

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

/** What the store holds at the end, read once every process has stopped. */
interface StoreFacts {
  /** Each channel's counter, its message count and its highest sequence. */
  channels: { name: string; last_seq: number; n: number; hi: number | null }[];
  /** Each dead letter: its recipient, reason, and the soak's payload id of its message. */
  dead: { recipient: string; reason: string; id: string | undefined }[];
}

/** The adapters of one mode, as the soak drives them. */
interface Adapters {
  readonly mode: string;
  /** The adapter URL the sidecar of the n-th agent is given: fixed for the whole soak. */
  urlFor(n: number): string;
  /** SIGKILLs one adapter; answers the restart (on the same port), to call when the soak says. */
  kill(): Promise<() => Promise<void>>;
  /** Asks every adapter running to stop (SIGTERM); answers when all have exited. */
  stop(): Promise<void>;
  /** Processes of this mode's adapters still running, by pid. */
  running(): number[];
  /** The store's facts, once stopped. */
  read(): Promise<StoreFacts>;
}

const payloadId = (body: string) => (JSON.parse(body) as { payload: { id?: string } }).payload.id;

/** One adapter on a SQLite file. */
async function sqliteAdapter(): Promise<Adapters> {
  const db = join(dir, 'adapter.db');
  const topology = writeTopology(dir);
  const args = ['--topology', topology, '--db', db, ...DELIVERY_ARGS];
  let adapter = await spawnAdapter(args);
  all.push(adapter);
  const url = adapter.url;
  args.push('--listen', `127.0.0.1:${new URL(url).port}`);
  return {
    mode: 'SQLite, one adapter',
    urlFor: () => url,
    async kill() {
      adapter.child.kill('SIGKILL');
      await adapter.exited;
      return async () => {
        adapter = await spawnAdapter(args);
        all.push(adapter);
      };
    },
    async stop() {
      adapter.child.kill('SIGTERM');
      await adapter.exited;
    },
    running: () => [],
    async read() {
      const conn = new Database(db, { readonly: true });
      try {
        const channels = conn
          .prepare(
            'SELECT c.name, c.last_seq, count(m.id) AS n, max(m.seq) AS hi FROM channels c LEFT JOIN messages m ON m.channel = c.name GROUP BY c.name',
          )
          .all() as StoreFacts['channels'];
        const dead = (
          conn
            .prepare(
              'SELECT recipient, reason, body FROM dead_letters d JOIN messages m ON m.id = d.message',
            )
            .all() as { recipient: string; reason: string; body: string }[]
        ).map((d) => ({ recipient: d.recipient, reason: d.reason, id: payloadId(d.body) }));
        return { channels, dead };
      } finally {
        conn.close();
      }
    },
  };
}

/** One kill in three of the replicas mode is of the PostgreSQL server instead of a replica. */
const SERVER_KILL_EVERY = 3;
/** A request to an adapter while its database is down must be answered within this, ms. */
const ANSWER_WITHIN_MS = 20_000;

/** What the replicas mode saw of its server's crashes: checked by its test after the soak. */
const serverOutages = {
  kills: 0,
  /** Answers while the server was down, by kind (`send 503`, `health 503`, ...). */
  answers: new Map<string, number>(),
  /** What broke a rule: a 500, a hang, a 2xx without Retry-After... */
  problems: [] as string[],
  /** Keys of probe sends answered 2xx (each must be stored once). */
  committed: [] as string[],
  /** Per restart: ms from the server answering again to every replica's first 2xx commit (a heartbeat) and /health 200. */
  recoveries: [] as { commitMs: number; healthMs: number }[],
};

/** A request with a deadline; a hang past it is a problem, not a test timeout. */
async function answerOf(
  url: string,
  method: string,
  path: string,
  agent?: string,
  body?: object,
): Promise<{ status: number; retryAfter: string | null; error?: string } | 'hang' | 'refused'> {
  try {
    const res = await fetch(url + path, {
      method,
      headers: {
        'content-type': 'application/json',
        ...(agent === undefined ? {} : { authorization: `Bearer ${tokenOf(agent)}` }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(ANSWER_WITHIN_MS),
    });
    const text = await res.text();
    let error: string | undefined;
    try {
      error = (JSON.parse(text) as { error?: string }).error;
    } catch {}
    return { status: res.status, retryAfter: res.headers.get('retry-after'), error };
  } catch (err) {
    return (err as Error).name === 'TimeoutError' ? 'hang' : 'refused';
  }
}

/**
 * A send of pm's to @orchestrator, made only while the server is down: it must be refused (were
 * it taken, orchestrator's receiver would count a message without an id, and the check below
 * would name it).
 */
const probeSend = (url: string, key: string) =>
  answerOf(url, 'POST', '/v1/messages', 'pm', {
    idempotency_key: key,
    to: '@orchestrator',
    kind: 'status',
    payload: { probe: key },
  });

/**
 * Three adapters on one database of a PostgreSQL server of the soak's own (pg-server.ts); the
 * sidecars spread over them, two each. Every SERVER_KILL_EVERY-th kill SIGKILLs the server
 * (postmaster and backends) instead of a replica: while it is down each replica must answer a
 * send and /health with 503 and Retry-After, within ANSWER_WITHIN_MS; restarted on its
 * directory (crash recovery), each replica must commit again and report 200 by itself.
 */
async function replicaAdapters(): Promise<Adapters> {
  const server = await PgServer.create();
  servers.push(server);
  const dbUrl = await server.createDatabase('agw_soak');
  const set = await startReplicaSet(DELIVERY_ARGS, 3, {
    db: { url: dbUrl, drop: () => server.stop() },
  });
  replicaSets.push(set);
  const { replicas } = set;
  const urls = [0, 1, 2].map((i) => replicas.urlOf(i));
  let kills = 0;

  const probeWhileDown = async () => {
    await Promise.all(
      replicas.liveSlots().map(async (i) => {
        const url = replicas.urlOf(i);
        const key = randomUUID();
        const checks = [
          ['send', await probeSend(url, key)],
          ['health', await answerOf(url, 'GET', '/health')],
          ['replay', await answerOf(url, 'GET', '/v1/channels/@qa/messages?after=0', 'qa')],
        ] as const;
        for (const [what, a] of checks) {
          if (typeof a === 'string') {
            serverOutages.problems.push(`replica ${i}: ${what} while the server was down: ${a}`);
            continue;
          }
          const name = `${what} ${a.status}${a.error ? ` ${a.error}` : ''}`;
          serverOutages.answers.set(name, (serverOutages.answers.get(name) ?? 0) + 1);
          if (a.status < 300) {
            // the server may have been back already (it is not: the kill is awaited above)
            if (what === 'send') serverOutages.committed.push(key);
            if (what !== 'replay')
              serverOutages.problems.push(
                `replica ${i}: ${what} answered ${a.status} while the server was down`,
              );
          } else if (a.status !== 503 || a.retryAfter === null) {
            serverOutages.problems.push(
              `replica ${i}: ${what} answered ${a.status} (${a.error}) with Retry-After ${a.retryAfter}`,
            );
          }
        }
      }),
    );
  };

  /** From the server answering again: each replica's first 2xx send, and its /health 200. */
  const recovery = async () => {
    const t0 = Date.now();
    let commitMs = 0;
    let healthMs = 0;
    await Promise.all(
      replicas.liveSlots().map(async (i) => {
        const url = replicas.urlOf(i);
        // a heartbeat: a commit (the agents row) whose message nobody receives
        await until(async () => {
          const a = await answerOf(url, 'POST', '/v1/heartbeat', 'orchestrator', {});
          if (typeof a === 'string' || a.status >= 300) return false;
          commitMs = Math.max(commitMs, Date.now() - t0);
          return true;
        }, `replica ${i} to commit again after the server's restart`);
        await until(async () => {
          const a = await answerOf(url, 'GET', '/health');
          if (typeof a === 'string' || a.status !== 200) return false;
          healthMs = Math.max(healthMs, Date.now() - t0);
          return true;
        }, `replica ${i}'s /health to turn 200 after the server's restart`);
      }),
    );
    serverOutages.recoveries.push({ commitMs, healthMs });
    // and each replica listens again (pg-wake.ts reconnected): one agw-listen session each
    await until(async () => {
      const c = new pg.Client({ connectionString: dbUrl });
      await c.connect();
      try {
        const { rows } = await c.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'agw-listen' AND datname = current_database()",
        );
        return rows[0].n === replicas.liveSlots().length;
      } finally {
        await c.end();
      }
    }, 'every replica to LISTEN again');
  };

  return {
    mode: 'PostgreSQL, three replicas',
    urlFor: (n) => urls[n % urls.length]!,
    async kill() {
      kills++;
      // the 1st, 4th, 7th...: a short soak (AGW_CHAOS_REPLICA_SECONDS=40: a kill or two) has one
      if (kills % SERVER_KILL_EVERY === 1) {
        await server.crash();
        serverOutages.kills++;
        await probeWhileDown();
        return async () => {
          await server.start(); // crash recovery on the same directory
          await recovery();
        };
      }
      const victim = pick(replicas.liveSlots());
      await replicas.kill(victim);
      return async () => {
        await replicas.start(victim, { samePort: true });
      };
    },
    stop: () => replicas.stop(),
    running: () => replicas.running(),
    async read() {
      const conn = new pg.Client({ connectionString: set.db.url });
      await conn.connect();
      try {
        const channels = (
          await conn.query(
            'SELECT c.name, c.last_seq::int AS last_seq, count(m.id)::int AS n, max(m.seq)::int AS hi FROM channels c LEFT JOIN messages m ON m.channel = c.name GROUP BY c.name, c.last_seq',
          )
        ).rows as StoreFacts['channels'];
        const dead = (
          await conn.query(
            'SELECT d.recipient, d.reason, m.body FROM dead_letters d JOIN messages m ON m.id = d.message',
          )
        ).rows.map((d: { recipient: string; reason: string; body: unknown }) => ({
          recipient: d.recipient,
          reason: d.reason,
          id: payloadId(typeof d.body === 'string' ? d.body : JSON.stringify(d.body)),
        }));
        // every probe answered 2xx is stored, once
        const { rows } = await conn.query(
          "SELECT idempotency_key AS key, count(*)::int AS n FROM messages WHERE sender = 'pm' AND idempotency_key = ANY($1) GROUP BY idempotency_key",
          [serverOutages.committed],
        );
        const stored = new Map(rows.map((r: { key: string; n: number }) => [r.key, r.n]));
        for (const key of serverOutages.committed)
          if (stored.get(key) !== 1)
            serverOutages.problems.push(
              `probe ${key} answered 2xx, stored ${stored.get(key) ?? 0} times`,
            );
        return { channels, dead };
      } finally {
        await conn.end();
      }
    },
  };
}

/** The soak itself: the same for every mode. */
async function soak(seconds: number, adapters: Adapters): Promise<void> {
  const sidecars = new Map<
    string,
    { proc: ChildProcessOfCli; port: number; env: Record<string, string> }
  >();
  for (const [n, agent] of AGENTS.entries()) {
    const env = {
      AGW_ADAPTER_URL: adapters.urlFor(n),
      AGW_AGENT_ID: agent,
      AGW_AGENT_TOKEN: tokenOf(agent),
      AGW_OUTBOX: join(dir, `${adapters.mode.replace(/\W+/g, '-')}-${agent}.outbox.db`),
      AGW_BREAKER_BASE_MS: '100',
      AGW_BREAKER_MAX_MS: '1000',
      AGW_JOURNAL_SOCKET: join(dir, 'no-journal'),
    };
    const proc = await spawnSidecar(env);
    all.push(proc);
    const port = Number(new URL(proc.url).port);
    sidecars.set(agent, { proc, port, env });
  }

  // Acks answered 2xx, and hand-overs after them, as the agent's client sees them on the wire
  // (before its dedup): per agent, the message of each delivery id handed over, and the
  // messages whose delivery a sidecar's 2xx listed as acked.
  const wire = new Map<
    string,
    { ids: Map<number, string>; at: Map<number, number>; acked: Set<string> }
  >(AGENTS.map((a) => [a, { ids: new Map(), at: new Map(), acked: new Set() }]));
  const handedAfterAck: string[] = [];
  /** Agents whose sidecar the chaos loop kills as soon as it has answered an ack 2xx. */
  const armed = new Map<string, () => void>();
  const watched = (agent: string): typeof fetch => {
    const seen = wire.get(agent)!;
    return async (input, init) => {
      const res = await fetch(input, init);
      const path = new URL(String(input)).pathname;
      if (!res.ok || (path !== '/v1/inbox' && path !== '/v1/acks')) return res;
      const now = Date.now();
      const body = (await res.clone().json()) as {
        acked?: number[];
        deliveries?: { delivery_id: number; message: { message_id: string } }[];
      };
      // a poll's carried acks were taken before its deliveries were handed over
      for (const id of body.acked ?? []) {
        const m = seen.ids.get(id);
        if (m !== undefined) seen.acked.add(m);
      }
      // the chaos loop's cue: an ack answered 2xx within 10 ms of its hand-over, the moment a
      // mark still waiting to be written would be lost
      if ((body.acked ?? []).some((id) => now - (seen.at.get(id) ?? 0) < 10)) armed.get(agent)?.();
      for (const d of body.deliveries ?? []) {
        if (seen.acked.has(d.message.message_id))
          handedAfterAck.push(`${agent}/${d.message.message_id}`);
        seen.ids.set(d.delivery_id, d.message.message_id);
        seen.at.set(d.delivery_id, now);
      }
      return res;
    };
  };
  const accepted = new Map<string, { sender: string; recipients: string[] }>(); // payload id → who must get it
  const handled = new Map<string, number>(); // `${agent}/${id}` → handler calls
  let deliveriesSeen = 0;
  let redeliveries = 0;
  let adapterKills = 0;
  let sidecarKills = 0;
  let cuedKills = 0;
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
    new GatewayClient({
      url: `http://127.0.0.1:${sidecars.get(agent)!.port}`,
      fetch: watched(agent),
    }).receive(
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

  // chaos: an adapter every ~15 s (a sidecar too, half the time, while it is down), and a
  // sidecar every 2-5 s, killed the moment it has answered an ack 2xx within 10 ms of handing
  // the message over (or after 5 s without one): where a mark not yet on disk would show
  const restarting = new Set<string>();
  const killSidecar = async (victim: string) => {
    if (restarting.has(victim)) return;
    restarting.add(victim);
    const s = sidecars.get(victim)!;
    s.proc.child.kill('SIGKILL');
    await s.proc.exited;
    sidecarKills++;
    s.proc = await spawnSidecar(s.env, ['--listen', `127.0.0.1:${s.port}`]);
    all.push(s.proc);
    restarting.delete(victim);
  };
  const until = Date.now() + seconds * 1000;
  const sidecarChaos = (async () => {
    while (Date.now() < until) {
      await sleep(2000 + Math.random() * 3000);
      if (Date.now() >= until) break;
      const victim = pick(AGENTS);
      const cued = await Promise.race([
        new Promise<boolean>((r) => armed.set(victim, () => r(true))),
        sleep(5000).then(() => false),
      ]);
      if (cued) cuedKills++;
      armed.delete(victim);
      await killSidecar(victim);
    }
  })();
  while (Date.now() < until) {
    await sleep(Math.min(until - Date.now(), 10_000 + Math.random() * 10_000));
    if (Date.now() >= until) break;
    const restart = await adapters.kill();
    adapterKills++;
    const down = Date.now();
    await sleep(500 + Math.random() * 1500);
    if (Math.random() < 0.5) await killSidecar(pick(AGENTS));
    await restart();
    longestOutageMs = Math.max(longestOutageMs, Date.now() - down);
  }
  await sidecarChaos;
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
  await Promise.all([adapters.stop(), ...[...sidecars.values()].map((s) => s.proc.exited)]);
  // no process left behind: every adapter and sidecar this test started has exited
  expect([
    ...all
      .filter((p) => p.child.exitCode === null && p.child.signalCode === null)
      .map((p) => p.pid),
    ...adapters.running(),
  ]).toEqual([]);
  const { channels, dead } = await adapters.read();

  const deadFor = new Set(dead.map((d) => `${d.recipient}/${d.id}`));
  const unexplained = missing().filter((k) => !deadFor.has(k));
  const twice = [...handled.entries()].filter(([, n]) => n > 1);
  const expected = [...accepted.values()].reduce((n, a) => n + a.recipients.length, 0);
  console.log(
    `chaos soak (${adapters.mode}), ${seconds} s: ${accepted.size} messages accepted, ${expected} deliveries expected, ` +
      `${deliveriesSeen} handed to handlers, ${redeliveries} of them redeliveries, ` +
      `${adapterKills} adapter kills, ${sidecarKills} sidecar kills (${cuedKills} right after an ack), ` +
      `${[...wire.values()].reduce((n, w) => n + w.acked.size, 0)} acks answered 2xx (${handedAfterAck.length} handed again), ${dead.length} dead letters ` +
      `(${[...new Set(dead.map((d) => d.reason))].join(', ') || 'none'}), longest adapter outage absorbed ${longestOutageMs} ms`,
  );
  expect(adapterKills).toBeGreaterThanOrEqual(Math.floor(seconds / 25));
  expect(unexplained, `never delivered: ${unexplained.slice(0, 5).join(', ')}`).toEqual([]);
  expect(twice, 'handled twice after the client dedup').toEqual([]);
  expect(sidecarKills).toBeGreaterThanOrEqual(Math.floor(seconds / 10));
  expect(handedAfterAck, 'handed over again after an ack answered 2xx').toEqual([]);
  for (const c of channels)
    expect(c, c.name).toEqual({
      name: c.name,
      last_seq: c.last_seq,
      n: c.last_seq,
      hi: c.n ? c.last_seq : null,
    });
}

it(`keeps every accepted message through ${SECONDS} s of kills`, {
  timeout: (SECONDS + 240) * 1000,
}, async () => {
  await soak(SECONDS, await sqliteAdapter());
});

it(`keeps every accepted message through ${REPLICA_SECONDS} s of replica and PostgreSQL server kills`, {
  timeout: (REPLICA_SECONDS + 300) * 1000,
}, async () => {
  await soak(REPLICA_SECONDS, await replicaAdapters());
  const { kills, answers, problems, recoveries } = serverOutages;
  console.log(
    `chaos soak (PostgreSQL server kills): ${kills} server kills; answers while down: ${JSON.stringify(Object.fromEntries(answers))}; ` +
      `recovery from the server's restart (first 2xx commit / /health 200 of every replica, ms): ${recoveries.map((r) => `${r.commitMs}/${r.healthMs}`).join(', ')}`,
  );
  expect(kills).toBeGreaterThanOrEqual(1);
  expect(recoveries).toHaveLength(kills);
  expect(problems).toEqual([]);
});
