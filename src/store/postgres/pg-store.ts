/**
 * The PostgreSQL store: the Store of store.ts on one database that any number of adapters
 * (replicas) share, every guarantee of the SQLite store kept across them
 * (docs/design/postgres.md). A group of operations runs in one transaction that first locks,
 * in one fixed order, the redrives it steps (an operator's bulk redrive: nothing else locks
 * them), the channels it appends to, then the agents rows it touches (a paused agent's pause is
 * in its row), the audit log's end when it appends to it, then the threads whose budgets it
 * counts; sweeps, pruning and the alerts that fell due run in short transactions of their own
 * right after it, inside the same commit(). The SQL is in pg-sql.ts (and, built from filters,
 * in pg-operators.ts).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { ADAPTER_SENDER, type Assignment } from '../../protocol/envelope.js';
import { GatewayError, isGatewayError } from '../../protocol/errors.js';
import { uuidv7, uuidv7Time } from '../../protocol/ids.js';
import { PAGE_ITEM_OVERHEAD } from '../../protocol/limits.js';
import { deliveryJson } from '../../protocol/wire.js';
import type { AlertEvent, DueAlert } from '../rules/alert-rows.js';
import { type AuditAnchor, type AuditAnchorRow, anchorView } from '../rules/audit-chain.js';
import { CommitEffectsLog } from '../rules/commit-effects.js';
import { CorruptRows } from '../rules/corrupt-rows.js';
import { deliveryConfig, newStats, statsCopy } from '../rules/deliveries.js';
import {
  type JourneyCopyRow,
  type JourneyEventRow,
  journeyRows,
  type LaneHeadRow,
  POLL_MARK_MS,
} from '../rules/journey.js';
import {
  type AuditRow,
  actAudit,
  auditView,
  messageAudit,
  redriveState,
} from '../rules/operators.js';
import { DELIVERY_FIELDS_BYTES, fittingAsync } from '../rules/page-bytes.js';
import {
  agentState,
  deadLetterView,
  deliveryStates,
  messageStatusOf,
  threadPage,
} from '../rules/read-views.js';
import {
  cancelRefusal,
  fromScheduled,
  type ScheduledRow,
  SWEEP_SCHEDULED,
  scheduledDraft,
  scheduledStatus,
} from '../rules/scheduled.js';
import { draftSize, storageRefusal } from '../rules/storage.js';
import {
  alertDraft,
  assignment,
  type BodyRow,
  type ChannelRow,
  type DeadLetterRow,
  type DeadRow,
  newMessage,
  pastDeadline,
  type RecipientRow,
  rejected,
  repeatOutcome,
} from '../rules/stored-message.js';
import { type Placement, withThreadFields } from '../rules/thread-rows.js';
import {
  type AgentState,
  type AppendOutcome,
  type AuditEntry,
  type Committed,
  DEFAULT_BUDGETS,
  DEFAULT_STORAGE,
  type DeadLetterFilter,
  type DeliveryConfig,
  type DeliveryJson,
  DeliveryState,
  type DeliveryStats,
  type JourneyRows,
  type MessageDraft,
  type MessageQuery,
  type MessageStatus,
  type OpResults,
  type PauseEvent,
  type RedriveDetail,
  type RedriveState,
  type Settled,
  StorageFailure,
  type StorageLimits,
  type StorageUse,
  type Store,
  type StoreOp,
  type ThreadBudgets,
  type ThreadPage,
} from '../store.js';
import { AlertFold } from './pg-alerts.js';
import { type DeliveryRow, PgDeliveries, type ReadyRow } from './pg-deliveries.js';
import {
  appendAudit,
  type Built,
  createRedrive,
  deadLettersStatement,
  lockRedrives,
  pruneAudit,
  type RedriveTableRow,
  searchStatement,
  setPaused,
  stepRedrive,
} from './pg-operators.js';
import { takeReply } from './pg-replies.js';
import { PG_MIGRATIONS, PG_SQL, type PgStatement } from './pg-sql.js';
import { PgThreads } from './pg-threads.js';
import { keyOf, Tx } from './pg-tx.js';
import { type PgForeignEffects, PgWake, wakePayload } from './pg-wake.js';
import { ReadSlots } from './read-slots.js';

export interface PgStoreOptions {
  /** full (default): a commit that writes a message waits for its WAL flush; normal: none do. */
  readonly sync?: 'full' | 'normal';
  /** Bounds, leases, retries and the alert recipient; defaults fit tests of the write path. */
  readonly delivery?: Partial<DeliveryConfig>;
  /** Bounds on what the store holds (reserveBytes is not checked here: the docs say why). */
  readonly storage?: Partial<StorageLimits>;
  /** Hop and thread budgets; DEFAULT_BUDGETS for what is left out. */
  readonly budgets?: Partial<ThreadBudgets>;
  /** How often a parked poll looks again by itself, ms. Default 1,000. */
  readonly safetyPollMs?: number;
  /** Connections of the read pool. Default 4. */
  readonly readConnections?: number;
}

/** Expired leases handled per sweep transaction. */
const SWEEP_CHUNK = 500;
/** Tries of a group that lost a race (serialization, deadlock, a unique key) before it fails. */
const MAX_TRIES = 5;
const RETRIED = new Set(['40001', '40P01', '23505']);

/**
 * How long a statement waits for a row or advisory lock before PostgreSQL aborts it (55P03):
 * 2 s. A healthy group holds its locks for a few ms (two round trips, docs/design/postgres.md),
 * so a wait this long means the holder is stuck: a replica SIGSTOPped, paused or partitioned in
 * the middle of a transaction (11-20 s stalls of unrelated sends were seen: docs/design/postgres.md). Short
 * enough that LOCK_TRIES waits (4 s) and a retry by the sidecar fit its 10 s call timeout.
 */
const LOCK_TIMEOUT_MS = 2000;
/** Tries of a group whose lock wait timed out, before it fails as a StorageFailure (503). */
const LOCK_TRIES = 2;
/**
 * A commit connection's statement: 5 s, past a lock wait (2 s) and any group's work (ms), short
 * of the sidecar's 10 s timeout, so a server that stalls (I/O, a full WAL disk) answers 503.
 */
const COMMIT_STATEMENT_TIMEOUT_MS = 5000;
/** A read (replay, thread page, status): 10 s, the sidecar's call timeout; nobody waits longer. */
const READ_STATEMENT_TIMEOUT_MS = 10_000;
/**
 * A session idle inside a transaction is ended by the server after 5 s. Ours never idle there
 * (a group is pipelined: its statements are sent at once), so only a frozen replica is: its
 * locks go after 5 s instead of until TCP notices (2 h by default) or it is thawed.
 */
const IDLE_IN_TRANSACTION_MS = 5000;
/** Connecting: 5 s, so that a server that accepts and never answers cannot hang a commit. */
const CONNECT_TIMEOUT_MS = 5000;
/**
 * TCP keepalive on every connection, first probe after 10 s idle: a server lost without a RST
 * (a partition, a VM gone) is noticed by the probes instead of never (the LISTEN connection is
 * idle for long). Node sets only the idle time; the interval and count are the kernel's
 * (net.ipv4.tcp_keepalive_intvl, _probes); the server's side is its tcp_keepalives_* settings.
 */
const KEEPALIVE_IDLE_MS = 10_000;
/**
 * /health turns 503 while a commit has been running longer than this: 2 s, the lock timeout.
 * Groups commit in ms; one that runs this long waits on a lock or on a server that does not
 * answer, and every write of this adapter waits behind it. A slow commit that passes (a large
 * prune) costs at most a probe or two: the readiness probe (k8s/base/adapter.yaml, every 5 s)
 * takes a replica out after 3 failures in a row, so only a stall of ~15 s does.
 */
const COMMIT_STALL_MS = LOCK_TIMEOUT_MS;
/** The sum of stored bytes is read again after this long, ms, or when near the bound. */
const USED_EVERY_MS = 1000;

/** bigint (int8) columns as numbers: every id, time and size here is below 2^53. */
const TYPES = {
  getTypeParser: (oid: number, format?: string) =>
    oid === 20
      ? (v: string) => Number(v)
      : (pg.types.getTypeParser as (oid: number, format?: string) => unknown)(oid, format),
};

export async function openPgStore(url: string, opts: PgStoreOptions = {}): Promise<PgStore> {
  const store = new PgStore(url, opts);
  try {
    await store.open();
  } catch (err) {
    await store.close();
    throw err;
  }
  return store;
}

export class PgStore implements Store {
  readonly stats: DeliveryStats = newStats();
  readonly safetyPollMs: number;
  /** This store's id in the announcements it makes (its own are not told back to it). */
  readonly instance = randomUUID();
  readonly #config: pg.ClientConfig;
  readonly #pool: pg.Pool;
  readonly #wake: PgWake;
  /** The connection every commit runs on, one at a time; made again after it broke. */
  #client: pg.Client | undefined;
  #clientBroken = false;
  #closed = false;
  readonly #messageSync: 'full' | 'normal';
  readonly #cfg: Required<DeliveryConfig>;
  readonly #alertsTo: string;
  readonly #deliveries: PgDeliveries;
  readonly #threads: PgThreads;
  readonly #limits: StorageLimits;
  /** Agents rows known to exist (rows are never deleted): no INSERT before locking them. */
  readonly #known = new Set<string>();
  /** When each agent's last poll was last written by this replica (#polled). */
  readonly #pollsWritten = new Map<string, number>();
  /** Message rows known to fail their checksum (found by any read since open). */
  readonly #corrupt = new CorruptRows();
  /** The size bound's count: the sum as last read, and what this store committed since. */
  #usedBase = 0;
  #usedAdded = 0;
  #usedAt = Number.NEGATIVE_INFINITY;

  constructor(url: string, opts: PgStoreOptions) {
    this.#config = {
      connectionString: url,
      types: TYPES as pg.ClientConfig['types'],
      keepAlive: true,
      keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    };
    this.#messageSync = opts.sync ?? 'full';
    this.safetyPollMs = opts.safetyPollMs ?? 1000;
    this.#cfg = deliveryConfig(opts.delivery);
    this.#alertsTo = this.#cfg.alertsTo;
    this.#deliveries = new PgDeliveries(this.#cfg, this.stats);
    this.#threads = new PgThreads({ ...DEFAULT_BUDGETS, ...opts.budgets }, this.#alertsTo);
    this.#limits = { ...DEFAULT_STORAGE, ...opts.storage };
    this.#pool = new pg.Pool({
      ...this.#config,
      max: opts.readConnections ?? 4,
      idleTimeoutMillis: 30_000,
      // a read that waits longer for a connection fails (503) instead of hanging: /health
      // answers within a probe's time whatever holds the pool
      connectionTimeoutMillis: 5_000,
      application_name: 'agw-read',
      statement_timeout: READ_STATEMENT_TIMEOUT_MS,
      lock_timeout: LOCK_TIMEOUT_MS,
      idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_MS,
    });
    this.#pool.on('error', () => undefined); // an idle client's loss: the next read reconnects
    this.#wake = new PgWake(this.#config, this.instance);
  }

  /** Connects, migrates (once across replicas starting together), listens. */
  async open(): Promise<void> {
    const c = await this.#commitClient();
    await migrate(c);
    if (this.#alertsTo !== '') await this.ensureChannels([`@${this.#alertsTo}`]);
    await this.#wake.start();
  }

  // ---------------------------------------------------------------------------------------
  // commit

  /**
   * The caller runs one commit at a time; should two come at once anyway, the second waits
   * (they share the commit connection, so they could not interleave).
   */
  commit(ops: readonly StoreOp[]): Promise<Committed> {
    const run = this.#commitChain.then(async () => {
      this.#commitSince = Date.now();
      try {
        return await this.#commit(ops);
      } finally {
        this.#commitSince = undefined;
      }
    });
    this.#commitChain = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  #commitChain: Promise<void> = Promise.resolve();
  /** When the commit running now began (Date.now()); undefined while none runs. */
  #commitSince: number | undefined;

  async #commit(ops: readonly StoreOp[]): Promise<Committed> {
    if (this.#closed) throw new StorageFailure('the PostgreSQL store is closed');
    const results: Settled[] = new Array(ops.length);
    const fx = new CommitEffectsLog();
    const main = ops.flatMap((op, i) => (op.op === 'sweep' || op.op === 'prune' ? [] : [i]));
    let raised = false;
    if (main.length > 0) {
      const tx = await this.#transaction(true, async (tx) => {
        await this.#lockGroup(
          tx,
          main.map((i) => ops[i]!),
        );
        for (const i of main) results[i] = await this.#settle(tx, ops[i]!);
      });
      merge(fx, tx);
      raised = tx.events.length > 0;
    }
    // Sweeps and pruning in transactions of their own. Once the group above committed, their
    // failure fails nothing of it: what they left is done by the next sweep or pass.
    let flushAt: number | undefined;
    const soft = main.length > 0;
    for (const [i, op] of ops.entries()) {
      if (op.op === 'sweep') {
        flushAt = Math.max(flushAt ?? op.now, op.now);
        results[i] = { ok: undefined };
        const swept = await this.#followUp(soft, fx, () => this.#sweep(op.now, fx));
        raised ||= swept === true;
      } else if (op.op === 'prune') {
        const n = await this.#followUp(soft, fx, () => this.#prune(op.before, op.keep, op.limit));
        results[i] = { ok: n ?? 0 };
      }
    }
    if (raised || flushAt !== undefined) {
      await this.#followUp(soft || flushAt === undefined, fx, () => this.#foldAlerts(fx, flushAt));
    }
    return { results, effects: fx.take() };
  }

  /** A follow-up transaction; with `soft`, its failure is left for the next sweep to redo. */
  async #followUp<T>(
    soft: boolean,
    fx: CommitEffectsLog,
    run: () => Promise<T>,
  ): Promise<T | undefined> {
    try {
      return await run();
    } catch (err) {
      if (!soft) throw err;
      fx.timingChanged = true; // the due timer looks again
      return undefined;
    }
  }

  /**
   * Runs `body` in a transaction on the commit connection: BEGIN, body, the agents rows and
   * alert events and announcement (Tx.finish), COMMIT; `generic`: with the prepared statements'
   * generic plans (the group's, pg-tx.ts). A race lost to another replica
   * (serialization failure, deadlock, a unique key taken) is tried again whole, from a fresh
   * Tx, with the counters of memory as they were; a failure of the storage itself is a
   * StorageFailure.
   */
  async #transaction(generic: boolean, body: (tx: Tx) => Promise<void>): Promise<Tx> {
    let lockWaits = 0;
    for (let attempt = 1; ; attempt++) {
      const counted = statsCopy(this.stats);
      const unreported = [...this.#corrupt.unreported];
      const client = await this.#commitClient();
      const tx = new Tx(client, generic);
      try {
        await body(tx);
        tx.finish(wakePayload(this.instance, tx.fx.woken, tx.fx.timingChanged));
        // A transaction that wrote a message, an ack or a dead letter by nack waits for its
        // WAL flush (and a synchronous standby's) at AGW_SYNC=full: their 2xx promise that a
        // crash of the server takes nothing back. The others (leases, extensions, heartbeats,
        // retried nacks, sweeps) do not: losing one is a redelivery, and the next synchronous
        // commit flushes theirs too, the WAL being one sequence (docs/design/durability.md).
        await tx.commit(
          this.#messageSync === 'full' && (tx.wroteMessage || tx.wroteAck || tx.wroteOperatorAct),
        );
        for (const id of tx.created) this.#known.add(id);
        for (const [agent, at] of tx.polls) this.#pollsWritten.set(agent, at);
        this.#usedAdded += tx.addedBytes;
        return tx;
      } catch (err) {
        Object.assign(this.stats, counted);
        this.#corrupt.restore(unreported);
        if (tx.begun) {
          await client.query('ROLLBACK').catch(() => {
            this.#clientBroken = true;
          });
        }
        if (isConnectionLoss(err)) this.#clientBroken = true;
        const code = (err as { code?: unknown }).code;
        if (code === LOCK_NOT_AVAILABLE) {
          // a holder stuck mid-transaction: tried again (it may be gone: its session ended
          // by idle_in_transaction_session_timeout), then answered 503 so the sender retries
          if (++lockWaits < LOCK_TRIES && attempt < MAX_TRIES) continue;
          throw new StorageFailure(
            `a lock wait timed out ${lockWaits} times (lock_timeout ${LOCK_TIMEOUT_MS} ms): another session holds a row this group needs`,
            { cause: err },
          );
        }
        if (typeof code === 'string' && RETRIED.has(code) && attempt < MAX_TRIES) continue;
        throw storageFailureOf(err) ?? err;
      }
    }
  }

  async #commitClient(): Promise<pg.Client> {
    if (this.#client !== undefined && !this.#clientBroken) return this.#client;
    const old = this.#client;
    this.#client = undefined;
    if (old !== undefined) await old.end().catch(() => undefined);
    // pipelined: a transaction's statements are sent without waiting for the ones before
    // (pg-tx.ts), so a group costs a few round trips whatever its size
    const c = new pg.Client({
      ...this.#config,
      application_name: 'agw-commit',
      pipeline: true,
      statement_timeout: COMMIT_STATEMENT_TIMEOUT_MS,
      lock_timeout: LOCK_TIMEOUT_MS,
      idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_MS,
    } as pg.ClientConfig);
    c.on('error', () => {
      this.#clientBroken = true;
    });
    try {
      await c.connect();
    } catch (err) {
      await c.end().catch(() => undefined);
      throw storageFailureOf(err) ?? err;
    }
    this.#client = c;
    this.#clientBroken = false;
    return c;
  }

  /**
   * The locks of a group, in the one order every transaction of every replica takes them:
   * its channels (sorted), then the agents rows it touches (sorted: recipients, senders, the
   * agent of each lease, ack, nack, extension and heartbeat, the recipient of a dead letter to
   * replay), then the threads its replies count in (sorted).
   */
  async #lockGroup(tx: Tx, ops: readonly StoreOp[]): Promise<void> {
    const channels = new Set<string>();
    const agents = new Set<string>();
    const drafts: MessageDraft[] = [];
    /** Agents whose deliveries an op of the group changes, with the number of such ops. */
    const touched = new Map<string, number>();
    const touch = (a: string) => touched.set(a, (touched.get(a) ?? 0) + 1);
    const rows: number[] = [];
    let appends = false;
    let audits = false;
    // the redrives it steps first, and the recipients of the dead letters they take next
    const steps = ops.flatMap((op) => (op.op === 'redrive_step' ? [op] : []));
    if (steps.length > 0) {
      for (const r of await lockRedrives(tx, steps)) {
        agents.add(r);
        touch(r);
      }
    }
    // dead letters do not change but for replay_delivery: read before any lock, all at once
    const replays = await Promise.all(
      ops.map((op) =>
        op.op === 'replay_dead_letter'
          ? tx.one<DeadLetterRow>('deadLetterOne', [op.id])
          : undefined,
      ),
    );
    // a cancel's scheduled message, read unlocked for its channel: the cancel locks the
    // channel before the row, as a firing does (#fireDue), so the two never wait in a circle
    const cancels = await Promise.all(
      ops.map((op) =>
        op.op === 'cancel_scheduled'
          ? tx.one<{ channel: string }>('scheduledById', [op.messageId])
          : undefined,
      ),
    );
    for (const [i, op] of ops.entries()) {
      // an operator's act appends its audit entry (#settle)
      if ('audited' in op && op.audited === true) audits = true;
      switch (op.op) {
        case 'cancel_scheduled':
          if (cancels[i] !== undefined) channels.add(cancels[i]!.channel);
          break;
        case 'append':
          appends ||= op.drafts.length > 0;
          for (const d of op.drafts) {
            channels.add(d.channel);
            agents.add(d.sender);
            for (const r of d.recipients) {
              agents.add(r);
              touch(r);
              tx.toCome.set(r, (tx.toCome.get(r) ?? 0) + 1);
            }
            if ((d.replyToId ?? null) !== null || d.replyTo !== null) drafts.push(d);
            // an operator's or alerts_to's message may append to the audit log (#append)
            audits ||= d.audited !== undefined;
          }
          break;
        case 'ack':
        case 'nack':
        case 'extend':
          rows.push(...op.ids);
          agents.add(op.agent);
          if (op.op !== 'extend') touch(op.agent);
          break;
        case 'lease':
        case 'take_reply':
          // a take of a reply leases as a lease does: under the asker's lock
          touch(op.agent);
          agents.add(op.agent);
          break;
        case 'heartbeat':
          agents.add(op.agent);
          break;
        case 'pause':
        case 'resume':
          // a lease of it reads its pause under this lock
          agents.add(op.agent);
          break;
        case 'audit':
        case 'prune_audit':
          audits = true;
          break;
        case 'replay_dead_letter': {
          const dl = replays[i];
          if (dl !== undefined) {
            agents.add(dl.recipient);
            touch(dl.recipient);
          }
          break;
        }
        default:
          break;
      }
    }
    // One round trip: the statements below are sent at once and run in this order. The
    // channels, then the agents rows; every key of the group, now that its senders are locked;
    // the deliveries its acks, nacks and extensions name; the ready deliveries of each lease
    // whose agent no other op of the group changes (a lease after an append to its agent reads
    // them later, behind that append's writes); the messages its replies name.
    const reads: Promise<unknown>[] = [tx.lockChannels(channels)];
    reads.push(tx.lockAgents(agents, this.#known));
    // the audit log's ends, after the agents rows: one transaction at a time appends to it or
    // prunes it
    if (audits) tx.write('lockAudit');
    reads.push(
      tx.loadKeys(
        ops.flatMap((op) =>
          op.op === 'append' ? op.drafts.map((d) => [d.sender, d.idempotencyKey] as const) : [],
        ),
      ),
    );
    if (appends && performance.now() - this.#usedAt >= USED_EVERY_MS) {
      const at = performance.now();
      reads.push(
        tx.one<{ used: number }>('storedBytes').then((r) => {
          this.#usedBase = r?.used ?? 0;
          this.#usedAdded = 0;
          this.#usedAt = at;
        }),
      );
    }
    if (rows.length > 0) reads.push(tx.readDeliveries([...new Set(rows)]));
    for (const op of ops) {
      if (op.op === 'lease' && op.max > 0 && touched.get(op.agent) === 1) {
        const q = tx.q<ReadyRow>('readyLanes', [op.agent, op.now, op.max]);
        reads.push(q.then((r) => tx.lanes.set(op, r)));
      }
    }
    const threads = drafts.length > 0 ? this.#threads.threadsOf(tx, drafts) : undefined;
    if (threads !== undefined) reads.push(threads);
    await Promise.all(reads);
    if (threads !== undefined) {
      // then their threads (sorted) and what their budgets count: a second round trip
      const ids = [...new Set(await threads)].sort();
      tx.lockThreads(ids);
      await this.#threads.loadCounts(tx, ids);
    }
  }

  /** An agents row this transaction did not lock up front (a rare race): locked now. */
  async #lockLate(tx: Tx, ids: readonly string[]): Promise<void> {
    if (ids.some((id) => !tx.agents.has(id))) await tx.lockAgents(ids, this.#known);
  }

  /** One operation; a GatewayError (thrown before it wrote anything) settles it alone. */
  async #settle(tx: Tx, op: StoreOp): Promise<Settled> {
    try {
      const ok = await this.#run(tx, op);
      // an operator's act and its audit entry: one transaction (its lock taken by #lockGroup)
      const act = actAudit(op, ok);
      if (act !== undefined) await appendAudit(tx, act);
      return { ok };
    } catch (err) {
      if (isGatewayError(err)) return { err };
      throw err;
    }
  }

  async #run(tx: Tx, op: StoreOp): Promise<OpResults[StoreOp['op']]> {
    switch (op.op) {
      case 'append': {
        const out: AppendOutcome[] = [];
        for (const d of op.drafts) out.push(await this.#append(tx, d));
        return out;
      }
      case 'lease':
        return await this.#lease(tx, op, op.agent, op.max, op.now, op.maxBytes);
      case 'ack':
        tx.wroteAck ||= op.ids.length > 0;
        return await this.#deliveries.ack(tx, op.agent, op.ids, op.now ?? Date.now());
      case 'nack':
        tx.wroteAck ||= op.ids.length > 0 && op.retry === false;
        return await this.#deliveries.nack(tx, op.agent, op.ids, op.now, op.retry, op.reason);
      case 'extend':
        return await this.#deliveries.extend(tx, op.agent, op.ids, op.extendMs, op.now);
      case 'heartbeat': {
        const a = tx.agent(op.agent);
        a.seen = op.now;
        a.dirty = true;
        return { pending: a.depth, critical_pending: a.critical };
      }
      case 'replay_dead_letter':
        return await this.#replayDeadLetter(tx, op.id, op.now, { dead_letter: op.id, by: op.by });
      case 'pause':
      case 'resume': {
        const answer = setPaused(tx, op.agent, op.op === 'pause', op.by, op.now);
        // its polls parked on every replica look again (the commit's announcement)
        if (op.op === 'resume' && answer.changed) tx.fx.woken.add(op.agent);
        return answer;
      }
      case 'redrive_create':
        return await createRedrive(tx, op.id, op.by, op.selection, op.rate, op.now);
      case 'redrive_step':
        return await stepRedrive(
          tx,
          op.id,
          op.max,
          (recipients) => this.#lockLate(tx, recipients),
          async (dl, by) =>
            (await this.#replayDeadLetter(tx, dl, op.now, { dead_letter: dl, by, redrive: op.id }))
              ?.replayed === true,
        );
      case 'audit':
        return await appendAudit(tx, op.entry);
      case 'prune_audit':
        return await pruneAudit(tx, op.before, op.limit);
      case 'alert':
        tx.raise(op.recipient, op.reason, op.messageId, 0, op.now, op.count);
        return undefined;
      case 'cancel_scheduled':
        return await this.#cancel(tx, op.sender, op.messageId, op.now);
      case 'take_reply':
        return await takeReply(tx, this.#deliveries, op.agent, op.messageId, op.now, (r, report) =>
          this.#intact(r, report),
        );
      case 'sweep':
      case 'prune':
        throw new Error(`${op.op} runs in a transaction of its own`);
    }
  }

  async #append(tx: Tx, d: MessageDraft): Promise<AppendOutcome> {
    // read under the sender's lock: a key another replica committed is seen here
    if (!tx.looked(d.sender, d.idempotencyKey)) await tx.loadKeys([[d.sender, d.idempotencyKey]]);
    const k = tx.keys.get(keyOf(d.sender, d.idempotencyKey));
    if (k !== undefined) return repeatOutcome(k, d);
    const late = pastDeadline(d);
    if (late !== undefined) return rejected(late);
    const placed = await this.#threads.place(tx, d);
    if (placed instanceof GatewayError) return rejected(placed);
    if (d.sender !== ADAPTER_SENDER) {
      const refused = await this.#admit(tx, d.sender, draftSize(d));
      if (refused !== undefined) {
        tx.raise(d.sender, 'storage_full', undefined, 0, d.receivedAt);
        return rejected(refused);
      }
    }
    this.#threads.record(tx, placed, d.receivedAt);
    const a =
      d.deliverAt !== undefined
        ? this.#schedule(tx, d, placed)
        : await this.#store(tx, uuidv7(d.receivedAt), d, placed, d.receivedAt);
    // in this transaction (its lock taken by #lockGroup): the message and its entry together
    const audit = messageAudit(d, a);
    if (audit !== undefined) await appendAudit(tx, audit);
    return { status: 201, assignment: a };
  }

  /**
   * The message with its channel's next sequence (the channel locked), and its copies made at
   * `now`: its receipt, or for a scheduled message, when it fires (as sqlite-store.ts #store).
   */
  async #store(
    tx: Tx,
    id: string,
    d: MessageDraft,
    placed: Placement,
    now: number,
  ): Promise<Assignment> {
    const counter = tx.seqs.get(d.channel);
    if (counter === undefined) throw new Error(`channel ${d.channel} has no sequence counter`);
    const seq = counter.last + 1;
    tx.wroteMessage = true;
    counter.last = seq;
    counter.moved = true;
    const m = newMessage(id, seq, d, placed);
    const { assignment: a, size, priority } = m;
    const quiet = d.sender === ADAPTER_SENDER;
    const states: DeliveryState[] = [];
    for (const r of d.recipients) {
      states.push(await this.#deliveries.admit(tx, r, id, priority, now, d.sender, quiet));
    }
    // sent with the group's next statement, not waited for
    tx.insertMessage(m.row, d.recipients, states, now, d.expiresAt ?? null);
    // a deadline is a moment every replica's due timer must know of (docs/design/time.md)
    if (d.expiresAt !== undefined) tx.fx.timingChanged = true;
    tx.keys.set(keyOf(d.sender, d.idempotencyKey), {
      message_id: id,
      channel: d.channel,
      seq,
      received_at: d.receivedAt,
      fingerprint: d.fingerprint,
      thread_id: a.thread_id,
      hop: a.hop,
    });
    const sender = tx.agent(d.sender);
    sender.bytes = (sender.bytes ?? 0) + size;
    sender.dirty = true;
    tx.addedBytes += size;
    for (const [i, recipient] of d.recipients.entries()) {
      const delivery = { recipient, priority, kind: d.kind, messageId: id };
      this.#deliveries.settle(tx, delivery, states[i]!, now);
    }
    return a;
  }

  /**
   * A message to send later (docs/design/time.md): its row in `scheduled`, acknowledged with a
   * null sequence; it takes its sequence and makes its copies when a sweep fires it (#fireDue).
   */
  #schedule(tx: Tx, d: MessageDraft, placed: Placement): Assignment {
    const id = uuidv7(d.receivedAt);
    tx.write('insertScheduled', [
      id,
      d.sender,
      d.idempotencyKey,
      d.fingerprint,
      d.channel,
      d.receivedAt,
      d.deliverAt,
      scheduledDraft(d, placed),
    ]);
    tx.wroteMessage = true;
    tx.fx.timingChanged = true;
    const a = assignment(id, d.channel, null, d.receivedAt, d, placed.threadId ?? id, placed.hop);
    tx.keys.set(keyOf(d.sender, d.idempotencyKey), {
      message_id: id,
      channel: d.channel,
      seq: null,
      deliver_at: d.deliverAt ?? null,
      received_at: d.receivedAt,
      fingerprint: d.fingerprint,
      thread_id: a.thread_id,
      hop: a.hop,
    });
    return a;
  }

  /**
   * DELETE /v1/messages/{id}: a scheduled message of `sender`, before it fires. Its channel
   * is locked (#lockGroup), then its row: a firing takes them in the same order, so the one
   * that comes second finds what the first did (a row gone: already sent).
   */
  async #cancel(
    tx: Tx,
    sender: string,
    messageId: string,
    now: number,
  ): Promise<OpResults['cancel_scheduled']> {
    const row = await tx.one<{ id: number; sender: string; cancelled_at: number | null }>(
      'scheduledLocked',
      [messageId],
    );
    if (row === undefined) {
      const at = uuidv7Time(messageId);
      const m =
        at === undefined
          ? undefined
          : await tx.one<{ sender: string }>('messageSender', [at, messageId]);
      throw cancelRefusal(m?.sender, sender, messageId);
    }
    if (row.sender !== sender) throw cancelRefusal(row.sender, sender, messageId);
    if (row.cancelled_at !== null) return { cancelled: true, changed: false };
    tx.write('cancelScheduled', [now, row.id]);
    tx.wroteOperatorAct = true; // answered 204: durable, as a message
    tx.fx.timingChanged = true;
    return { cancelled: true, changed: true };
  }

  /**
   * The refusal of a new message of `bytes` from `sender` past a storage bound (storage-
   * budget.ts admit): the size bound counts every sender's stored messages, read at most once
   * a second (and whenever near the bound) plus what this store committed since; the share,
   * the sender's own row, locked. The volume's reserve is not visible from a client.
   */
  async #admit(tx: Tx, sender: string, bytes: number): Promise<GatewayError | undefined> {
    const { maxBytes } = this.#limits;
    const margin = Math.max(1024 ** 2, maxBytes / 64);
    const now = performance.now();
    let used = this.#usedBase + this.#usedAdded + tx.addedBytes;
    if (now - this.#usedAt >= USED_EVERY_MS || used + bytes > maxBytes - margin) {
      const r = await tx.one<{ used: number }>('storedBytes');
      this.#usedBase = r?.used ?? 0;
      this.#usedAdded = 0;
      this.#usedAt = now;
      used = this.#usedBase + tx.addedBytes;
    }
    return storageRefusal(sender, bytes, used, tx.agent(sender).bytes ?? 0, this.#limits);
  }

  /**
   * Hands out an agent's ready deliveries (its row locked: one replica at a time), checked
   * against their checksums first; a corrupt one is quarantined (as sqlite/sqlite-store.ts #lease).
   */
  async #lease(
    tx: Tx,
    op: StoreOp,
    agent: string,
    max: number,
    now: number,
    maxBytes = Number.POSITIVE_INFINITY,
  ): Promise<DeliveryJson[]> {
    await this.#reportFinds(tx, now);
    this.#polled(tx, agent, now);
    // read in the group's first round trip when nothing before it changed this agent's queue
    let prefetched = tx.lanes.get(op);
    tx.lanes.delete(op);
    // paused by an operator (its row, read under the lock this lease holds, says so on every
    // replica): the poll waits out its `wait`; what it holds runs its course
    if (tx.agent(agent).paused !== null) return [];
    for (;;) {
      const ready = await this.#deliveries.ready(tx, agent, max, now, prefetched);
      prefetched = undefined;
      if (ready.length === 0) return [];
      const handed: { row: ReadyRow; json: string }[] = [];
      let quarantined = 0;
      let bytes = 0;
      for (const r of ready) {
        if (!this.#intact({ id: r.message, body: r.body, checksum: r.checksum }, false)) {
          await this.#deliveries.quarantine(tx, r.id, now);
          quarantined++;
          continue;
        }
        const json = withThreadFields(r.body);
        bytes += Buffer.byteLength(json) + DELIVERY_FIELDS_BYTES;
        if (handed.length > 0 && bytes > maxBytes) break;
        handed.push({ row: r, json });
      }
      if (handed.length === 0 && quarantined > 0) continue;
      const attempts = this.#deliveries.lease(
        tx,
        handed.map((h) => h.row),
        now,
      );
      const expires = now + this.#deliveries.leaseMs;
      return handed.map((h, i) => deliveryJson(h.row.id, attempts[i]!, expires, h.json));
    }
  }

  /**
   * The agent's last poll, for its journeys (docs/design/journey.md): written with the poll's
   * own transaction, at most once a second per agent from this replica, so that polls in a
   * burst cost one row. Counted as written once that transaction commits (#transaction).
   */
  #polled(tx: Tx, agent: string, now: number): void {
    const last = this.#pollsWritten.get(agent) ?? Number.NEGATIVE_INFINITY;
    if (now - last >= POLL_MARK_MS) tx.polls.set(agent, now);
  }

  /** Alerts about corrupt rows that reads found (as sqlite/sqlite-store.ts #reportFinds). */
  async #reportFinds(tx: Tx, now: number): Promise<void> {
    if (this.#corrupt.unreported.size === 0) return;
    const ids = this.#corrupt.takeUnreported();
    const rows = await tx.q<{ id: number; message_id: string; channel: string }>('messageWhere', [
      ids,
    ]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const id of ids) {
      const m = byId.get(id);
      if (m !== undefined) tx.raise(m.channel, 'checksum_mismatch', m.message_id, 0, now);
    }
  }

  async #replayDeadLetter(
    tx: Tx,
    id: number,
    now: number,
    detail: RedriveDetail,
  ): Promise<OpResults['replay_dead_letter']> {
    const dl = await tx.one<DeadLetterRow>('deadLetterLocked', [id]);
    if (dl === undefined) return undefined;
    if (dl.replay_delivery !== null) return { delivery_id: dl.replay_delivery, replayed: false };
    await this.#lockLate(tx, [dl.recipient]);
    const state = await this.#deliveries.admit(
      tx,
      dl.recipient,
      dl.message_id,
      dl.priority,
      now,
      undefined,
      false,
    );
    const { id: delivery } = (await tx.one<{ id: number }>('insertDelivery', [
      dl.message,
      dl.recipient,
      dl.channel,
      dl.priority,
      state,
      now,
      // the message's deadline stays its own: a replay after it expires again at once
      dl.expires_at ?? null,
    ]))!;
    tx.inserted++;
    if (dl.expires_at != null) tx.fx.timingChanged = true;
    // the journey goes on with the new copy, `redriven` first (as sqlite/sqlite-deliveries.ts
    // writes it); a copy a full queue refuses at once then ends with its dead letter's event
    const copy = { id: delivery, message: dl.message, recipient: dl.recipient, attempt: 0 };
    tx.journeyEvent(copy, 'redriven', now, detail);
    if (state === DeliveryState.deadLetter) {
      tx.journeyEvent(copy, 'dead_lettered', now, { reason: 'queue_full', note: null });
    }
    const d = {
      recipient: dl.recipient,
      priority: dl.priority,
      kind: dl.kind!, // deadLetterLocked selects it
      messageId: dl.message_id,
    };
    this.#deliveries.settle(tx, d, state, now);
    tx.write('markReplayed', [delivery, id]);
    tx.wroteMessage = true;
    return { delivery_id: delivery, replayed: true };
  }

  /**
   * What fell due, each kind in transactions of its own, in chunks: scheduled messages fire
   * (#fireDue), expired leases become failed attempts, pending copies past their deadline
   * become dead letters. Candidates are read unlocked, their agents locked with SKIP LOCKED
   * (another replica sweeping one does it), each candidate checked again under the lock.
   * Resolves whether it raised alerts.
   */
  async #sweep(now: number, fx: CommitEffectsLog): Promise<boolean> {
    let raised = false;
    let first = true;
    const steps: ((tx: Tx) => Promise<boolean>)[] = [
      (tx) => this.#fireDue(tx, now),
      (tx) => this.#expire(tx, now, 'expiredLeases', 'expiredLocked'),
      (tx) => this.#expire(tx, now, 'expiredPending', 'expiredPendingLocked'),
    ];
    for (const step of steps) {
      for (;;) {
        let more = false;
        const tx = await this.#transaction(false, async (tx) => {
          if (first) await this.#reportFinds(tx, now);
          more = await step(tx);
        });
        first = false;
        merge(fx, tx);
        raised ||= tx.events.length > 0;
        if (!more) break;
      }
    }
    return raised;
  }

  /** One chunk of expired leases or of pending copies past their deadline; whether more wait. */
  async #expire(
    tx: Tx,
    now: number,
    found: 'expiredLeases' | 'expiredPending',
    locked: 'expiredLocked' | 'expiredPendingLocked',
  ): Promise<boolean> {
    const candidates = await tx.q<{ id: number; recipient: string }>(found, [now, SWEEP_CHUNK]);
    if (candidates.length === 0) return false;
    const agents = await tx.lockAgents(
      candidates.map((r) => r.recipient),
      this.#known,
      true,
    );
    const rows = await tx.q<DeliveryRow>(locked, [candidates.map((r) => r.id), agents, now]);
    if (found === 'expiredLeases') this.#deliveries.expire(tx, rows, now);
    else this.#deliveries.expirePending(tx, rows, now);
    return candidates.length === SWEEP_CHUNK && rows.length > 0;
  }

  /**
   * One chunk of the scheduled messages due by `now`, sent in (deliver_at, id) order, each
   * with its channel's next sequence (docs/design/time.md). The due rows are read unlocked;
   * then, in the order every group takes them, their channels and their senders' and
   * recipients' agents rows are locked, and the rows read again under those locks (FOR UPDATE):
   * a row another replica fired meanwhile is gone, one a cancel reached first is cancelled, and
   * a cancel that comes second waits for the channel and finds the row gone. Whether more wait.
   */
  async #fireDue(tx: Tx, now: number): Promise<boolean> {
    const due = await tx.q<{ id: number; channel: string; sender: string; draft: string }>(
      'dueScheduled',
      [now, SWEEP_SCHEDULED],
    );
    if (due.length === 0) return false;
    await tx.lockChannels(due.map((r) => r.channel));
    const agents = new Set<string>();
    for (const r of due) {
      agents.add(r.sender);
      for (const to of (JSON.parse(r.draft) as { recipients: string[] }).recipients) {
        agents.add(to);
        tx.toCome.set(to, (tx.toCome.get(to) ?? 0) + 1);
      }
    }
    await tx.lockAgents(agents, this.#known);
    const rows = await tx.q<ScheduledRow>('dueScheduledLocked', [due.map((r) => r.id), now]);
    for (const r of rows) {
      const { draft, placed } = fromScheduled(r);
      await this.#lockLate(tx, [draft.sender, ...draft.recipients]);
      await this.#store(tx, r.message_id, draft, placed, now);
    }
    if (rows.length > 0) tx.write('deleteScheduled', [rows.map((r) => r.id)]);
    return due.length === SWEEP_SCHEDULED;
  }

  /**
   * Old messages with their deliveries and dead letters, and the counts of threads quiet since
   * `before`; the senders' rows locked with SKIP LOCKED (another replica pruning them does
   * it), each message checked again under the lock of its dead letters (a replay waits).
   */
  async #prune(before: number, keep: readonly string[], limit: number): Promise<number> {
    let n = 0;
    await this.#transaction(false, async (tx) => {
      n = 0;
      this.#threads.prune(tx, before, limit);
      // cancelled scheduled messages: their keys live as long as a message's
      tx.write('pruneScheduled', [before, limit]);
      const found = await tx.q<{ id: number; sender: string }>('prunable', [before, keep, limit]);
      if (found.length === 0) return;
      await tx.lockAgents(
        found.map((r) => r.sender),
        this.#known,
        true,
      );
      const ids = found.filter((r) => tx.agents.has(r.sender)).map((r) => r.id);
      if (ids.length === 0) return;
      await tx.q('lockPrunableDeadLetters', [ids]);
      const rows = await tx.q<{ id: number; sender: string; size: number }>('prunableLocked', [
        ids,
      ]);
      if (rows.length === 0) return;
      tx.write('pruneMessages', [rows.map((r) => r.id)]);
      for (const r of rows) {
        const a = tx.agent(r.sender);
        a.bytes = Math.max(0, (a.bytes ?? 0) - r.size);
        a.dirty = true;
        tx.addedBytes -= r.size;
      }
      n = rows.length;
    });
    return n;
  }

  /**
   * The alerts transaction: under pg_advisory_xact_lock(LOCK_ALERTS), every alert event is
   * folded into alert_state in id order (pg-alerts.ts), and the alerts that fell due (with
   * `flushAt`, those whose window has passed too) are written to alerts_to as messages:
   * its channel's lock, then its agents row. Writing one can evict from alerts_to's queue and
   * raise another, folded at once, so it loops as sqlite/sqlite-store.ts #writeDueAlerts does.
   */
  async #foldAlerts(fx: CommitEffectsLog, flushAt: number | undefined): Promise<void> {
    const tx = await this.#transaction(false, async (tx) => {
      tx.write('lockAlerts');
      const fold = new AlertFold(tx, this.#cfg.alertWindowMs, this.stats);
      const queue: AlertEvent[] = (
        await tx.q<{
          id: number;
          recipient: string;
          reason: AlertEvent['reason'];
          message_id: string | null;
          attempts: number;
          at: number;
          count: number;
          sender: string | null;
        }>('takeEvents')
      )
        .sort((a, b) => a.id - b.id)
        .map((r) => ({
          recipient: r.recipient,
          reason: r.reason,
          messageId: r.message_id,
          attempts: r.attempts,
          at: r.at,
          count: r.count,
          sender: r.sender,
        }));
      tx.onRaise = (e) => queue.push(e);
      let flushed = flushAt === undefined;
      for (;;) {
        while (queue.length > 0) {
          const batch = queue.splice(0);
          await fold.load(batch);
          for (const e of batch) fold.apply(e);
        }
        if (!flushed) {
          await fold.flushDue(flushAt!);
          flushed = true;
        }
        const due = fold.takeDue();
        if (due.length === 0 && queue.length === 0) break;
        for (const a of due) await this.#writeAlert(tx, a);
      }
      fold.save();
    });
    merge(fx, tx);
  }

  async #writeAlert(tx: Tx, a: DueAlert): Promise<void> {
    if (!tx.agents.has(this.#alertsTo)) {
      await tx.lockChannels([`@${this.#alertsTo}`]);
      await tx.lockAgents([this.#alertsTo, ADAPTER_SENDER], this.#known);
    }
    await this.#append(tx, alertDraft(a, this.#alertsTo));
    const { at: _at, ...sent } = a;
    tx.fx.alerts.push(sent);
  }

  // ---------------------------------------------------------------------------------------
  // reads

  async #read<R>(name: PgStatement, values: readonly unknown[] = []): Promise<R[]> {
    try {
      const r = await this.#pool.query({ name, text: PG_SQL[name], values: values as unknown[] });
      return r.rows as R[];
    } catch (err) {
      throw storageFailureOf(err) ?? err;
    }
  }

  /** A read of a statement built from a filter (pg-operators.ts). */
  async #readBuilt<R>(built: Built, values: readonly unknown[]): Promise<R[]> {
    try {
      const r = await this.#pool.query({ ...built, values: values as unknown[] });
      return r.rows as R[];
    } catch (err) {
      throw storageFailureOf(err) ?? err;
    }
  }

  async messageIdOf(sender: string, idempotencyKey: string): Promise<string | undefined> {
    const rows = await this.#read<{ message_id: string }>('messageIdByKey', [
      sender,
      idempotencyKey,
    ]);
    return rows[0]?.message_id;
  }

  async isStored(sender: string, idempotencyKey: string): Promise<boolean> {
    return (await this.#read('findByKey', [sender, idempotencyKey])).length > 0;
  }

  async ensureChannels(names: Iterable<string>): Promise<void> {
    const list = [...new Set(names)].sort();
    if (list.length > 0) await this.#read('ensureChannels', [list]);
  }

  async channelMessages(
    channel: string,
    afterSeq: number,
    limit: number,
    maxBytes = Number.POSITIVE_INFINITY,
  ): Promise<string[]> {
    return await fittingAsync(
      this.#intactMessages(channel, afterSeq, limit, maxBytes),
      (r) => withThreadFields(r.body),
      maxBytes,
    );
  }

  async threadMessages(
    threadId: string,
    after: number,
    limit: number,
    maxBytes = Number.POSITIVE_INFINITY,
  ): Promise<ThreadPage> {
    const ids: number[] = [];
    const messages = await fittingAsync(
      this.#intactThread(threadId, after, limit, maxBytes),
      (r) => {
        ids.push(r.id);
        return withThreadFields(r.body);
      },
      maxBytes,
    );
    return threadPage(messages, ids);
  }

  async *#intactThread(
    threadId: string,
    after: number,
    limit: number,
    maxBytes: number,
  ): AsyncGenerator<BodyRow> {
    if (limit <= 0) return;
    let left = limit;
    const rows = this.#threads.rows(
      (run) => this.#pageReads.run(run),
      this.#pool,
      threadId,
      after,
      Math.min(limit, 256),
      maxBytes,
      PAGE_ITEM_OVERHEAD,
    );
    for await (const r of rows) {
      if (!this.#intact(r, true)) continue;
      yield r;
      if (--left === 0) return;
    }
  }

  /**
   * The first `limit` messages of a channel after `afterSeq` that pass their checksum, read in
   * growing chunks of rows, each no larger than what is left of `maxBytes` (and one row past
   * it, which ends the page): a page holds little more than its bound. Before, chunks of 16 then
   * 64 whole rows of 256 KiB fetched about 20 MiB for an 8 MiB page. One that fails its
   * checksum is skipped and the window reaches past it. Each chunk waits for a page read's slot.
   */
  async *#intactMessages(
    channel: string,
    afterSeq: number,
    limit: number,
    maxBytes: number,
  ): AsyncGenerator<ChannelRow> {
    let after = afterSeq;
    let left = limit;
    let bytes = Math.min(maxBytes, Number.MAX_SAFE_INTEGER);
    let chunk = 16;
    while (left > 0) {
      const want = Math.min(left, chunk);
      chunk = Math.min(chunk * 4, 1024);
      // a bound of 0 still reads the first row (a page holds one however large)
      const values = [
        channel,
        after,
        this.#corrupt.ids,
        want,
        Math.max(bytes, 1),
        PAGE_ITEM_OVERHEAD,
      ];
      const rows = await this.#pageReads.run(() =>
        this.#read<ChannelRow>('channelMessages', values),
      );
      for (const r of rows) {
        after = r.seq;
        bytes -= Buffer.byteLength(r.body) + PAGE_ITEM_OVERHEAD;
        if (!this.#intact(r, true)) continue;
        left--;
        yield r;
      }
      if (rows.length < want || bytes <= 0) return;
    }
  }

  /**
   * Page reads (replay, threads, dead letters) hold at most all but one of the read pool's
   * connections at once: /health's ping and a send's `isStored` always find one free
   * (read-slots.ts).
   */
  get #pageReads(): ReadSlots {
    this.#pageSlots ??= new ReadSlots(Math.max(1, (this.#pool.options.max ?? 4) - 1));
    return this.#pageSlots;
  }

  #pageSlots: ReadSlots | undefined;

  async pageDeliveries(reader: string, channel: string, afterSeq: number, limit: number) {
    // part of a replay page: it waits for a page read's slot as the page did
    const rows = await this.#pageReads.run(() =>
      this.#read<{ message_id: string; state: DeliveryState }>('pageDeliveries', [
        channel,
        afterSeq,
        this.#corrupt.ids,
        limit,
        reader,
      ]),
    );
    return deliveryStates(rows);
  }

  async messageStatus(messageId: string): Promise<MessageStatus | undefined> {
    const at = uuidv7Time(messageId);
    if (at === undefined) return undefined;
    const [m] = await this.#read<BodyRow & { sender: string }>('messageById', [at, messageId]);
    if (m === undefined) {
      const [later] = await this.#read<ScheduledRow & { cancelled_at: number | null }>(
        'scheduledById',
        [messageId],
      );
      return later === undefined ? undefined : scheduledStatus(later);
    }
    const rows = await this.#read<RecipientRow>('recipients', [m.id]);
    return messageStatusOf(m, rows, (r) => this.#intact(r, true));
  }

  async journey(messageId: string): Promise<JourneyRows | undefined> {
    const at = uuidv7Time(messageId);
    if (at === undefined) return undefined;
    // one snapshot: a copy's state, its events and the head of its lane agree, however the
    // other replicas change them meanwhile; a page read's slot, as it takes a connection a while
    return await this.#pageReads.run(() =>
      this.#snapshot(async (read) => {
        const [m] = await read<{ id: number }>('messageKey', [at, messageId]);
        if (m === undefined) return undefined;
        const copies = await read<JourneyCopyRow>('journeyCopies', [m.id]);
        const events = await read<JourneyEventRow>('journeyEvents', [m.id]);
        // the pauses since the message was accepted, and who is paused now
        const pauses = await read<PauseEvent>('pausesSince', [at]);
        const paused = await read<{ id: string; paused_at: number; paused_by: string }>(
          'pausedNow',
          [],
        );
        const rows = await journeyRows(at, copies, events, {
          head: async (recipient, channel) =>
            (await read<LaneHeadRow>('laneHead', [recipient, channel]))[0],
          lastLeased: async (message, delivery) =>
            (await read<{ at: number }>('lastLeased', [message, delivery]))[0]?.at ?? null,
          // the agents row keeps its open deliveries: its depth
          waiting: async (recipient) =>
            (await read<{ depth: number }>('depth', [recipient]))[0]?.depth ?? 0,
        });
        const pausedNow = Object.fromEntries(
          paused.map((p) => [p.id, { since: p.paused_at, by: p.paused_by }] as const),
        );
        return { ...rows, pauses, pausedNow };
      }),
    );
  }

  /** Reads in one REPEATABLE READ transaction on a connection of the read pool. */
  async #snapshot<T>(
    body: (read: <R>(name: PgStatement, values: readonly unknown[]) => Promise<R[]>) => Promise<T>,
  ): Promise<T> {
    const c = await this.#pool.connect().catch((err: unknown) => {
      throw storageFailureOf(err) ?? err;
    });
    let broken: Error | undefined;
    try {
      await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const out = await body(
        async <R>(name: PgStatement, values: readonly unknown[]) =>
          (await c.query({ name, text: PG_SQL[name], values: values as unknown[] })).rows as R[],
      );
      await c.query('COMMIT');
      return out;
    } catch (err) {
      await c.query('ROLLBACK').catch((e: unknown) => {
        broken = e as Error; // not given back to the pool as it is
      });
      throw storageFailureOf(err) ?? err;
    } finally {
      c.release(broken);
    }
  }

  async deadLetters(
    after: number,
    limit: number,
    maxBytes = Number.POSITIVE_INFINITY,
    filter: DeadLetterFilter = {},
  ): Promise<string[]> {
    const self = this;
    async function* rows(): AsyncGenerator<DeadRow> {
      let from = after;
      let left = limit;
      let chunk = 16;
      while (left > 0) {
        const want = Math.min(left, chunk);
        chunk = Math.min(chunk * 4, 1024);
        const { built, values } = deadLettersStatement(filter, from, want);
        const got = await self.#pageReads.run(() => self.#readBuilt<DeadRow>(built, values));
        for (const r of got) {
          from = r.id;
          left--;
          yield r;
        }
        if (got.length < want) return;
      }
    }
    return await fittingAsync(
      rows(),
      (r) => deadLetterView(r, (b) => this.#intact(b, true)),
      maxBytes,
    );
  }

  /**
   * Messages matching `query`, newest first, read in growing chunks (as #intactMessages), each
   * bounded by what is left of `maxBytes`; one that fails its checksum is skipped.
   */
  async searchMessages(
    query: MessageQuery,
    maxBytes = Number.POSITIVE_INFINITY,
  ): Promise<ThreadPage> {
    const self = this;
    async function* rows(): AsyncGenerator<BodyRow> {
      let before = query.after > 0 ? query.after : Number.MAX_SAFE_INTEGER;
      let left = query.limit;
      let bytes = Math.min(maxBytes, Number.MAX_SAFE_INTEGER);
      let chunk = 16;
      while (left > 0) {
        const want = Math.min(left, chunk);
        chunk = Math.min(chunk * 4, 1024);
        const { built, values } = searchStatement(
          query,
          before,
          want,
          Math.max(bytes, 1),
          PAGE_ITEM_OVERHEAD,
        );
        const got = await self.#pageReads.run(() => self.#readBuilt<BodyRow>(built, values));
        for (const r of got) {
          before = r.id;
          bytes -= Buffer.byteLength(r.body) + PAGE_ITEM_OVERHEAD;
          if (!self.#intact(r, true)) continue;
          left--;
          yield r;
        }
        if (got.length < want || bytes <= 0) return;
      }
    }
    const ids: number[] = [];
    const messages = await fittingAsync(
      rows(),
      (r) => {
        ids.push(r.id);
        return withThreadFields(r.body);
      },
      maxBytes,
    );
    return threadPage(messages, ids);
  }

  async redrive(id: string): Promise<RedriveState | undefined> {
    const [r] = await this.#read<RedriveTableRow>('redrive', [id]);
    return r === undefined ? undefined : redriveState(r);
  }

  async runningRedrives(): Promise<string[]> {
    return (await this.#read<{ id: string }>('runningRedrives')).map((r) => r.id);
  }

  async lastSequences(): Promise<Record<string, number>> {
    const rows = await this.#read<{ name: string; last_seq: number }>('lastSequences');
    return Object.fromEntries(rows.map((r) => [r.name, r.last_seq]));
  }

  async audit(after: number, limit: number): Promise<AuditEntry[]> {
    return (await this.#read<AuditRow>('audit', [after, limit])).map(auditView);
  }

  /** The audit log's anchor (rules/audit-chain.ts); undefined: its row is gone. */
  async auditAnchor(): Promise<AuditAnchor | undefined> {
    const [row] = await this.#read<AuditAnchorRow>('auditAnchor');
    return row === undefined ? undefined : anchorView(row);
  }

  async agents(ids: Iterable<string>): Promise<AgentState[]> {
    const list = [...ids];
    const rows = await this.#read<{
      id: string;
      last_seen: number | null;
      depth: number | null;
      critical: number | null;
      paused_at: number | null;
      paused_by: string | null;
      last_poll: number | null;
      pending: number;
      critical_pending: number;
      leased: number;
      dead_letters: number;
    }>('agentStates', [list]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    return list.map((id) => {
      const r = byId.get(id);
      return agentState(
        id,
        r?.last_seen,
        { all: r?.depth ?? 0, critical: r?.critical ?? 0 },
        {
          lastPoll: r?.last_poll ?? null,
          pending: r?.pending ?? 0,
          critical_pending: r?.critical_pending ?? 0,
          leased: r?.leased ?? 0,
          dead_letters: r?.dead_letters ?? 0,
          paused:
            r?.paused_at === null || r?.paused_at === undefined
              ? null
              : { since: r.paused_at, by: r.paused_by ?? '' },
        },
      );
    });
  }

  async depth(agent: string): Promise<{ all: number; critical: number }> {
    const [r] = await this.#read<{ depth: number; critical: number }>('depth', [agent]);
    return { all: r?.depth ?? 0, critical: r?.critical ?? 0 };
  }

  async oldestPendingAt(agent: string): Promise<number | undefined> {
    const [r] = await this.#read<{ available_at: number }>('oldestPendingAt', [agent]);
    return r?.available_at;
  }

  async nextDue(now: number): Promise<number | undefined> {
    const [r] = await this.#read<{ due: number | null }>('nextDue', [now, this.#cfg.alertWindowMs]);
    const due = r?.due ?? undefined;
    // a corrupt row a read found is told by the next sweep: due now
    if (this.#corrupt.unreported.size > 0) return due === undefined ? now : Math.min(due, now);
    return due;
  }

  async readyAmong(agents: readonly string[], now: number): Promise<ReadonlySet<string>> {
    const rows = await this.#read<{ agent: string }>('readyAmong', [agents, now]);
    return new Set(rows.map((r) => r.agent));
  }

  async storageUse(): Promise<StorageUse> {
    const [used] = await this.#read<{ used: number }>('storedBytes');
    const senders = await this.#read<{ id: string; stored_bytes: number }>('senders');
    return {
      usedBytes: used?.used ?? 0,
      // the database server's volume is not visible from a client
      availableBytes: Number.POSITIVE_INFINITY,
      senders: Object.fromEntries(senders.map((r) => [r.id, r.stored_bytes])),
    };
  }

  /** PostgreSQL has no quick_check to run from a client: the schema is what is checked. */
  async checkIntegrity(): Promise<string[]> {
    try {
      await this.ping();
      return [];
    } catch (err) {
      return [(err as Error).message];
    }
  }

  async ping(): Promise<void> {
    const since = this.#commitSince;
    if (since !== undefined && Date.now() - since > COMMIT_STALL_MS) {
      throw new Error(
        `a commit has been running for ${((Date.now() - since) / 1000).toFixed(1)} s (a lock held by another session, or a server that does not answer): writes wait behind it`,
      );
    }
    let version: number | null | undefined;
    try {
      const r = await this.#pool.query<{ version: number | null }>(PG_SQL.schemaVersion);
      version = r.rows[0]?.version;
    } catch (err) {
      throw new Error(`PostgreSQL does not answer: ${(err as Error).message}`, { cause: err });
    }
    if (version !== PG_MIGRATIONS.length) {
      throw new Error(
        `the PostgreSQL schema is at version ${version ?? 'none'}; this program knows ${PG_MIGRATIONS.length}`,
      );
    }
  }

  watch(listener: (fx: PgForeignEffects) => void): void {
    this.#wake.watch(listener);
  }

  /** The backend pid of the LISTEN connection, and its reconnections (for tests). */
  get listener(): { pid: number | undefined; reconnects: number } {
    return { pid: this.#wake.pid, reconnects: this.#wake.reconnects };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#wake.close();
    const c = this.#client;
    this.#client = undefined;
    if (c !== undefined) await c.end().catch(() => undefined);
    await this.#pool.end().catch(() => undefined);
  }

  /** Whether a stored message passes its checksum (rules/corrupt-rows.ts). */
  #intact(r: BodyRow, report: boolean): boolean {
    return this.#corrupt.intact(r, report);
  }
}

/** Numbered migrations, under a session advisory lock: replicas starting together run them once. */
async function migrate(c: pg.Client): Promise<void> {
  // a replica waits here for another's migration, and a migration may take long on a big
  // table: neither is bounded by the commit connection's timeouts, which come back after
  await c.query('SET lock_timeout = 0; SET statement_timeout = 0');
  try {
    await migrateUnderLock(c);
  } finally {
    await c.query('RESET lock_timeout; RESET statement_timeout').catch(() => undefined);
  }
}

async function migrateUnderLock(c: pg.Client): Promise<void> {
  await c.query(PG_SQL.migrateLock);
  try {
    await c.query(PG_SQL.createSchemaTable);
    const { rows } = await c.query<{ version: number | null }>(PG_SQL.schemaVersion);
    const at = rows[0]?.version ?? 0;
    if (at > PG_MIGRATIONS.length) {
      throw new Error(
        `the PostgreSQL schema is at version ${at}, newer than this program's ${PG_MIGRATIONS.length}`,
      );
    }
    for (let v = at + 1; v <= PG_MIGRATIONS.length; v++) {
      await c.query('BEGIN');
      try {
        await c.query(PG_MIGRATIONS[v - 1]!);
        await c.query(PG_SQL.setSchemaVersion, [v]);
        await c.query('COMMIT');
      } catch (err) {
        await c.query('ROLLBACK').catch(() => undefined);
        throw err;
      }
    }
  } finally {
    await c.query(PG_SQL.migrateUnlock).catch(() => undefined);
  }
}

function merge(fx: CommitEffectsLog, tx: Tx): void {
  fx.alerts.push(...tx.fx.alerts);
  fx.deadLettered.push(...tx.fx.deadLettered);
  for (const a of tx.fx.woken) fx.woken.add(a);
  fx.timingChanged ||= tx.fx.timingChanged;
}

/** SQLSTATE of a lock wait that ran past lock_timeout. */
const LOCK_NOT_AVAILABLE = '55P03';

/**
 * The connection went away or could not be made: a class 08 / 57P0x SQLSTATE, a socket error
 * (ECONNREFUSED while the server is down, ECONNRESET, EPIPE, ETIMEDOUT...), or no code at all.
 */
function isConnectionLoss(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return /^(08|57P0|E[A-Z]+$)/.test(code);
  return err instanceof Error && /connection|terminated|ECONN|EPIPE/i.test(err.message);
}

/**
 * The server's answer as a StorageFailure when the storage itself failed: disk full (53xxx),
 * an I/O error (58xxx), the connection lost (08xxx, a backend shut down); else undefined.
 */
function storageFailureOf(err: unknown): StorageFailure | undefined {
  if (err instanceof StorageFailure) return err;
  const code = (err as { code?: unknown } | null)?.code;
  // 57014: a statement ran past statement_timeout; 25P03: the session idled in a transaction
  // 3D000, 28xxx: the database is gone, or our role may no longer connect (no request can do)
  const storage =
    typeof code === 'string' ? /^(53|58|08|57P0|57014|25P03|3D000|28)/.test(code) : false;
  if (!storage && !isConnectionLoss(err)) return undefined;
  return new StorageFailure(`${code ?? 'connection'}: ${(err as Error).message}`, { cause: err });
}
