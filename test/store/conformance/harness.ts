/**
 * What the storage conformance suite's areas share (conformance/index.ts): the factory's
 * contract, the fixed clock and settings, drafts, and the Harness that drives a store through
 * the Store interface alone.
 */
import { createHash, randomUUID } from 'node:crypto';
import { afterEach, expect } from 'vitest';
import type { Assignment, Priority } from '../../../src/protocol/envelope.js';
import type { Delivery, Message } from '../../../src/protocol/wire.js';
import type {
  AppendOutcome,
  Committed,
  DeliveryConfig,
  MessageDraft,
  OpResults,
  SentAlert,
  Settled,
  StorageLimits,
  Store,
  StoreOp,
  ThreadBudgets,
} from '../../../src/store/store.js';

/** What a factory opens for one test. */
export interface OpenedStore {
  readonly store: Store;
  /** Closes the store and removes whatever the factory made for it. */
  readonly cleanup: () => Promise<void> | void;
  /**
   * Changes the stored bytes of message `seq` of `channel` behind the store's back and leaves
   * its checksum as it was, as a flipped bit on disk would (engine-specific, hence here).
   */
  readonly corrupt: (channel: string, seq: number) => Promise<void> | void;
  /**
   * Makes the store's storage refuse to grow, as a full disk would, or (false) lets it grow
   * again; engine-specific. Optional: a store that cannot do this honestly skips those tests.
   */
  readonly fillDisk?: (full: boolean) => Promise<void> | void;
  /**
   * Closes the store and opens it again on the same storage, with the same settings, as a
   * restarted adapter would; `cleanup` then closes the store it returned. Optional: a store
   * that cannot do this skips the cases that need it.
   */
  readonly reopen?: () => Promise<Store>;
}

export type StoreFactory = (opts: {
  delivery?: Partial<DeliveryConfig>;
  storage?: Partial<StorageLimits>;
  budgets?: Partial<ThreadBudgets>;
}) => Promise<OpenedStore>;

/** A fixed moment: every time in the suite is T0 plus something. */
export const T0 = Date.UTC(2031, 0, 1);
export const DAY = 24 * 3600 * 1000;
export const ALERTS_TO = 'orchestrator';
export const ALERTS_CHANNEL = `@${ALERTS_TO}`;

/** No storage bound unless a test sets one (the volume's free space is not this suite's). */
export const NO_BOUNDS: StorageLimits = { maxBytes: 2 ** 40, senderShare: 1, reserveBytes: 0 };

/** Every setting spelled out (the suite relies on no store's defaults); jitter ×1.0. */
export const BASE_DELIVERY: DeliveryConfig = {
  capacity: 500,
  criticalCapacity: 5000,
  leaseMs: 30_000,
  maxRetries: 3,
  retryBaseMs: 1000,
  alertsTo: ALERTS_TO,
  alertWindowMs: 30_000,
  random: () => 0.5,
};

/**
 * The default budgets (docs/reference/configuration.md), spelled out: hops per chain, messages
 * per thread.
 */
export const BASE_BUDGETS: ThreadBudgets = { hops: 8, messages: 16 };

export const sha256 = (text: string): Buffer => createHash('sha256').update(text).digest();
export const iso = (ms: number): string => new Date(ms).toISOString();

export interface DraftSpec {
  readonly channel: string;
  /** Recipients; for a direct channel '@x' they default to [x], for a group channel to none. */
  readonly to?: readonly string[];
  readonly sender?: string;
  readonly key?: string;
  /** Defaults to sha256(key). */
  readonly fingerprint?: Buffer;
  readonly kind?: string;
  readonly priority?: Priority;
  readonly replyTo?: number | null;
  /** reply_to: a message_id. */
  readonly replyToId?: string;
  /** The channels the sender may replay (its group channels, its own '@agent'). */
  readonly readable?: readonly string[];
  readonly payloadJson?: string;
  readonly at?: number;
}

export function draft(s: DraftSpec): MessageDraft {
  const key = s.key ?? randomUUID();
  return {
    sender: s.sender ?? 'pm',
    idempotencyKey: key,
    fingerprint: s.fingerprint ?? sha256(key),
    channel: s.channel,
    kind: s.kind ?? 'status',
    priority: s.priority ?? 'normal',
    replyTo: s.replyTo ?? null,
    ...(s.replyToId === undefined ? {} : { replyToId: s.replyToId }),
    ...(s.readable === undefined ? {} : { readable: new Set(s.readable) }),
    payloadJson: s.payloadJson ?? '{}',
    receivedAt: s.at ?? T0,
    recipients: s.to ?? (s.channel.startsWith('@') ? [s.channel.slice(1)] : []),
  };
}

/** One entry of deadLetters(), parsed. */
export interface DeadLetter {
  readonly id: number;
  readonly reason: string;
  readonly attempts: number;
  readonly recipient: string;
  readonly dead_lettered_at: string;
  readonly replay_delivery_id: number | null;
  readonly message: Message;
}

/** The code of a settled operation's error, or undefined when it succeeded. */
export const errorCode = (s: Settled | undefined): string | undefined =>
  s !== undefined && 'err' in s ? s.err.code : undefined;

export const outcomesOf = (s: Settled | undefined): AppendOutcome[] => {
  if (s === undefined || 'err' in s) throw new Error(`append refused: ${errorCode(s)}`);
  return s.ok as AppendOutcome[];
};

/** What an alert is about: the recipient of a delivery alert, the sender of a budget alert. */
export const subjectOf = (a: SentAlert): string =>
  a.kind === 'alert/budget' ? a.payload.sender : a.payload.recipient;

export const byRecipient = (alerts: readonly SentAlert[]): SentAlert[] =>
  [...alerts].sort((a, b) => subjectOf(a).localeCompare(subjectOf(b)));

/** A store under test, with the operations the tests speak in. */
export class Harness {
  constructor(public store: Store) {}

  /** One group, committed in one transaction. */
  run = async (ops: readonly StoreOp[]): Promise<Committed> => await this.store.commit(ops);

  /** One operation alone, settled (its result or its GatewayError). */
  async settle(op: StoreOp): Promise<Settled> {
    const { results } = await this.run([op]);
    expect(results).toHaveLength(1);
    return results[0]!;
  }

  /** One operation alone; its GatewayError is thrown. */
  async one<O extends StoreOp>(op: O): Promise<OpResults[O['op']]> {
    const settled = await this.settle(op);
    if ('err' in settled) throw settled.err;
    return settled.ok as OpResults[O['op']];
  }

  /** One append op of these drafts, in one group. */
  async append(...drafts: MessageDraft[]): Promise<AppendOutcome[]> {
    return await this.one({ op: 'append', drafts });
  }

  /** Appends that must all be stored (201); their assignments. */
  async send(...drafts: MessageDraft[]): Promise<Assignment[]> {
    return (await this.append(...drafts)).map((o, i) => {
      if (o.status !== 201) throw new Error(`draft ${i} was not stored: ${JSON.stringify(o)}`);
      return o.assignment;
    });
  }

  async lease(agent: string, max: number, now: number): Promise<Delivery[]> {
    const got = await this.one({ op: 'lease', agent, max, now });
    return got.map((j) => JSON.parse(j) as Delivery);
  }

  async ack(agent: string, ids: readonly number[]): Promise<OpResults['ack']> {
    return await this.one({ op: 'ack', agent, ids });
  }

  async nack(agent: string, ids: readonly number[], now: number): Promise<OpResults['nack']> {
    return await this.one({ op: 'nack', agent, ids, now });
  }

  async sweep(now: number): Promise<Committed> {
    return await this.run([{ op: 'sweep', now }]);
  }

  async messages(channel: string, after = 0, limit = 10_000): Promise<Message[]> {
    const got = await this.store.channelMessages(channel, after, limit);
    return got.map((j) => JSON.parse(j) as Message);
  }

  async deadLetters(after = 0, limit = 10_000): Promise<DeadLetter[]> {
    const got = await this.store.deadLetters(after, limit);
    return got.map((j) => JSON.parse(j) as DeadLetter);
  }

  async depth(agent: string): Promise<{ all: number; critical: number }> {
    return await this.store.depth(agent);
  }

  /** The alert messages written to alerts_to so far. */
  async alerts(): Promise<Message[]> {
    return await this.messages(ALERTS_CHANNEL);
  }
}

export const idsOf = (ds: readonly { message: { message_id: string } }[]): string[] =>
  ds.map((d) => d.message.message_id);

/** Opens a fresh store per call, closed after each test (one per area file that uses it). */
export type Open = (
  delivery?: Partial<DeliveryConfig>,
  channels?: readonly string[],
  storage?: Partial<StorageLimits>,
  budgets?: Partial<ThreadBudgets>,
) => Promise<Opened>;

/** A fresh store's harness; `reopen` (when the store has it) puts the reopened store in it. */
export type Opened = Harness &
  Pick<OpenedStore, 'corrupt' | 'fillDisk'> & { readonly reopen?: () => Promise<void> };

/** The `open` every area uses, for this factory; registers the cleanup after each test. */
export function opener(factory: StoreFactory): Open {
  const opened: OpenedStore[] = [];
  afterEach(async () => {
    for (const o of opened.splice(0)) await o.cleanup();
  });

  /**
   * A fresh store with these delivery settings, storage bounds, thread budgets and channel
   * counters (alerts_to's included).
   */
  async function open(
    delivery: Partial<DeliveryConfig> = {},
    channels: readonly string[] = [],
    storage: Partial<StorageLimits> = {},
    budgets: Partial<ThreadBudgets> = {},
  ): Promise<Opened> {
    const o = await factory({
      delivery: { ...BASE_DELIVERY, ...delivery },
      storage: { ...NO_BOUNDS, ...storage },
      budgets: { ...BASE_BUDGETS, ...budgets },
    });
    opened.push(o);
    await o.store.ensureChannels([ALERTS_CHANNEL, '@qa', '@pm', ...channels]);
    const h = new Harness(o.store);
    const reopen = o.reopen;
    return Object.assign(h, {
      corrupt: o.corrupt,
      fillDisk: o.fillDisk,
      reopen:
        reopen === undefined
          ? undefined
          : async () => {
              h.store = await reopen();
            },
    });
  }

  return open;
}
