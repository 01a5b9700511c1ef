/**
 * Adapter replicas for tests: several real `agent-gateway adapter` processes (cli.ts) on one
 * PostgreSQL database, each on its own loopback port, killed and restarted by the test by pid.
 * Also the readers the replica tests check with: replay of a whole channel, the dead letters,
 * the alerts, and the gap-free check of every channel's sequence, all over the HTTP API, so
 * that they hold whatever the store's schema.
 */
import { randomUUID } from 'node:crypto';
import { type ChildAdapter, spawnAdapter } from './cli.js';
import { call, type Json } from './http.js';
import { testDatabase } from './pg.js';
import { AGENTS, CHANNELS, tempDir, writeTopology } from './topology.js';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every channel of the test topology: the group channels and each agent's `@agent`. */
export const ALL_CHANNELS = [...Object.keys(CHANNELS), ...AGENTS.map((a) => `@${a}`)];

/** A member that may replay `channel`: the agent of `@agent`, else the first member. */
export function readerOf(channel: string): string {
  return channel.startsWith('@') ? channel.slice(1) : CHANNELS[channel]![0]!;
}

/**
 * Adapter processes sharing one database and one topology. Each slot holds the process now
 * running there (or none while it is down); every process ever started is in `started`, so
 * that `stop` can end each by its pid.
 */
export class Replicas {
  readonly started: ChildAdapter[] = [];
  readonly #live: (ChildAdapter | undefined)[];
  readonly #ports: number[];

  /** `env`: the environment of the process started in each slot (none added by default). */
  constructor(
    readonly args: readonly string[],
    readonly count: number,
    readonly env: (slot: number) => Record<string, string> = () => ({}),
  ) {
    this.#live = Array.from({ length: count }, () => undefined);
    this.#ports = Array.from({ length: count }, () => 0);
  }

  /**
   * Starts slot i and resolves once it is ready. `samePort`: on the port it had before (a
   * sidecar's adapter URL is fixed); else on a new one (port 0). A port just freed by a kill
   * may be briefly busy: tried again a few times.
   */
  async start(i: number, { samePort = false } = {}): Promise<ChildAdapter> {
    if (this.#live[i] !== undefined) throw new Error(`replica ${i} is already running`);
    const port = samePort ? this.#ports[i]! : 0;
    for (let attempt = 1; ; attempt++) {
      try {
        const proc = await spawnAdapter(
          [...this.args, '--listen', `127.0.0.1:${port}`],
          this.env(i),
        );
        this.started.push(proc);
        this.#live[i] = proc;
        this.#ports[i] = Number(new URL(proc.url).port);
        return proc;
      } catch (err) {
        if (attempt >= 5 || !String(err).includes('EADDRINUSE')) throw err;
        await sleep(200 * attempt);
      }
    }
  }

  /** SIGKILLs slot i and waits until the process is gone. */
  async kill(i: number): Promise<void> {
    const proc = this.#live[i];
    if (proc === undefined) throw new Error(`replica ${i} is not running`);
    this.#live[i] = undefined;
    proc.child.kill('SIGKILL');
    const exit = await proc.exited;
    if (exit.signal !== 'SIGKILL')
      throw new Error(`replica ${i} (pid ${proc.pid}) had exited before its kill: ${exit.code}`);
  }

  /** The URL of slot i, or undefined while it is down. */
  url(i: number): string | undefined {
    return this.#live[i]?.url;
  }

  /** The URL of slot i, which must be up. */
  urlOf(i: number): string {
    const url = this.url(i);
    if (url === undefined) throw new Error(`replica ${i} is down`);
    return url;
  }

  /** The slots running now. */
  liveSlots(): number[] {
    return this.#live.flatMap((p, i) => (p === undefined ? [] : [i]));
  }

  /** The process of slot i, if up (its log lines are in `.lines`). */
  process(i: number): ChildAdapter | undefined {
    return this.#live[i];
  }

  /** Processes started and not yet exited, by pid. */
  running(): number[] {
    return this.started
      .filter((p) => p.child.exitCode === null && p.child.signalCode === null)
      .map((p) => p.pid);
  }

  /**
   * Stops every process still running: SIGTERM, then SIGKILL after `graceMs`; resolves once
   * all have exited.
   */
  async stop(graceMs = 10_000): Promise<void> {
    const alive = this.started.filter(
      (p) => p.child.exitCode === null && p.child.signalCode === null,
    );
    for (const p of alive) p.child.kill('SIGTERM');
    const timer = setTimeout(() => {
      for (const p of alive)
        if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    }, graceMs);
    await Promise.all(alive.map((p) => p.exited));
    clearTimeout(timer);
    this.#live.fill(undefined);
  }

  /** SIGKILLs whatever is still running (for afterAll). */
  async killAll(): Promise<void> {
    for (const p of this.started)
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    await Promise.all(this.started.map((p) => p.exited));
    this.#live.fill(undefined);
  }

  /** The last log lines of every process started, for a failure message. */
  logs(tail = 15): string {
    return this.started
      .map((p) => `--- pid ${p.pid}:\n${p.lines.slice(-tail).join('\n')}`)
      .join('\n');
  }
}

/** A fresh database, a topology file, and `count` replicas started on it at once. */
export interface ReplicaSet {
  replicas: Replicas;
  db: { url: string; drop(): Promise<void> };
  dir: string;
  topology: string;
  /** Kills every process still running, drops the database, removes the folder. */
  cleanup: () => Promise<void>;
}

/**
 * Starts `count` (3) replicas together (they run the migrations at once, under the store's
 * advisory lock) on a fresh database from test/helpers/pg.ts (or `db`: one on a server of the
 * test's own, pg-server.ts), with `args` added to each and `env` (by slot) in its environment.
 */
export async function startReplicaSet(
  args: readonly string[] = [],
  count = 3,
  {
    start = true,
    db: given,
    env,
  }: {
    start?: boolean;
    db?: { url: string; drop(): Promise<void> };
    env?: (slot: number) => Record<string, string>;
  } = {},
): Promise<ReplicaSet> {
  const db = given ?? (await testDatabase());
  const { dir, cleanup: rm } = tempDir('agw-replicas-');
  const topology = writeTopology(dir);
  const replicas = new Replicas(['--topology', topology, '--db', db.url, ...args], count, env);
  const cleanup = async () => {
    await replicas.killAll();
    await db.drop();
    rm();
  };
  if (start) {
    try {
      await Promise.all(Array.from({ length: count }, (_, i) => replicas.start(i)));
    } catch (err) {
      await cleanup();
      throw err;
    }
  }
  return { replicas, db, dir, topology, cleanup };
}

/** POST /v1/messages as `agent`; the answer as it came (any status). */
export function post(url: string, agent: string, body: object) {
  return call(url, 'POST', '/v1/messages', { agent, body });
}

/** A new envelope for a status message to `to`. */
export function envelope(to: string, payload: object = {}) {
  return { idempotency_key: randomUUID(), to, kind: 'status', payload };
}

/** Every message of `channel`, replayed page by page as `agent` (a member). */
export async function replayAll(url: string, channel: string, agent = readerOf(channel)) {
  const out: Json[] = [];
  let after = 0;
  for (;;) {
    const r = await call(
      url,
      'GET',
      `/v1/channels/${encodeURIComponent(channel)}/messages?after=${after}&limit=1000`,
      { agent },
    );
    if (r.status !== 200)
      throw new Error(`replay ${channel} as ${agent}: ${r.status} ${JSON.stringify(r.body)}`);
    const page = r.body.messages as Json[];
    out.push(...page);
    if (r.body.next_after === null || page.length === 0) return out;
    after = r.body.next_after as number;
  }
}

/**
 * Replays every channel of the topology and checks each sequence runs 1..N, with no gap and
 * no repeat; answers every message by channel. `problems` collects what is wrong, so that a
 * test reports all of it at once.
 */
export async function replayEveryChannel(url: string) {
  const byChannel = new Map<string, Json[]>();
  const problems: string[] = [];
  for (const c of ALL_CHANNELS) {
    const msgs = await replayAll(url, c);
    byChannel.set(c, msgs);
    const seqs = msgs.map((m) => m.channel_sequence_id as number);
    const bad = seqs.flatMap((s, i) => (s === i + 1 ? [] : [`position ${i + 1} holds ${s}`]));
    if (bad.length > 0)
      problems.push(`${c}: sequence is not 1..${seqs.length}: ${bad.slice(0, 5).join(', ')}`);
    for (const m of msgs)
      if (m.channel !== c) problems.push(`${c}: replay served ${m.message_id} of ${m.channel}`);
  }
  return { byChannel, problems };
}

/** Every dead letter, paged as the alerts_to agent (orchestrator). */
export async function deadLetters(url: string): Promise<Json[]> {
  const out: Json[] = [];
  let after = 0;
  for (;;) {
    const r = await call(url, 'GET', `/v1/dead-letters?after=${after}&limit=1000`, {
      agent: 'orchestrator',
    });
    if (r.status !== 200) throw new Error(`dead letters: ${r.status} ${JSON.stringify(r.body)}`);
    const page = r.body.dead_letters as Json[];
    out.push(...page);
    if (r.body.next_after === null || page.length === 0) return out;
    after = r.body.next_after as number;
  }
}

/** The adapter's alerts to orchestrator (its `@orchestrator` channel, replayed). */
export async function alerts(url: string): Promise<Json[]> {
  return (await replayAll(url, '@orchestrator', 'orchestrator')).filter(
    (m) => m.sender === 'adapter',
  );
}
