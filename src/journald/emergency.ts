/**
 * The emergency channel: priority=CRIT journald entries that bypass the adapter entirely
 * (docs/reference/journald.md, "Emergencies"). The orchestrator follows them with
 * `agent-gateway watch` (journalctl, matching MESSAGE_ID).
 *
 * CRIT entries go into the node's journal, which every unit shares, so they are bounded:
 *
 * - **Explicit emergencies** (an agent's `POST /v1/emergency`, the `emergency` command) share
 *   one token bucket per process, whatever their reason: `explicitBurst` (20) at once, refilled
 *   at `explicitPerMinute` (10) a minute. Past it nothing is written; the refusal is counted
 *   (`stats.refused`), the caller is told when a token will be there (`retryAfterS`), and the
 *   number refused goes out as `AGW_REFUSED` on the next explicit entry that is written.
 * - **Automatic emergencies** (the gateway's own alarms) keep their window of one per reason
 *   every `windowMs` and are never charged to the explicit budget, so an agent cannot silence
 *   them by exhausting it.
 * - **Every entry** is capped: at most `maxFields` (16) extra fields, MESSAGE at most
 *   `maxMessageBytes` (4 KiB), the whole entry at most `maxEntryBytes` (8 KiB). See `#entry` for
 *   the exact, deterministic rule; what was cut is named in `AGW_TRUNCATED`, what was dropped
 *   counted in `AGW_FIELDS_DROPPED`, and both in `stats`.
 *
 * An explicit emergency cannot pass for an automatic one: the automatic reasons
 * (`AUTOMATIC_REASONS`) and the `AGW_` field names are the gateway's. An explicit one that asks
 * for an automatic reason is written as `manual`, the reason asked for kept in
 * `AGW_REQUESTED_REASON`, and its `AGW_*` fields are dropped (counted). It is written rather than
 * refused because this is the channel of last resort: an agent in trouble that picked the
 * gateway's word should still reach the operator, and `AGW_REASON=integrity` (or `dead_letter`,
 * ...) then always means the gateway itself saw it.
 */
import { type Fields, normalizeKey } from './native-protocol.js';
import type { JournalWriter } from './writer.js';

/** The fixed MESSAGE_ID of gateway emergencies (docs/reference/journald.md, "Emergencies"). */
export const EMERGENCY_MESSAGE_ID = '80911d6a6b994fc880b96a0641d4e224';

export const AUTOMATIC_REASONS = [
  'adapter_unreachable',
  'circuit_open',
  'outbox_full',
  'dead_letter',
  'integrity',
  'storage',
  'stalled',
] as const;
export type EmergencyReason = (typeof AUTOMATIC_REASONS)[number] | 'manual' | (string & {});

const AUTOMATIC: ReadonlySet<string> = new Set(AUTOMATIC_REASONS);

/** Field names of this prefix are the gateway's: an explicit emergency's are dropped. */
export const GATEWAY_FIELD_PREFIX = 'AGW_';

export interface Emergency {
  readonly reason: EmergencyReason;
  readonly message: string;
  /**
   * Extra fields; keys are normalized to journald's form (AGW_ is not added). Names the gateway
   * writes itself (MESSAGE, PRIORITY, AGW_AGENT_ID, ...; `RESERVED_FIELDS`) are dropped, and on
   * an explicit emergency every `AGW_` name (the automatic entries' AGW_RECIPIENT, AGW_COUNT,
   * AGW_DETAIL, ...).
   */
  readonly fields?: Record<string, string | number | boolean>;
}

/** The defaults of `EmergencyOptions`' bounds. */
export const EMERGENCY_DEFAULTS = {
  windowMs: 30_000,
  explicitPerMinute: 10,
  explicitBurst: 20,
  maxFields: 16,
  maxMessageBytes: 4096,
  maxEntryBytes: 8192,
} as const;

export interface EmergencyOptions {
  readonly agentId: string;
  /** From POD_NAME and POD_NAMESPACE when set. */
  readonly pod?: string | undefined;
  readonly namespace?: string | undefined;
  /** Automatic emergencies: at most one per reason in this window, ms. Default 30,000. */
  readonly windowMs?: number;
  /**
   * Explicit emergencies, whatever their reason, share one token bucket per process: it refills
   * at this many tokens a minute (continuously: one every 6 s at the default). Default 10.
   */
  readonly explicitPerMinute?: number;
  /** The bucket's size: explicit emergencies that may be written at once. Default 20. */
  readonly explicitBurst?: number;
  /** Extra fields kept on one entry (the first ones, in order); the rest dropped. Default 16. */
  readonly maxFields?: number;
  /** MESSAGE's bound in UTF-8 bytes; longer is cut, with a marker. Default 4,096. */
  readonly maxMessageBytes?: number;
  /**
   * The whole entry's bound in bytes (each field counted as name + value + 10, the native
   * protocol's worst case), the gateway's own fields included. Default 8,192.
   */
  readonly maxEntryBytes?: number;
  /** The clock, ms (Date.now by default): the window and the bucket read it. */
  readonly now?: () => number;
}

/** What `tryRaise` did. */
export type RaiseResult =
  /**
   * Written; `clipped` when the caps cut MESSAGE or a field, or dropped fields. `requestedReason`:
   * an explicit emergency asked for this automatic reason and was written as `manual`.
   */
  | { readonly written: true; readonly clipped: boolean; readonly requestedReason?: string }
  /**
   * Not written: the explicit budget is spent (`rate_limited`), or an automatic reason's window
   * is taken (`suppressed`: counted and reported later as AGW_SUPPRESSED). `retryAfterS` is a
   * whole number of seconds, at least 1, until one would be written.
   */
  | {
      readonly written: false;
      readonly why: 'rate_limited' | 'suppressed';
      readonly retryAfterS: number;
    };

export interface EmergencyStats {
  /** Entries written (summaries of suppressed ones included). */
  written: number;
  /** Explicit emergencies refused by the budget (answered rate_limited), in all. */
  refused: number;
  /** Automatic emergencies held back by their reason's window, in all. */
  suppressed: number;
  /** Entries written with MESSAGE or a field cut, or fields dropped, by the caps. */
  clipped: number;
  /** Extra fields dropped by the caps (over maxFields, no room left, or a reserved name). */
  fieldsDropped: number;
}

/** Field names the gateway writes itself: a caller's field with one of them is dropped. */
export const RESERVED_FIELDS: ReadonlySet<string> = new Set([
  'MESSAGE',
  'PRIORITY',
  'MESSAGE_ID',
  'SYSLOG_IDENTIFIER',
  'AGW_AGENT_ID',
  'AGW_REASON',
  'AGW_POD',
  'AGW_NAMESPACE',
  'AGW_SUPPRESSED',
  'AGW_REFUSED',
  'AGW_TRUNCATED',
  'AGW_FIELDS_DROPPED',
  'AGW_DROPPED',
  'AGW_DROPPED_TOTAL',
  'AGW_REQUESTED_REASON',
]);

/** Ends a MESSAGE or field value that the caps cut. */
export const CLIP_MARKER = ' [... truncated by agent-gateway]';
const MARKER_BYTES = Buffer.byteLength(CLIP_MARKER);
/** Room kept for AGW_TRUNCATED (at most two names and lengths) and AGW_FIELDS_DROPPED. */
const REPORT_RESERVE = 192;
/** A field is cut only if this much of its value fits; else it is dropped. */
const MIN_CUT_BYTES = 64;
/** AGW_REASON's bound in bytes. */
const MAX_REASON_BYTES = 64;

/** A field's size as the bounds count it: the native protocol's worst case. */
function cost(key: string, bytes: number): number {
  return key.length + 10 + bytes;
}

/** The first at most `n` bytes of `b`, cut at a character boundary. */
function cutUtf8(b: Buffer, n: number): string {
  if (b.length <= n) return b.toString('utf8');
  let i = Math.max(0, n);
  while (i > 0 && (b[i]! & 0xc0) === 0x80) i--;
  return b.subarray(0, i).toString('utf8');
}

interface Window {
  openedAt: number;
  count: number;
  suppressed: number;
  timer?: NodeJS.Timeout;
}

type Resolved = Required<Omit<EmergencyOptions, 'pod' | 'namespace'>> &
  Pick<EmergencyOptions, 'pod' | 'namespace'>;

export class Emergencies {
  readonly stats: EmergencyStats = {
    written: 0,
    refused: 0,
    suppressed: 0,
    clipped: 0,
    fieldsDropped: 0,
  };
  readonly #writer: JournalWriter;
  readonly #o: Resolved;
  readonly #windows = new Map<string, Window>();
  /** The explicit bucket: tokens now (fractional), as of `#refilledAt`. */
  #tokens: number;
  #refilledAt: number;
  /** Explicit emergencies refused since the last one written (AGW_REFUSED). */
  #refusedUnreported = 0;

  constructor(writer: JournalWriter, opts: EmergencyOptions) {
    this.#writer = writer;
    this.#o = { ...EMERGENCY_DEFAULTS, now: Date.now, ...opts };
    for (const k of [
      'windowMs',
      'explicitPerMinute',
      'explicitBurst',
      'maxFields',
      'maxMessageBytes',
      'maxEntryBytes',
    ] as const) {
      const v = this.#o[k];
      if (!Number.isFinite(v) || v < 0 || (k !== 'maxFields' && k !== 'windowMs' && v <= 0))
        throw new RangeError(`Emergencies: ${k} must be a positive number, not ${v}`);
    }
    this.#tokens = this.#o.explicitBurst;
    this.#refilledAt = this.#o.now();
  }

  /**
   * Writes a CRIT entry, unless a bound holds it back. `explicit` (default: reason is `manual`)
   * charges it to the explicit budget; otherwise it is automatic, limited per reason. Returns
   * whether it was written now (`tryRaise(...).written`).
   */
  raise(e: Emergency, opts: { explicit?: boolean } = {}): boolean {
    return this.tryRaise(e, opts).written;
  }

  /**
   * As `raise`, saying why an emergency was not written and when to try again. An explicit one
   * past the budget is `{ written: false, why: 'rate_limited', retryAfterS }`: nothing written,
   * counted in `stats.refused`. An automatic one inside its reason's window is `suppressed`:
   * counted, and reported as AGW_SUPPRESSED with the next one of that reason or on an entry of
   * its own when the window ends.
   */
  tryRaise(e: Emergency, opts: { explicit?: boolean } = {}): RaiseResult {
    const explicit = opts.explicit ?? e.reason === 'manual';
    return explicit ? this.#explicit(e) : this.#automatic(e);
  }

  /** Explicit emergencies that could be written now (whole tokens left in the bucket). */
  get explicitAvailable(): number {
    this.#refill();
    return Math.floor(this.#tokens);
  }

  #refill(): void {
    const now = this.#o.now();
    const elapsed = now - this.#refilledAt;
    if (elapsed <= 0) return; // a clock that stepped back refills nothing
    // elapsed * rate first: whole minutes give whole tokens exactly
    this.#tokens = Math.min(
      this.#o.explicitBurst,
      this.#tokens + (elapsed * this.#o.explicitPerMinute) / 60_000,
    );
    this.#refilledAt = now;
  }

  #explicit(e: Emergency): RaiseResult {
    this.#refill();
    if (this.#tokens < 1) {
      this.stats.refused++;
      this.#refusedUnreported++;
      const ms = ((1 - this.#tokens) * 60_000) / this.#o.explicitPerMinute;
      return {
        written: false,
        why: 'rate_limited',
        retryAfterS: Math.max(1, Math.ceil(ms / 1000)),
      };
    }
    this.#tokens -= 1;
    const refused = this.#refusedUnreported;
    this.#refusedUnreported = 0;
    const extra = { AGW_REFUSED: refused > 0 ? refused : undefined };
    if (!AUTOMATIC.has(e.reason)) {
      return { written: true, clipped: this.#write(e, extra, true) };
    }
    const clipped = this.#write(
      { ...e, reason: 'manual' },
      { ...extra, AGW_REQUESTED_REASON: e.reason },
      true,
    );
    return { written: true, clipped, requestedReason: e.reason };
  }

  #automatic(e: Emergency): RaiseResult {
    const key = e.reason;
    const now = this.#o.now();
    let w = this.#windows.get(key);
    if (w === undefined || now - w.openedAt >= this.#o.windowMs) {
      if (w?.timer) clearTimeout(w.timer);
      w = { openedAt: now, count: 0, suppressed: w?.suppressed ?? 0 };
      this.#windows.set(key, w);
    }
    if (w.count >= 1) {
      w.suppressed++;
      this.stats.suppressed++;
      const left = w.openedAt + this.#o.windowMs - now;
      if (w.timer === undefined) {
        const win = w;
        win.timer = setTimeout(() => this.#summary(key, e.reason, win), left);
        win.timer.unref();
      }
      return {
        written: false,
        why: 'suppressed',
        retryAfterS: Math.max(1, Math.ceil(left / 1000)),
      };
    }
    w.count++;
    const suppressed = w.suppressed;
    w.suppressed = 0;
    const clipped = this.#write(e, { AGW_SUPPRESSED: suppressed > 0 ? suppressed : undefined });
    return { written: true, clipped };
  }

  #summary(key: string, reason: string, w: Window): void {
    w.timer = undefined;
    if (w.suppressed === 0 || this.#windows.get(key) !== w) return;
    const n = w.suppressed;
    w.suppressed = 0;
    w.openedAt = this.#o.now();
    w.count = 1;
    this.#write(
      { reason, message: `${n} more ${reason} emergencies were held back by the rate limit` },
      { AGW_SUPPRESSED: n },
    );
  }

  /** Writes the entry, capped; true if the caps changed it. */
  #write(e: Emergency, extra: Fields, explicit = false): boolean {
    const { fields, clipped, dropped } = this.#entry(e, extra, explicit);
    this.#writer.write(fields);
    this.stats.written++;
    if (clipped) this.stats.clipped++;
    this.stats.fieldsDropped += dropped;
    return clipped;
  }

  /**
   * The entry, within the caps, deterministically:
   * 1. AGW_REASON is cut to 64 bytes; the gateway's own fields come first.
   * 2. MESSAGE is cut to `maxMessageBytes` (or what is left of `maxEntryBytes`, if less), at a
   *    character boundary, ending with CLIP_MARKER.
   * 3. Extra fields: keys normalized (a later field with the same normalized key replaces the
   *    value), reserved names dropped (on an explicit emergency every `AGW_` name), the first
   *    `maxFields` kept, the rest dropped. In order,
   *    each is kept whole if it fits what is left of `maxEntryBytes`; else cut to fit, with
   *    CLIP_MARKER, if at least 64 bytes of its value would remain; else dropped.
   * 4. `AGW_TRUNCATED=NAME:original-bytes,...` names what was cut, `AGW_FIELDS_DROPPED=n`
   *    counts what was dropped (room for both is kept aside).
   */
  #entry(
    e: Emergency,
    extra: Fields,
    explicit: boolean,
  ): { fields: Fields; clipped: boolean; dropped: number } {
    const o = this.#o;
    const truncated: string[] = [];
    const reasonBytes = Buffer.from(String(e.reason), 'utf8');
    const reason = cutUtf8(reasonBytes, MAX_REASON_BYTES);
    if (reasonBytes.length > MAX_REASON_BYTES) truncated.push(`AGW_REASON:${reasonBytes.length}`);
    const fixed: Fields = {
      PRIORITY: 2,
      SYSLOG_IDENTIFIER: 'agent-gateway',
      MESSAGE_ID: EMERGENCY_MESSAGE_ID,
      AGW_AGENT_ID: o.agentId,
      AGW_REASON: reason,
      AGW_POD: o.pod,
      AGW_NAMESPACE: o.namespace,
      ...extra,
    };
    let room = o.maxEntryBytes - REPORT_RESERVE;
    for (const [k, v] of Object.entries(fixed))
      if (v !== undefined) room -= cost(k, Buffer.byteLength(String(v)));

    const messageBytes = Buffer.from(String(e.message), 'utf8');
    const messageLimit = Math.min(o.maxMessageBytes, room - cost('MESSAGE', 0));
    let message = messageBytes.toString('utf8');
    if (messageBytes.length > messageLimit) {
      message = cutUtf8(messageBytes, messageLimit - MARKER_BYTES) + CLIP_MARKER;
      truncated.push(`MESSAGE:${messageBytes.length}`);
    }
    room -= cost('MESSAGE', Buffer.byteLength(message));

    const normalized = new Map<string, string>();
    let dropped = 0;
    for (const [key, value] of Object.entries(e.fields ?? {})) {
      const k = normalizeKey(key);
      if (RESERVED_FIELDS.has(k) || (explicit && k.startsWith(GATEWAY_FIELD_PREFIX))) dropped++;
      else {
        if (normalized.has(k)) dropped++; // replaced by the later value
        normalized.set(k, String(value));
      }
    }
    const kept: Fields = {};
    let n = 0;
    for (const [k, value] of normalized) {
      if (n >= o.maxFields) {
        dropped++;
        continue;
      }
      const bytes = Buffer.from(value, 'utf8');
      const c = cost(k, bytes.length);
      if (c <= room) {
        kept[k] = value;
        room -= c;
        n++;
        continue;
      }
      const fit = room - cost(k, 0) - MARKER_BYTES;
      if (fit >= MIN_CUT_BYTES) {
        const cut = cutUtf8(bytes, fit) + CLIP_MARKER;
        kept[k] = cut;
        room -= cost(k, Buffer.byteLength(cut));
        truncated.push(`${k}:${bytes.length}`);
        n++;
        continue;
      }
      dropped++;
    }
    return {
      fields: {
        ...kept,
        ...fixed,
        MESSAGE: message,
        AGW_TRUNCATED: truncated.length > 0 ? truncated.join(',') : undefined,
        AGW_FIELDS_DROPPED: dropped > 0 ? dropped : undefined,
      },
      clipped: truncated.length > 0 || dropped > 0,
      dropped,
    };
  }
}

/**
 * An automatic CRIT entry raised from an event listener: one that cannot be written is logged,
 * and the event's other listeners still run (adapter/events.ts, sidecar/events.ts).
 */
export function raiseOrLog(
  emergencies: Emergencies | undefined,
  logger: { error(obj: object, msg: string): void },
  entry: Emergency,
): void {
  try {
    emergencies?.raise(entry);
  } catch (err) {
    logger.error({ err, reason: entry.reason }, 'could not write a CRIT entry');
  }
}
