import type Database from 'better-sqlite3';
import { ADAPTER_SENDER, type Assignment } from '../../protocol/envelope.js';
import { GatewayError, isGatewayError } from '../../protocol/errors.js';
import { uuidv7, uuidv7Time } from '../../protocol/ids.js';
import { deliveryJson } from '../../protocol/wire.js';
import type { DueAlert } from '../rules/alert-rows.js';
import type { AuditAnchor } from '../rules/audit-chain.js';
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
import { actAudit, messageAudit } from '../rules/operators.js';
import { DELIVERY_FIELDS_BYTES, fitting } from '../rules/page-bytes.js';
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
import { draftSize, searchIndexBytes } from '../rules/storage.js';
import {
  alertDraft,
  assignment,
  type BodyRow,
  type ChannelRow,
  type DeadLetterRow,
  type DeadRow,
  type KeyRow,
  newMessage,
  pastDeadline,
  type RecipientRow,
  rejected,
  repeatOutcome,
} from '../rules/stored-message.js';
import { type Placement, type ThreadRow, withThreadFields } from '../rules/thread-rows.js';
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
  type DeliveryState,
  type DeliveryStats,
  type ForeignEffects,
  type JourneyRows,
  type MessageDraft,
  type MessageQuery,
  type MessageStatus,
  type OpResults,
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
import { quickCheck } from './quick-check.js';
import { MIGRATIONS, SQL } from './sql.js';
import { Alerts } from './sqlite-alerts.js';
import { Deliveries } from './sqlite-deliveries.js';
import { openSqlite, type SyncMode, synchronousOf } from './sqlite-file.js';
import { Operators } from './sqlite-operators.js';
import { Replies } from './sqlite-replies.js';
import { Threads } from './sqlite-threads.js';
import { StorageBudget } from './storage-budget.js';

export type { SyncMode } from './sqlite-file.js';

/** Operations that may write a message: their groups commit with AGW_SYNC (FULL by default). */
const WRITES_MESSAGES: ReadonlySet<StoreOp['op']> = new Set([
  'append',
  'replay_dead_letter',
  'alert',
  'redrive_step',
  // an operator's acts: rare, and answered as done, so made durable as a message is
  'pause',
  'resume',
  'redrive_create',
  'audit',
  // a cancel answered 204 must not come back after a crash and let the message fire
  'cancel_scheduled',
]);

/**
 * The search index's batch: messages indexed in one transaction of their own (a few ms of the
 * event loop), at most every SEARCH_INDEX_EVERY_MS; 10,000 messages a second at most in the
 * background, and a search catches up by one batch before it reads.
 */
const SEARCH_INDEX_BATCH = 2000;
const SEARCH_INDEX_EVERY_MS = 200;

export interface SqliteStoreOptions {
  /** full (default) or normal; see SyncMode. */
  readonly sync?: SyncMode;
  /** Bounds, leases, retries and the alert recipient; defaults fit tests of the write path. */
  readonly delivery?: Partial<DeliveryConfig>;
  /** Bounds on what the store holds; DEFAULT_STORAGE for what is left out. */
  readonly storage?: Partial<StorageLimits>;
  /** Hop and thread budgets; DEFAULT_BUDGETS for what is left out. */
  readonly budgets?: Partial<ThreadBudgets>;
}

export class SqliteStore implements Store {
  readonly stats: DeliveryStats = newStats();
  /** Message rows known to fail their checksum (found by any read since open). */
  readonly #corrupt = new CorruptRows();
  readonly #db: Database.Database;
  readonly #file: string;
  readonly #alertsTo: string;
  readonly #fx = new CommitEffectsLog();
  /** When each agent's last poll was last written (#polled). */
  readonly #lastPollWritten = new Map<string, number>();
  readonly #alerts: Alerts;
  readonly #deliveries: Deliveries;
  readonly #threads: Threads;
  readonly #ops: Operators;
  readonly #replies: Replies;
  readonly #budget: StorageBudget;
  readonly #s;
  readonly #tx: (ops: readonly StoreOp[]) => Settled[];
  /** AGW_SYNC: how a commit that holds a message is made durable. */
  readonly #messageSync: SyncMode;
  /** The connection's synchronous mode now. */
  #sync: SyncMode;
  /** The group being committed wrote a message (or put a dead letter back in a queue). */
  #holdsMessage = false;
  /** Messages may wait to be indexed for search (#indexSearch); true at open. */
  #searchBehind = true;
  /** Keeps the search index caught up between commits (SEARCH_INDEX_EVERY_MS). */
  readonly #searchTimer: NodeJS.Timeout;

  constructor(file: string, opts: SqliteStoreOptions = {}) {
    this.#file = file;
    this.#messageSync = opts.sync ?? 'full';
    this.#sync = this.#messageSync;
    this.#db = openSqlite(file, {
      sync: this.#messageSync,
      migrations: MIGRATIONS,
      program: 'adapter',
    });
    const cfg = deliveryConfig(opts.delivery);
    this.#alertsTo = cfg.alertsTo;
    this.#alerts = new Alerts(this.#db, cfg.alertWindowMs, this.#fx, this.stats);
    this.#deliveries = new Deliveries(this.#db, cfg, this.#alerts, this.#fx, this.stats);
    const budgets = { ...DEFAULT_BUDGETS, ...opts.budgets };
    this.#threads = new Threads(this.#db, budgets, this.#alertsTo, this.#alerts);
    this.#budget = new StorageBudget(this.#db, file, { ...DEFAULT_STORAGE, ...opts.storage });
    this.#ops = new Operators(this.#db);
    this.#replies = new Replies(this.#db, this.#deliveries, this.#fx, {
      paused: (agent) => this.#ops.paused(agent) !== undefined,
      intact: (row, report) => this.#intact(row, report),
    });
    const p = <T = unknown>(sql: string) => this.#db.prepare<unknown[], T>(sql);
    this.#s = {
      nextSeq: p<number>(SQL.nextSeq).pluck(),
      findByKey: p<KeyRow>(SQL.findByKey),
      findScheduledByKey: p<KeyRow>(SQL.findScheduledByKey),
      insertScheduled: p(SQL.insertScheduled),
      dueScheduled: p<ScheduledRow>(SQL.dueScheduled),
      deleteScheduled: p(SQL.deleteScheduled),
      nextScheduled: p<number | null>(SQL.nextScheduled).pluck(),
      scheduledById: p<ScheduledRow & { cancelled_at: number | null }>(SQL.scheduledById),
      cancelScheduled: p(SQL.cancelScheduled),
      pruneScheduled: p(SQL.pruneScheduled),
      messageSender: p<string>(SQL.messageSender).pluck(),
      insertMessage: p(SQL.insertMessage),
      channelMessages: p<ChannelRow>(SQL.channelMessages),
      channelMessagesIntact: p<ChannelRow>(SQL.channelMessagesIntact),
      pageDeliveries: p<{ message_id: string; state: DeliveryState }>(SQL.pageDeliveries),
      pageDeliveriesIntact: p<{ message_id: string; state: DeliveryState }>(
        SQL.pageDeliveriesIntact,
      ),
      messageWhere: p<{ message_id: string; channel: string }>(SQL.messageWhere),
      messageBody: p<BodyRow>(SQL.messageBody),
      ensureChannel: p(SQL.ensureChannel),
      touchAgent: p(SQL.touchAgent),
      touchPoll: p(SQL.touchPoll),
      pruneEvents: p(SQL.pruneDeliveryEvents),
      journeyEvents: p<JourneyEventRow>(SQL.journeyEvents),
      journeyCopies: p<JourneyCopyRow>(SQL.journeyCopies),
      laneHead: p<LaneHeadRow>(SQL.laneHead),
      lastLeased: p<number>(SQL.lastLeased).pluck(),
      openDeliveries: p<number>(SQL.openDeliveries).pluck(),
      agents: p<{ id: string; last_seen: number | null }>(SQL.agents),
      oldestPendingAt: p<number>(SQL.oldestPendingAt).pluck(),
      messageById: p<BodyRow & { sender: string }>(SQL.messageById),
      recipients: p<RecipientRow>(SQL.recipients),
      deadLetter: p<DeadLetterRow>(SQL.deadLetter),
      markReplayed: p(SQL.markReplayed),
      prunable: p<{ id: number; sender: string; size: number }>(SQL.prunable),
      pruneDead: p(SQL.pruneDeadLetters),
      pruneDeliveries: p(SQL.pruneDeliveries),
      pruneMessage: p(SQL.pruneMessage),
    };
    this.#tx = this.#db.transaction((ops: readonly StoreOp[]) => {
      const results = ops.map((op) => this.#settle(op));
      this.#budget.save(); // the senders' totals, with the messages they count
      return results;
    });
    // Alerts travel in alerts_to's own channel: its counter must exist before the first one.
    if (this.#alertsTo !== '') this.#ensureChannels([`@${this.#alertsTo}`]);
    this.#searchTimer = setInterval(
      () => this.#indexSearch(SEARCH_INDEX_BATCH),
      SEARCH_INDEX_EVERY_MS,
    );
    this.#searchTimer.unref();
  }

  /**
   * Indexes what was stored since the last time for search, up to `max` messages, in a
   * transaction of its own after the commits that stored them, not in them: the index is
   * derived from the messages (a crash that loses its last batch only has it indexed again),
   * so it costs a send nothing and is written without an fsync (synchronous NORMAL). Searches
   * catch up first, so they see every message committed before them (a backlog past one
   * batch, as after the upgrade that made the index, is worked through in the background).
   */
  #indexSearch(max: number): void {
    if (!this.#searchBehind || !this.#db.open) return;
    try {
      this.#useSync('normal');
      const n = this.#db.transaction(() => this.#ops.indexForSearch(max))();
      this.#searchBehind = n === max;
    } catch {
      // a storage that cannot write now: the next tick tries again; searches miss the rest
    }
  }

  async commit(ops: readonly StoreOp[]): Promise<Committed> {
    this.#fx.clear();
    this.#holdsMessage = false;
    const counted = statsCopy(this.stats);
    try {
      const synced = ops.some((op) => WRITES_MESSAGES.has(op.op));
      this.#useSync(synced ? this.#messageSync : 'normal');
      const results = this.#tx(ops);
      // An alert fell due in a group of leases or acks: it is a message, numbered in its
      // channel, so it is made durable before anything is answered or woken.
      if (this.#holdsMessage && !synced && this.#messageSync === 'full') this.#fsyncWal();
      return { results, effects: this.#fx.take() };
    } catch (err) {
      // Rolled back: what was counted in memory (depths, stats, senders' bytes) and the alerts
      // that fell due never happened.
      this.#deliveries.reloadDepths();
      this.#budget.reload();
      this.#ops.reload();
      Object.assign(this.stats, counted);
      this.#alerts.forget();
      this.#fx.clear();
      throw storageFailureOf(err) ?? err;
    }
  }

  /**
   * The synchronous mode of the next transaction (SQLite refuses a change inside one).
   * docs/design/durability.md says which commits need which.
   */
  #useSync(mode: SyncMode): void {
    if (mode === this.#sync) return;
    this.#db.pragma(`synchronous = ${mode.toUpperCase()}`);
    this.#sync = mode;
  }

  /**
   * Makes every commit so far durable: a FULL commit of one rewritten header field fsyncs the
   * WAL, which holds the earlier NORMAL commits' frames too.
   */
  #fsyncWal(): void {
    this.#useSync('full');
    const version = this.#db.pragma('user_version', { simple: true }) as number;
    this.#db.pragma(`user_version = ${version}`);
  }

  /** One operation; a GatewayError (thrown before it wrote anything) settles it alone. */
  #settle(op: StoreOp): Settled {
    try {
      const ok = this.#run(op);
      // an operator's act and its audit entry: one transaction
      const act = actAudit(op, ok);
      if (act !== undefined) this.#ops.appendAudit(act);
      this.#writeDueAlerts();
      return { ok };
    } catch (err) {
      if (isGatewayError(err)) return { err };
      throw err;
    }
  }

  #run(op: StoreOp): OpResults[StoreOp['op']] {
    switch (op.op) {
      case 'append':
        return op.drafts.map((d) => this.#append(d));
      case 'lease':
        return this.#lease(op.agent, op.max, op.now, op.maxBytes);
      case 'ack':
        return this.#deliveries.ack(op.agent, op.ids, op.now ?? Date.now());
      case 'nack':
        return this.#deliveries.nack(op.agent, op.ids, op.now, op.retry, op.reason);
      case 'extend':
        return this.#deliveries.extend(op.agent, op.ids, op.extendMs, op.now);
      case 'heartbeat': {
        this.#s.touchAgent.run(op.agent, op.now);
        const d = this.#deliveries.depth(op.agent);
        return { pending: d.all, critical_pending: d.critical };
      }
      case 'sweep':
        this.#fireDue(op.now);
        this.#deliveries.sweep(op.now);
        this.#reportFinds(op.now);
        this.#alerts.flushDue(op.now);
        return undefined;
      case 'replay_dead_letter':
        return this.#replayDeadLetter(op.id, op.now, { dead_letter: op.id, by: op.by });
      case 'pause':
      case 'resume': {
        const answer = this.#ops.setPaused(op.agent, op.op === 'pause', op.by, op.now);
        if (op.op === 'resume' && answer.changed) this.#fx.woken.add(op.agent);
        return answer;
      }
      case 'redrive_create':
        // a filter's words find what the index holds: every message committed before it (up
        // to a bound: a backlog past it, as after an upgrade, is counted as it gets indexed)
        for (let i = 0; i < 25; i++)
          if (this.#ops.indexForSearch(SEARCH_INDEX_BATCH) < SEARCH_INDEX_BATCH) break;
        return this.#ops.createRedrive(op.id, op.by, op.selection, op.rate, op.now);
      case 'redrive_step':
        this.#ops.indexForSearch(SEARCH_INDEX_BATCH);
        return this.#ops.stepRedrive(
          op.id,
          op.max,
          (dl, by) =>
            this.#replayDeadLetter(dl, op.now, { dead_letter: dl, by, redrive: op.id })
              ?.replayed === true,
        );
      case 'audit':
        return this.#ops.appendAudit(op.entry);
      case 'prune_audit':
        return this.#ops.pruneAudit(op.before, op.limit);
      case 'alert':
        this.#alerts.raise(op.recipient, op.reason, op.messageId, 0, op.now, op.count);
        return undefined;
      case 'prune':
        return this.#prune(op.before, op.keep, op.limit);
      case 'cancel_scheduled':
        return this.#cancel(op.sender, op.messageId, op.now);
      case 'take_reply':
        return this.#replies.take(op.agent, op.messageId, op.now);
    }
  }

  #append(d: MessageDraft): AppendOutcome {
    const prior =
      this.#s.findByKey.get(d.sender, d.idempotencyKey) ??
      this.#s.findScheduledByKey.get(d.sender, d.idempotencyKey);
    if (prior !== undefined) return repeatOutcome(prior, d);
    const late = pastDeadline(d);
    if (late !== undefined) return rejected(late);
    // Its thread and hop, and the thread's budgets (sqlite-threads.ts): after the key, so a
    // repeat is a duplicate whatever the budgets say now; before the storage bound and the
    // sequence, so a refusal takes no number and stores nothing.
    const placed = this.#threads.place(d);
    if (placed instanceof GatewayError) return rejected(placed);
    // A storage bound refuses an agent's message before it takes a number (storage-budget.ts);
    // the adapter's own alerts always pass: small, a few a minute, and they tell of the trouble.
    if (d.sender !== ADAPTER_SENDER) {
      const refused = this.#budget.admit(d.sender, draftSize(d, searchIndexBytes(d)));
      if (refused !== undefined) {
        this.#alerts.raise(d.sender, 'storage_full', undefined, 0, d.receivedAt);
        return rejected(refused);
      }
    }
    let a: Assignment;
    if (d.deliverAt !== undefined) a = this.#schedule(d, placed);
    else {
      this.#threads.record(placed, d.receivedAt);
      a = this.#store(uuidv7(d.receivedAt), d, placed, d.receivedAt).assignment;
    }
    // in this transaction: the message and its audit entry are durable together
    const audit = messageAudit(d, a);
    if (audit !== undefined) this.#ops.appendAudit(audit);
    return { status: 201, assignment: a };
  }

  /**
   * The message in `messages` with the channel's next sequence, and its copies, made at `now`
   * (its receipt; for a scheduled message, when it fires).
   */
  #store(id: string, d: MessageDraft, placed: Placement, now: number): { assignment: Assignment } {
    const seq = this.#s.nextSeq.get(d.channel);
    if (seq === undefined) throw new Error(`channel ${d.channel} has no sequence counter`);
    this.#holdsMessage = true;
    // its size counts what the search index adds (rules/storage.ts, searchIndexBytes)
    const m = newMessage(id, seq, d, placed, searchIndexBytes(d));
    const { lastInsertRowid } = this.#s.insertMessage.run(...m.row);
    this.#searchBehind = true;
    this.#budget.add(d.sender, m.size);
    const row = Number(lastInsertRowid);
    const quiet = d.sender === ADAPTER_SENDER;
    const expires = d.expiresAt ?? null;
    for (const r of d.recipients) {
      this.#deliveries.enqueue(
        row,
        id,
        r,
        d.channel,
        m.priority,
        now,
        d.sender,
        quiet,
        undefined,
        expires,
      );
    }
    return m;
  }

  /**
   * A message to send later (docs/design/time.md): its row in `scheduled`, acknowledged with a
   * null sequence. Its thread counts it now (budgets are taken at send); it takes its sequence
   * and makes its copies when the sweep fires it.
   */
  #schedule(d: MessageDraft, placed: Placement): Assignment {
    const id = uuidv7(d.receivedAt);
    this.#s.insertScheduled.run(
      id,
      d.sender,
      d.idempotencyKey,
      d.fingerprint,
      d.channel,
      d.receivedAt,
      d.deliverAt,
      scheduledDraft(d, placed),
    );
    this.#threads.record(placed, d.receivedAt);
    this.#holdsMessage = true;
    this.#fx.timingChanged = true;
    return assignment(id, d.channel, null, d.receivedAt, d, placed.threadId ?? id, placed.hop);
  }

  /** Sends the scheduled messages due by `now`, in (deliver_at, id) order. */
  #fireDue(now: number): void {
    for (;;) {
      const due = this.#s.dueScheduled.all(now, SWEEP_SCHEDULED);
      for (const r of due) {
        const { draft, placed } = fromScheduled(r);
        this.#store(r.message_id, draft, placed, now);
        this.#s.deleteScheduled.run(r.id);
      }
      if (due.length < SWEEP_SCHEDULED) break;
    }
  }

  /** DELETE /v1/messages/{id}: a scheduled message of `sender`, before it fires. */
  #cancel(sender: string, messageId: string, now: number): OpResults['cancel_scheduled'] {
    const row = this.#s.scheduledById.get(messageId);
    if (row === undefined) {
      const at = uuidv7Time(messageId);
      const owner = at === undefined ? undefined : this.#s.messageSender.get(at, messageId);
      throw cancelRefusal(owner, sender, messageId);
    }
    if (row.sender !== sender) throw cancelRefusal(row.sender, sender, messageId);
    if (row.cancelled_at !== null) return { cancelled: true, changed: false };
    this.#s.cancelScheduled.run(now, row.id);
    this.#fx.timingChanged = true;
    return { cancelled: true, changed: true };
  }

  /**
   * An alert is a message from the adapter to @alertsTo, critical, written in the same
   * transaction as what caused it. Writing one can evict from alerts_to's queue, which can make
   * the next alert due: the loop ends because each (recipient, reason) falls due at most once a
   * window.
   */
  #writeDueAlerts(): void {
    for (let due = this.#alerts.takeDue(); due.length > 0; due = this.#alerts.takeDue()) {
      for (const a of due) this.#writeAlert(a);
    }
  }

  #writeAlert(a: DueAlert): void {
    this.#append(alertDraft(a, this.#alertsTo));
    const { at: _at, ...sent } = a;
    this.#fx.alerts.push(sent);
  }

  /**
   * Every message is checked before it is leased. One that fails its checksum is quarantined:
   * its delivery goes to the dead letters (`integrity`, with an alert/integrity), never to the
   * agent, and as a dead letter it releases its channel, so the next messages flow. When every
   * ready delivery met was quarantined, the hand-out is worked out again, so a poll does not come
   * back empty while messages wait behind a corrupt one.
   */
  #lease(agent: string, max: number, now: number, maxBytes = Infinity): DeliveryJson[] {
    this.#reportFinds(now);
    this.#polled(agent, now);
    // paused by an operator: the poll waits out its `wait`; what it holds runs its course
    if (this.#ops.paused(agent) !== undefined) return [];
    for (;;) {
      const ready = this.#deliveries.ready(agent, max, now);
      if (ready.length === 0) return [];
      const handed: { id: number; body: string }[] = [];
      const met = { quarantined: 0 };
      const bodies = fitting(
        this.#intactDeliveries(ready, now, met),
        (d) => {
          handed.push(d);
          return withThreadFields(d.body);
        },
        maxBytes,
        DELIVERY_FIELDS_BYTES,
      );
      if (bodies.length === 0 && met.quarantined > 0) continue;
      // in hand-out order, less the quarantined: each lane is still served from its head
      const ids = handed.slice(0, bodies.length).map((d) => d.id);
      const attempts = this.#deliveries.lease(ids, now);
      const expires = now + this.#deliveries.leaseMs;
      return ids.map((id, i) => deliveryJson(id, attempts[i]!, expires, bodies[i]!));
    }
  }

  /** `ready`'s messages one at a time, as read; a corrupt one's delivery quarantined instead. */
  *#intactDeliveries(
    ready: readonly { id: number; message: number }[],
    now: number,
    met: { quarantined: number },
  ): Generator<{ id: number; body: string }> {
    for (const r of ready) {
      const row = this.#s.messageBody.get(r.message)!;
      if (this.#intact(row, false)) {
        yield { id: r.id, body: row.body };
      } else {
        this.#deliveries.quarantine(r.id, now);
        met.quarantined++;
      }
    }
  }

  /**
   * Alerts about corrupt rows that reads which hand nothing out (replay, dead letters, message
   * status) found: one alert/integrity (`checksum_mismatch`) per row, aggregated per channel,
   * raised in the next lease or sweep, which have a transaction and a time. (A row whose alert
   * was lost with a rolled-back group is still never served; a restart finds it again.)
   */
  #reportFinds(now: number): void {
    if (this.#corrupt.unreported.size === 0) return;
    for (const id of this.#corrupt.takeUnreported()) {
      const m = this.#s.messageWhere.get(id);
      if (m !== undefined) this.#alerts.raise(m.channel, 'checksum_mismatch', m.message_id, 0, now);
    }
  }

  /**
   * The agent's last poll, for its journeys (docs/design/journey.md): written with the poll's
   * own commit, at most once a second per agent, so that polls in a burst cost one row.
   */
  #polled(agent: string, now: number): void {
    if (now - (this.#lastPollWritten.get(agent) ?? Number.NEGATIVE_INFINITY) < POLL_MARK_MS) return;
    this.#lastPollWritten.set(agent, now);
    this.#s.touchPoll.run(agent, now);
  }

  #replayDeadLetter(
    id: number,
    now: number,
    detail: RedriveDetail,
  ): OpResults['replay_dead_letter'] {
    const dl = this.#s.deadLetter.get(id);
    if (dl === undefined) return undefined;
    if (dl.replay_delivery !== null) return { delivery_id: dl.replay_delivery, replayed: false };
    const delivery = this.#deliveries.enqueue(
      dl.message,
      dl.message_id,
      dl.recipient,
      dl.channel,
      dl.priority,
      now,
      undefined,
      false,
      detail,
      // the message's deadline stays its own: a replay after it expires again at once
      dl.expires_at ?? null,
    );
    this.#s.markReplayed.run(delivery, id);
    this.#holdsMessage = true;
    return { delivery_id: delivery, replayed: true };
  }

  /**
   * With their deliveries, dead letters and idempotency keys; and the counts of threads quiet
   * since `before`.
   */
  #prune(before: number, keep: readonly string[], limit: number): number {
    this.#threads.prune(before, limit);
    this.#s.pruneScheduled.run(before); // cancelled ones: their keys live as long as a message's
    const rows = this.#s.prunable.all(before, JSON.stringify(keep), limit);
    for (const { id, sender, size } of rows) {
      this.#s.pruneDead.run(id);
      this.#s.pruneEvents.run(id);
      this.#s.pruneDeliveries.run(id);
      this.#s.pruneMessage.run(id);
      this.#budget.remove(sender, size);
    }
    return rows.length;
  }

  /** The message stored under a key, or scheduled under it (not fired yet, or cancelled). */
  async messageIdOf(sender: string, idempotencyKey: string): Promise<string | undefined> {
    return this.#keyRow(sender, idempotencyKey)?.message_id;
  }

  async isStored(sender: string, idempotencyKey: string): Promise<boolean> {
    return this.#keyRow(sender, idempotencyKey) !== undefined;
  }

  #keyRow(sender: string, idempotencyKey: string): KeyRow | undefined {
    return (
      this.#s.findByKey.get(sender, idempotencyKey) ??
      this.#s.findScheduledByKey.get(sender, idempotencyKey)
    );
  }

  async ensureChannels(names: Iterable<string>): Promise<void> {
    this.#ensureChannels(names);
  }

  #ensureChannels(names: Iterable<string>): void {
    this.#db.transaction(() => {
      for (const n of names) this.#s.ensureChannel.run(n);
    })();
  }

  async channelMessages(
    channel: string,
    afterSeq: number,
    limit: number,
    maxBytes = Infinity,
  ): Promise<string[]> {
    // iterated, not .all(): rows past the bound are never read into memory
    const rows = this.#intactMessages(channel, afterSeq, limit);
    return fitting(rows, (r) => withThreadFields(r.body), maxBytes);
  }

  async threadMessages(
    threadId: string,
    after: number,
    limit: number,
    maxBytes = Infinity,
  ): Promise<ThreadPage> {
    const ids: number[] = [];
    const messages = fitting(
      this.#intactThread(threadId, after, limit),
      (r) => {
        ids.push(r.id);
        return withThreadFields(r.body);
      },
      maxBytes,
    );
    return threadPage(messages, ids);
  }

  /** The rows that pass their checksum; one that fails is skipped (and remembered). */
  *#intactRows<R extends BodyRow>(rows: Iterable<R>): Generator<R> {
    for (const r of rows) if (this.#intact(r, true)) yield r;
  }

  /** Up to `limit` messages of a thread that pass their checksum; one that fails is skipped. */
  *#intactThread(threadId: string, after: number, limit: number): Generator<ThreadRow> {
    if (limit <= 0) return;
    let left = limit;
    for (const r of this.#threads.rows(threadId, after, limit)) {
      if (!this.#intact(r, true)) continue;
      yield r;
      if (--left === 0) return;
    }
  }

  /**
   * The first `limit` messages of a channel after `afterSeq` that pass their checksum, read one
   * at a time. One that fails is skipped (and remembered, #corrupt) and the window reaches past
   * it, so a page is short only at the channel's end, or at its byte bound.
   */
  *#intactMessages(channel: string, afterSeq: number, limit: number): Generator<ChannelRow> {
    let after = afterSeq;
    let left = limit;
    while (left > 0) {
      const want = left;
      const rows =
        this.#corrupt.size === 0
          ? this.#s.channelMessages.iterate(channel, after, want)
          : this.#s.channelMessagesIntact.iterate(channel, after, this.#corruptJson(), want);
      let seen = 0;
      for (const r of rows) {
        seen++;
        after = r.seq;
        if (!this.#intact(r, true)) continue;
        left--;
        yield r;
      }
      if (seen < want) return; // the channel's end
    }
  }

  async pageDeliveries(reader: string, channel: string, afterSeq: number, limit: number) {
    const rows =
      this.#corrupt.size === 0
        ? this.#s.pageDeliveries.all(channel, afterSeq, limit, reader)
        : this.#s.pageDeliveriesIntact.all(channel, afterSeq, this.#corruptJson(), limit, reader);
    return deliveryStates(rows);
  }

  async messageStatus(messageId: string): Promise<MessageStatus | undefined> {
    const at = uuidv7Time(messageId);
    const m = at === undefined ? undefined : this.#s.messageById.get(at, messageId);
    if (m === undefined) {
      const later = this.#s.scheduledById.get(messageId);
      return later === undefined ? undefined : scheduledStatus(later);
    }
    // a corrupt message: its recipients' states are still told, never its bytes
    return messageStatusOf(m, this.#s.recipients.all(m.id), (r) => this.#intact(r, true));
  }

  async journey(messageId: string): Promise<JourneyRows | undefined> {
    const at = uuidv7Time(messageId);
    const m = at === undefined ? undefined : this.#s.messageById.get(at, messageId);
    if (m === undefined) return undefined;
    const rows = await journeyRows(
      at!,
      this.#s.journeyCopies.all(m.id),
      this.#s.journeyEvents.all(m.id),
      {
        head: (recipient, channel) => this.#s.laneHead.get(recipient, channel),
        lastLeased: (message, delivery) => this.#s.lastLeased.get(message, delivery) ?? null,
        waiting: (recipient) => this.#s.openDeliveries.get(recipient) ?? 0,
      },
    );
    return { ...rows, pauses: this.#ops.pausesSince(at!), pausedNow: this.#ops.pausedNow() };
  }

  async deadLetters(
    after: number,
    limit: number,
    maxBytes = Infinity,
    filter: DeadLetterFilter = {},
  ): Promise<string[]> {
    if (filter.q !== undefined) this.#indexSearch(SEARCH_INDEX_BATCH);
    const rows = this.#ops.deadLetterRows(filter, after, limit) as Iterable<DeadRow>;
    return fitting(rows, (r) => deadLetterView(r, (b) => this.#intact(b, true)), maxBytes);
  }

  async searchMessages(query: MessageQuery, maxBytes = Infinity): Promise<ThreadPage> {
    this.#indexSearch(SEARCH_INDEX_BATCH);
    const ids: number[] = [];
    const messages = fitting(
      this.#intactRows(this.#ops.searchRows(query)),
      (r) => {
        ids.push(r.id);
        return withThreadFields(r.body);
      },
      maxBytes,
    );
    return threadPage(messages, ids);
  }

  async redrive(id: string): Promise<RedriveState | undefined> {
    return this.#ops.redrive(id);
  }

  async runningRedrives(): Promise<string[]> {
    return this.#ops.runningRedrives();
  }

  async lastSequences(): Promise<Record<string, number>> {
    return this.#ops.lastSequences();
  }

  async audit(after: number, limit: number): Promise<AuditEntry[]> {
    return this.#ops.audit(after, limit);
  }

  /** The audit log's anchor (rules/audit-chain.ts); undefined: its row is gone. */
  async auditAnchor(): Promise<AuditAnchor | undefined> {
    return this.#ops.auditAnchor();
  }

  async agents(ids: Iterable<string>): Promise<AgentState[]> {
    const seen = new Map(this.#s.agents.all().map((r) => [r.id, r.last_seen]));
    const polls = this.#ops.lastPolls();
    return [...ids].map((id) =>
      agentState(id, seen.get(id), this.#deliveries.depth(id), {
        lastPoll: polls.get(id) ?? null,
        ...this.#ops.counts(id),
        paused: this.#ops.paused(id) ?? null,
      }),
    );
  }

  async depth(agent: string): Promise<{ all: number; critical: number }> {
    return this.#deliveries.depth(agent);
  }

  async oldestPendingAt(agent: string): Promise<number | undefined> {
    return this.#s.oldestPendingAt.get({ agent });
  }

  async nextDue(now: number): Promise<number | undefined> {
    // a corrupt row a read found is told by the next sweep: due now
    const finds = this.#corrupt.unreported.size > 0 ? now : undefined;
    const scheduled = this.#s.nextScheduled.get() ?? undefined;
    const times = [this.#deliveries.nextDue(now), this.#alerts.nextDue(), finds, scheduled].filter(
      (t): t is number => t !== undefined,
    );
    return times.length === 0 ? undefined : Math.min(...times);
  }

  /** The synchronous mode the connection really has, read back from SQLite. */
  get synchronous(): SyncMode | number {
    return synchronousOf(this.#db);
  }

  checkIntegrity(): Promise<string[]> {
    return quickCheck(this.#file);
  }

  async storageUse(): Promise<StorageUse> {
    return this.#budget.use();
  }

  /**
   * A hard cap on the file's pages for this connection (PRAGMA max_page_count; none: SQLite's
   * own, 2^32 − 2). Past it a write fails with SQLITE_FULL exactly as on a full disk, which is
   * how tests make writes fail for real, portably. Not below the pages the file has.
   */
  limitPages(pages?: number): void {
    this.#db.pragma(`max_page_count = ${pages ?? 4_294_967_294}`);
  }

  /** One file, one adapter: it is reachable while open (its integrity: checkIntegrity). */
  async ping(): Promise<void> {
    if (!this.#db.open) throw new Error('the store is closed');
  }

  /** One adapter per file: no other writer to hear from. */
  watch(_listener: (fx: ForeignEffects) => void): void {}

  async close(): Promise<void> {
    clearInterval(this.#searchTimer);
    if (!this.#db.open) return;
    try {
      // the totals as they are, so that the next open has no messages after their mark to add
      this.#db.transaction(() => this.#budget.save(true))();
    } catch {
      // a store that cannot write now is counted again at the next open, from the mark
    }
    this.#db.close();
  }

  /** Whether a stored message passes its checksum (rules/corrupt-rows.ts). */
  #intact(r: BodyRow, report: boolean): boolean {
    return this.#corrupt.intact(r, report);
  }

  /** The known corrupt rows as the JSON array the SQL takes. */
  #corruptJson(): string {
    return JSON.stringify(this.#corrupt.ids);
  }
}

/** The engine's error as a StorageFailure when the storage itself failed; else undefined. */
function storageFailureOf(err: unknown): StorageFailure | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !STORAGE_CODES.test(code)) return undefined;
  return new StorageFailure(`${code}: ${(err as Error).message}`, { cause: err });
}

/**
 * SQLite's answers that say the disk or the file failed, not the statement: full, I/O errors
 * (SQLITE_IOERR_*), a file that cannot be opened, written or read as a database.
 */
const STORAGE_CODES = /^SQLITE_(FULL|IOERR|CANTOPEN|READONLY|CORRUPT|NOTADB|PROTOCOL)/;
