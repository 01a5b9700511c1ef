/**
 * Delivery: the one door to deliveries. The long-poll inbox, acks and nacks, heartbeats, the
 * alerts_to agent's view of agents and dead letters, and the timer that turns expired leases
 * into failed attempts, makes retries ready and sends aggregated alerts.
 *
 * A waiting poll is woken in-process: every commit's effects name the agents that were given
 * new deliveries in it, and each of their waiters leases again. No polling loop. The timer is
 * armed for the next moment something falls due (a lease expiry, a retry's backoff end, an
 * alert window), never on a fixed tick, and re-armed only when a commit says timing changed.
 *
 * Every poll, ack, nack and lease extension passing here tells the stall watch (stalls.ts) that
 * its agent is alive; a parked poll counts as polling for as long as it waits.
 */
import type { Logger } from 'pino';
import type { LeaseExtension, Nack } from '../protocol/delivery-ids.js';
import { GatewayError } from '../protocol/errors.js';
import { recipientJourneys } from '../store/rules/journey.js';
import {
  type AgentState,
  type CommitEffects,
  DEFAULT_DELIVERY,
  type DeadLetterFilter,
  type DeliveryJson,
  type MessageStatus,
  type OpResults,
  type Store,
  type StoreOp,
} from '../store/store.js';
import type { AdapterEventMap } from './events.js';
import type { GroupCommit } from './group-commit.js';
import { StallWatch } from './stalls.js';

/** The longest delay a Node timer keeps (a longer one fires at once, with a warning). */
const MAX_TIMER_MS = 2 ** 31 - 1;

interface Waiter {
  /** Ends the wait: false, nothing came (timeout, client gone, stop); true, lease again. */
  readonly wake: (woken: boolean) => void;
  /** Ends the wait with a lease queued in the group being formed (beforeGroup). */
  readonly take: () => void;
  /** A reply wait's: the message whose reply it waits for. */
  readonly replyTo?: string;
}

/** The parked waits of each agent: inbox polls, or waits for a reply. */
type Waiters = Map<string, Set<Waiter>>;

/**
 * How a parked wait ended: nothing came, look again, or what it took in the group that woke it
 * (an inbox poll's deliveries, a reply wait's reply).
 */
type Parked<T> = boolean | T;

export interface DeliveryOptions {
  readonly store: Store;
  readonly commits: GroupCommit;
  readonly now: () => number;
  readonly logger: Logger;
  /** Attempts a copy gets before it is dead-lettered (1 + AGW_MAX_RETRIES), for journeys. */
  readonly maxAttempts?: number;
  /** Where a stalled agent is told (`agent:stalled`): the adapter's event map (events.ts). */
  readonly events?: AdapterEventMap;
  /** Stalled agents are watched when given (stalls.ts): the topology's agents and alerts_to. */
  readonly stalls?: {
    readonly agents: readonly string[];
    readonly alertsTo: string;
    /** AGW_STALL_S in ms. Default 120,000. */
    readonly stallMs?: number;
  };
}

/**
 * Who asks about a message: an agent's id or `operator:<id>`, and whether it oversees every
 * message (alerts_to, an operator).
 */
export interface Viewer {
  readonly agent: string;
  readonly overseer: boolean;
}

export class DeliveryService {
  readonly #store: Store;
  readonly #commits: GroupCommit;
  readonly #now: () => number;
  readonly #logger: Logger;
  readonly #maxAttempts: number;
  readonly #waiters: Waiters = new Map();
  /** GET /v1/messages/{id}/reply waits, by their agent: woken as its inbox polls are. */
  readonly #replyWaiters: Waiters = new Map();
  /** Who polled when, and the stall check; undefined when not asked for. */
  readonly stalls: StallWatch | undefined;
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Number.POSITIVE_INFINITY;
  #stopped = false;
  /**
   * Wakes told of each agent so far (#wake), and of everyone (#wakeAll): a wait compares them
   * before it parks with what they were when its lease or take was queued (#wakeMark), so a
   * wake told between the two (its commit came after the read, before the park) is not lost.
   */
  readonly #wakes = new Map<string, number>();
  #wakesAll = 0;

  constructor(opts: DeliveryOptions) {
    this.#store = opts.store;
    this.#commits = opts.commits;
    this.#now = opts.now;
    this.#logger = opts.logger;
    this.#maxAttempts = opts.maxAttempts ?? 1 + DEFAULT_DELIVERY.maxRetries;
    this.stalls =
      opts.stalls &&
      new StallWatch({
        ...opts,
        ...opts.stalls,
        polling: (agent) => this.parkedPolls(agent) > 0,
      });
    this.#commits.on('commit', (_stats, effects) => this.#afterCommit(effects));
    this.#commits.beforeGroup = (ops) => this.#handOff(ops);
    // Other adapters on the same store (PostgreSQL replicas) announce what they changed.
    this.#store.watch((fx) => {
      if (this.#stopped) return;
      if (fx.everyone === true) this.#wakeAll();
      else for (const agent of fx.woken) this.#wake(agent);
      if (fx.timingChanged) this.#arm();
    });
  }

  /**
   * Sweeps what fell due while the adapter was down, then keeps the timer armed; the stall
   * check starts once that sweep is done.
   */
  async start(): Promise<void> {
    await this.#sweep();
    this.stalls?.start();
  }

  /**
   * Polls of `agent` parked now, waiting for a delivery. One whose connection closed is not
   * among them: it ended (answering nothing) without leasing.
   */
  parkedPolls(agent: string): number {
    return this.#waiters.get(agent)?.size ?? 0;
  }

  /** Waits of `agent` for a reply parked now (GET /v1/messages/{id}/reply). */
  parkedReplyWaits(agent: string): number {
    return this.#replyWaiters.get(agent)?.size ?? 0;
  }

  /** Stops the timer and answers every parked poll with what it has (nothing). */
  stop(): void {
    this.#stopped = true;
    this.stalls?.stop();
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    for (const waiters of [this.#waiters, this.#replyWaiters]) {
      for (const set of waiters.values()) for (const w of set) w.wake(false);
      waiters.clear();
    }
  }

  /**
   * Up to `max` of the agent's ready deliveries, leased; waits up to waitS seconds for one to
   * arrive when there are none. `closed` settles when the client goes away. With `maxBytes`, no
   * more are leased than fit in it (the first always).
   */
  async inbox(
    agent: string,
    waitS: number,
    max: number,
    closed: Promise<unknown>,
    maxBytes?: number,
  ): Promise<DeliveryJson[]> {
    this.stalls?.active(agent);
    const deadline = this.#now() + waitS * 1000;
    let gone = false;
    closed.then(() => {
      gone = true;
    });
    // a lease still queued when the connection closes is left out of its group: the close
    // may come in the very turn the poll arrived or was woken (GroupCommit.run)
    let mark = 0;
    const lease = () => {
      mark = this.#wakeMark(agent);
      return this.#commits.run({ op: 'lease', agent, max, now: this.#now(), maxBytes }, () => gone);
    };
    let leasing = lease();
    for (;;) {
      const got = await leasing;
      if (got.length > 0 || gone || this.#stopped) return got;
      const left = deadline - this.#now();
      if (left <= 0) return [];
      // a commit that gave this agent deliveries after the lease read, before this turn: its
      // wake found no poll parked; look again instead of parking past it
      if (this.#wakeMark(agent) !== mark) {
        leasing = lease();
        continue;
      }
      const parked = await this.#park(this.#waiters, agent, left, closed, lease);
      if (parked === false) return [];
      // woken: lease again; or leased already, in the commit of the message that woke it
      leasing = parked === true ? lease() : Promise.resolve(parked);
    }
  }

  /**
   * The reply to a message `agent` sent (docs/design/time.md, "Asking"): its first copy held by
   * `agent`, taken at once (leased, its lease renewed, or as it is: store.ts take_reply), or,
   * none yet, within waitS seconds: the wait parks as an inbox poll does, and the group that
   * commits the reply takes it in that very commit (#handOff). Undefined: none came. 404
   * `not_found` unless `agent` sent the message.
   */
  async reply(
    agent: string,
    messageId: string,
    waitS: number,
    closed: Promise<unknown>,
  ): Promise<DeliveryJson | undefined> {
    this.stalls?.active(agent);
    const deadline = this.#now() + waitS * 1000;
    let gone = false;
    closed.then(() => {
      gone = true;
    });
    let mark = 0;
    const take = () => {
      mark = this.#wakeMark(agent);
      return this.#commits.run({ op: 'take_reply', agent, messageId, now: this.#now() });
    };
    let taking = take();
    for (;;) {
      const got = await taking;
      if (got !== undefined || gone || this.#stopped) return got;
      const left = deadline - this.#now();
      if (left <= 0) return undefined;
      if (this.#wakeMark(agent) !== mark) {
        taking = take(); // woken between the take's read and now (as inbox)
        continue;
      }
      const parked = await this.#park(this.#replyWaiters, agent, left, closed, take, messageId);
      if (parked === false) return undefined;
      taking = parked === true ? take() : Promise.resolve(parked);
    }
  }

  async ack(agent: string, ids: readonly number[]) {
    this.stalls?.active(agent);
    const r = await this.#commits.run({ op: 'ack', agent, ids, now: this.#now() });
    return { acked: r.acked, dead_lettered: r.dead, unknown: r.unknown };
  }

  /** Failed attempts; with `retry` false, dead letters at once (`rejected`, `reason` kept). */
  nack(agent: string, n: Nack): Promise<OpResults['nack']> {
    this.stalls?.active(agent);
    return this.#commits.run({
      op: 'nack',
      agent,
      ids: n.ids,
      retry: n.retry,
      reason: n.reason,
      now: this.#now(),
    });
  }

  /** DELETE /v1/messages/{id}: the sender's scheduled message, before it fires. */
  /**
   * A scheduled message of `sender` cancelled; `audited` for an operator and alerts_to, whose
   * messages the audit log records (rules/operators.ts actAudit).
   */
  async cancelScheduled(sender: string, messageId: string, audited: boolean): Promise<void> {
    await this.#commits.run({
      op: 'cancel_scheduled',
      sender,
      messageId,
      now: this.#now(),
      audited,
    });
  }

  /** The agent is still working: each lease now ends extendMs from now. */

  async extend(agent: string, e: LeaseExtension) {
    this.stalls?.active(agent);
    const leases = await this.#commits.run({
      op: 'extend',
      agent,
      ids: e.ids,
      extendMs: e.extendMs,
      now: this.#now(),
    });
    return { leases };
  }

  /** For its sender, the alerts_to agent and operators: the message and each recipient's state. */
  async messageStatus(viewer: Viewer, messageId: string, alertsTo: string): Promise<string> {
    const s = await this.#store.messageStatus(messageId);
    if (s === undefined) throw new GatewayError('unknown_message', `no message ${messageId}`);
    if (viewer.agent !== s.sender && !viewer.overseer) {
      throw new GatewayError(
        'not_your_message',
        `only the sender of ${messageId} (or ${alertsTo}, alerts_to) may ask what became of it`,
      );
    }
    const later =
      s.scheduled_for === undefined
        ? ''
        : `"scheduled_for":"${s.scheduled_for}",${s.cancelled_at === undefined ? '' : `"cancelled_at":"${s.cancelled_at}",`}`;
    return `{"message":${s.message},${later}"recipients":${JSON.stringify(s.recipients)}}`;
  }

  /**
   * A message's journey (docs/reference/adapter-api.md): every recipient's for its sender and
   * alerts_to, a recipient's own copy for a recipient; 403 for anyone else.
   */
  async journey(viewer: Viewer, id: string, alertsTo: string): Promise<string> {
    const { agent } = viewer;
    // a message_id, or else the idempotency key of one of the caller's own sends
    const byId = await this.#store.messageStatus(id);
    const messageId = byId !== undefined ? id : ((await this.#store.messageIdOf(agent, id)) ?? id);
    const [s, rows] = await Promise.all([
      byId ?? this.#store.messageStatus(messageId),
      this.#store.journey(messageId),
    ]);
    if (s?.scheduled_for !== undefined) return scheduledJourney(viewer, s, alertsTo);
    if (s === undefined || rows === undefined) {
      throw new GatewayError('not_found', `no message ${messageId}`);
    }
    const all = agent === s.sender || viewer.overseer;
    if (!all && !rows.copies.some((c) => c.recipient === agent)) {
      throw new GatewayError(
        'not_your_message',
        `only the sender of ${messageId}, its recipients (their own copy) and ${alertsTo} (alerts_to) may see its journey`,
      );
    }
    const recipients = recipientJourneys(rows, {
      maxAttempts: this.#maxAttempts,
      now: this.#now(),
      ...(all ? {} : { only: agent }),
    });
    const accepted = new Date(rows.acceptedAt).toISOString();
    return `{"message":${s.message},"accepted_at":"${accepted}","recipients":${JSON.stringify(recipients)}}`;
  }

  heartbeat(agent: string): Promise<OpResults['heartbeat']> {
    return this.#commits.run({ op: 'heartbeat', agent, now: this.#now() });
  }

  agents(ids: Iterable<string>): Promise<AgentState[]> {
    return this.#store.agents(ids);
  }

  deadLetters(
    after: number,
    limit: number,
    maxBytes?: number,
    filter?: DeadLetterFilter,
  ): Promise<string[]> {
    return this.#store.deadLetters(after, limit, maxBytes, filter);
  }

  /** A replay by an operator or alerts_to, audited in its commit when it replays. */
  replayDeadLetter(id: number, by: string): Promise<OpResults['replay_dead_letter']> {
    return this.#commits.run({ op: 'replay_dead_letter', id, now: this.#now(), by, audited: true });
  }

  /** Parked polls wake and the timer re-arms; the alerts' CRIT entries are events.ts's. */
  #afterCommit(fx: CommitEffects): void {
    for (const agent of fx.woken) this.#wake(agent);
    if (fx.timingChanged) this.#arm();
  }

  /**
   * Parks a wait of `agent` in `all` for up to `ms`; `take` is what it does in the group that
   * wakes it (an inbox poll's lease, a reply wait's take), `replyTo` the message a reply wait
   * waits for.
   */
  #park<T>(
    all: Waiters,
    agent: string,
    ms: number,
    closed: Promise<unknown>,
    take: () => Promise<T>,
    replyTo?: string,
  ): Promise<Parked<T>> {
    return new Promise((resolve) => {
      let set = all.get(agent);
      if (set === undefined) {
        set = new Set();
        all.set(agent, set);
      }
      const waiters = set;
      const end = (how: boolean | Promise<T>) => {
        clearTimeout(timer);
        waiters.delete(waiter);
        if (waiters.size === 0 && all.get(agent) === waiters) all.delete(agent);
        // a parked poll ends: the agent polled until now
        this.stalls?.active(agent);
        resolve(how);
      };
      const waiter: Waiter = {
        wake: (woken) => end(woken),
        take: () => end(take()),
        ...(replyTo === undefined ? {} : { replyTo }),
      };
      const timer = setTimeout(() => waiter.wake(false), ms);
      waiters.add(waiter);
      closed.then(() => waiter.wake(false));
    });
  }

  /**
   * Before a group is taken: for each recipient of its appends with a poll parked, the oldest
   * such poll leases in this very group, after the appends (group-commit.ts runs leases last).
   * The message and its lease then share one commit, and the poll is answered when it returns.
   * The other parked polls of the agent are woken after the commit, as always.
   */
  #handOff(ops: readonly StoreOp[]): void {
    if ((this.#waiters.size === 0 && this.#replyWaiters.size === 0) || this.#stopped) return;
    const taken = new Set<string>();
    for (const op of ops) {
      if (op.op !== 'append') continue;
      for (const draft of op.drafts) {
        for (const agent of draft.recipients) {
          // a reply that a wait is for: taken by it in this group (queued before the leases,
          // which run last, so no poll of the group hands it over instead)
          const replyTo = draft.replyToId ?? undefined;
          if (replyTo !== undefined) {
            for (const w of [...(this.#replyWaiters.get(agent) ?? [])])
              if (w.replyTo === replyTo) w.take();
          }
          if (taken.has(agent)) continue;
          const waiter = this.#waiters.get(agent)?.values().next().value;
          if (waiter === undefined) continue;
          taken.add(agent);
          waiter.take();
        }
      }
    }
  }

  /**
   * Every parked wait of `agent` looks again: its inbox polls, and its reply waits (a commit
   * names the agents it gave deliveries, not which messages: a reply wait's look is two index
   * probes).
   */
  #wake(agent: string): void {
    this.#wakes.set(agent, (this.#wakes.get(agent) ?? 0) + 1);
    for (const all of [this.#waiters, this.#replyWaiters]) {
      const set = all.get(agent);
      if (set !== undefined) for (const w of [...set]) w.wake(true);
    }
  }

  /** What the wakes told of `agent` add up to now: it moves with each one. */
  #wakeMark(agent: string): number {
    return this.#wakesAll + (this.#wakes.get(agent) ?? 0);
  }

  #wakeAll(): void {
    this.#wakesAll++;
    for (const agent of new Set([...this.#waiters.keys(), ...this.#replyWaiters.keys()]))
      this.#wake(agent);
  }

  /**
   * Arms the timer for the next moment something falls due. With a store that other adapters
   * share, at most safetyPollMs ahead: a change of theirs whose announcement was lost (a lease
   * that expires sooner, a delivery for a parked poll) is found by then.
   */
  #arm(): void {
    if (this.#stopped) return;
    this.#store.nextDue(this.#now()).then(
      (next) => this.#armAt(next),
      (err: unknown) => {
        this.#logger.error({ err }, 'could not read when the next delivery falls due');
        this.#armAt(undefined);
      },
    );
  }

  #armAt(next: number | undefined): void {
    if (this.#stopped) return;
    const safety = this.#store.safetyPollMs;
    const look = safety === undefined ? undefined : this.#now() + safety;
    const due = next === undefined ? look : look === undefined ? next : Math.min(next, look);
    if (due === undefined || due >= this.#timerAt) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    // +1 ms: fire once the moment has passed, not a hair before it. A moment past what a Node
    // timer can wait (2^31 - 1 ms, 24.8 days: a message scheduled a year ahead) is reached in
    // steps: the timer fires early and only arms again (Node would fire a longer one at once)
    const now = this.#now();
    const far = due - now + 1 > MAX_TIMER_MS;
    this.#timerAt = far ? now + MAX_TIMER_MS : due;
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.#timerAt = Number.POSITIVE_INFINITY;
        if (far) return this.#arm();
        const work = next !== undefined && next <= this.#now() ? this.#sweep() : this.#look();
        work.catch((err: unknown) => this.#logger.error({ err }, 'delivery sweep failed'));
      },
      far ? MAX_TIMER_MS : Math.max(0, due - now) + 1,
    );
  }

  /** The safety poll: nothing known fell due, but parked polls look again. */
  async #look(): Promise<void> {
    await this.#lookAgain();
    this.#arm();
  }

  async #sweep(): Promise<void> {
    await this.#commits.run({ op: 'sweep', now: this.#now() });
    // Retries whose backoff ended are ready now: parked polls look again.
    await this.#lookAgain();
    this.#arm();
  }

  /**
   * Parked polls look again, for what no announcement told: with a store that can say which of
   * their agents have a delivery ready (store.ts readyAmong, one read without a lock), only
   * those agents' polls, and every reply wait (few; a reply may be a copy already leased);
   * otherwise, or if that read fails, every parked poll. Each poll that looks again is a lease
   * in the next group, with its agent's row locked: on three replicas with 1,000 parked polls,
   * waking them all each second made a group of ~330 leases per replica per second, whose locks
   * the sends to those agents on the other replicas waited behind (bench/AGENTS-RESULTS.md).
   */
  async #lookAgain(): Promise<void> {
    const parked = [...this.#waiters.keys()];
    let ready: ReadonlySet<string> | undefined;
    if (this.#store.readyAmong !== undefined && parked.length > 0) {
      try {
        ready = await this.#store.readyAmong(parked, this.#now());
      } catch (err) {
        this.#logger.warn({ err }, 'could not read which parked agents have deliveries ready');
      }
    }
    if (this.#stopped) return;
    if (ready === undefined) return this.#wakeAll();
    // a poll of one of them between its lease and its park sees its wake mark move (#wake)
    for (const agent of new Set([...ready, ...this.#replyWaiters.keys()])) this.#wake(agent);
  }
}

/**
 * The journey of a scheduled message not yet sent (docs/design/time.md): its sender and overseers
 * see each recipient to be, with cause `scheduled` (or the cancel); no one else sees it.
 */
function scheduledJourney(viewer: Viewer, s: MessageStatus, alertsTo: string): string {
  if (viewer.agent !== s.sender && !viewer.overseer) {
    throw new GatewayError(
      'not_your_message',
      `only the sender of a scheduled message (or ${alertsTo}, alerts_to) may see its journey`,
    );
  }
  const recipients = (s.scheduledTo ?? []).map((agent) => ({
    agent,
    state: 'scheduled',
    attempts: 0,
    reason: null,
    note: null,
    cause: 'scheduled',
    explanation:
      s.cancelled_at === undefined
        ? `scheduled by ${s.sender} for ${s.scheduled_for}: it is sent to ${agent} then`
        : `scheduled by ${s.sender} for ${s.scheduled_for}, and cancelled by them at ${s.cancelled_at}: it is never sent`,
    last_poll: null,
    waiting_behind: null,
    events: [],
  }));
  const accepted = JSON.parse(s.message).timestamp_iso8601 as string;
  return `{"message":${s.message},"accepted_at":"${accepted}","scheduled_for":"${s.scheduled_for}","recipients":${JSON.stringify(recipients)}}`;
}
