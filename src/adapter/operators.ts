/**
 * What operators do that changes something (docs/design/operators.md): pause and resume an
 * agent, redrive dead letters at a rate, each act in the audit log in the same commit. A
 * redrive runs in steps on a timer of its own, one commit a step, until its cursor is through;
 * redrives still running when the adapter stopped are resumed at start.
 */
import type { Logger } from 'pino';
import { z } from 'zod';
import { GatewayError } from '../protocol/errors.js';
import { parseJson } from '../protocol/http.js';
import { cleanFilter, newRedriveId } from '../store/rules/operators.js';
import type {
  AuditDraft,
  DeadLetterFilter,
  PauseAnswer,
  RedriveSelection,
  RedriveState,
  Store,
} from '../store/store.js';
import type { GroupCommit } from './group-commit.js';

/** Steps a second: a redrive's rate is spread over them. */
const STEPS_PER_SECOND = 10;
/** At most this many dead letters in one step's commit, whatever the rate. */
const MAX_STEP = 500;
/** The default and the bounds of a redrive's rate (dead letters a second). */
export const REDRIVE_RATE = { default: 100, min: 1, max: 10_000 } as const;

export interface OperatorActsOptions {
  readonly store: Store;
  readonly commits: GroupCommit;
  readonly now: () => number;
  readonly logger: Logger;
}

export class OperatorActs {
  readonly #o: OperatorActsOptions;
  /** Running redrives' timers, by id. */
  readonly #timers = new Map<string, NodeJS.Timeout>();
  #closed = false;

  constructor(o: OperatorActsOptions) {
    this.#o = o;
  }

  /** Resumes the redrives still running (after a restart). */
  async start(): Promise<void> {
    for (const id of await this.#o.store.runningRedrives()) {
      const r = await this.#o.store.redrive(id);
      if (r !== undefined) this.#schedule(id, r.rate);
    }
  }

  close(): void {
    this.#closed = true;
    for (const t of this.#timers.values()) clearTimeout(t);
    this.#timers.clear();
  }

  async pause(agent: string, by: string, resume: boolean): Promise<PauseAnswer> {
    const now = this.#o.now();
    const op = resume ? 'resume' : 'pause';
    // audited in its commit (rules/operators.ts actAudit)
    return this.#o.commits.run({ op, agent, by, now, audited: true });
  }

  async redrive(
    by: string,
    selection: RedriveSelection,
    rate: number,
  ): Promise<{ redrive_id: string; count: number }> {
    const now = this.#o.now();
    const made = await this.#o.commits.run({
      op: 'redrive_create',
      id: newRedriveId(),
      by,
      selection,
      rate,
      now,
      audited: true,
    });
    this.#schedule(made.redrive_id, rate);
    return made;
  }

  async progress(id: string): Promise<RedriveState> {
    const r = await this.#o.store.redrive(id);
    if (r === undefined) throw new GatewayError('not_found', `no redrive "${id}"`);
    return r;
  }

  /**
   * An event that is not an act on the store (a start, a stop, a reload, failed
   * authentication): an entry alone. An act is audited in its own commit (actAudit).
   */
  record(entry: AuditDraft): Promise<unknown> {
    return this.#o.commits.run({ op: 'audit', entry });
  }

  #schedule(id: string, rate: number): void {
    if (this.#closed || this.#timers.has(id)) return;
    const max = Math.min(MAX_STEP, Math.max(1, Math.ceil(rate / STEPS_PER_SECOND)));
    // a rate below the steps a second takes one a step, less often
    const everyMs = Math.max(1000 / STEPS_PER_SECOND, Math.ceil(1000 / rate));
    const step = async () => {
      this.#timers.delete(id);
      if (this.#closed) return;
      try {
        const r = await this.#o.commits.run({
          op: 'redrive_step',
          id,
          max,
          now: this.#o.now(),
        });
        if (r === undefined || r.state === 'done') return;
      } catch (err) {
        // a failed commit takes nothing: the next step starts from the same cursor
        this.#o.logger.warn({ err, redrive: id }, 'redrive step failed; trying again');
      }
      if (!this.#closed) this.#timers.set(id, setTimeout(step, everyMs));
    };
    this.#timers.set(id, setTimeout(step, 0));
  }
}

/** The most dead letter ids one redrive request may name. */
export const MAX_REDRIVE_IDS = 10_000;
/** A body of 10,000 ids and a filter fits easily. */
export const REDRIVE_BODY_LIMIT = 256 * 1024;
/** The longest filter or search text. */
export const MAX_TEXT = 256;

const text = z.string().max(MAX_TEXT, `must be at most ${MAX_TEXT} characters`);
const FilterSchema = z.strictObject({
  reason: text.optional(),
  recipient: text.optional(),
  channel: text.optional(),
  q: text.optional(),
});
const RedriveSchema = z
  .strictObject({
    ids: z
      .array(z.number().int().positive().max(Number.MAX_SAFE_INTEGER))
      .min(1, 'must name at least one dead letter')
      .max(MAX_REDRIVE_IDS, `must name at most ${MAX_REDRIVE_IDS} dead letters`)
      .optional(),
    filter: FilterSchema.optional(),
    rate: z
      .number()
      .int('must be a whole number of dead letters a second')
      .min(REDRIVE_RATE.min)
      .max(REDRIVE_RATE.max)
      .optional(),
  })
  .refine((b) => (b.ids === undefined) !== (b.filter === undefined), {
    message: 'give either `ids` or `filter`, not both and not neither',
    path: ['ids'],
  });

/** POST /v1/dead-letters/redrive's body; a 400 naming the field otherwise. */
export function parseRedrive(raw: Buffer): { selection: RedriveSelection; rate: number } {
  const parsed = RedriveSchema.safeParse(parseJson(raw));
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path = issue?.path.map(String).join('.') ?? '';
    const field =
      issue?.code === 'unrecognized_keys'
        ? [path, issue.keys[0]].filter((p) => p !== '').join('.')
        : path || 'body';
    const message =
      issue?.code === 'unrecognized_keys'
        ? 'is not a field of this request'
        : (issue?.message ?? 'invalid');
    throw new GatewayError('invalid_request', `${field}: ${message}`, { field });
  }
  const b = parsed.data;
  const rate = b.rate ?? REDRIVE_RATE.default;
  return b.ids !== undefined
    ? { selection: { ids: b.ids }, rate }
    : { selection: { filter: deadLetterFilter(b.filter ?? {}) }, rate };
}

/** The query's text parameters that are given (non-empty), each at most 256 characters. */
export function textParams<K extends string>(
  query: URLSearchParams,
  names: readonly K[],
): Partial<Record<K, string>> {
  const out: Partial<Record<K, string>> = {};
  for (const n of names) {
    const v = query.get(n);
    if (v === null || v === '') continue;
    if (v.length > MAX_TEXT)
      throw new GatewayError('invalid_request', `${n}: must be at most ${MAX_TEXT} characters`, {
        field: n,
      });
    out[n] = v;
  }
  return out;
}

export function deadLetterFilter(f: DeadLetterFilter): DeadLetterFilter {
  return cleanFilter(f);
}
