/**
 * What both engines share of the operators' data (docs/design/operators.md): the audit log's
 * hash chain, the words of a full-text query, a redrive's selection. Pure.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Assignment } from '../../protocol/envelope.js';
import { GatewayError } from '../../protocol/errors.js';
import type {
  AuditDraft,
  AuditEntry,
  DeadLetterFilter,
  MessageDraft,
  OpResults,
  PauseAnswer,
  RedriveSelection,
  RedriveState,
  StoreOp,
} from '../store.js';

/** The first entry's prev_hash. */
export const GENESIS_HASH = '0'.repeat(64);

/** JSON with object keys sorted at every depth: the same entry always hashes the same. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value).sort();
    return `{${keys
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

/** What an audit entry's hash covers: every field but the two hashes. */
export type AuditBody = Omit<AuditEntry, 'prev_hash' | 'hash'>;

/**
 * An entry's hash: SHA-256 of `prevHash` and the canonical JSON of its body, hex. One function,
 * for the append (auditEntry) and the verification (rules/audit-chain.ts) alike.
 */
export function auditHash(prevHash: string, body: AuditBody): string {
  const { seq, at, actor, action, target, detail } = body;
  const canonical = canonicalJson({ seq, at, actor, action, target, detail });
  return createHash('sha256').update(prevHash).update(canonical).digest('hex');
}

/** The entry `draft` becomes as number `seq` after `prevHash`: SHA-256(prev_hash ‖ canonical). */
export function auditEntry(seq: number, draft: AuditDraft, prevHash: string): AuditEntry {
  const body: AuditBody = {
    seq,
    at: new Date(draft.at).toISOString(),
    actor: draft.actor,
    action: draft.action,
    target: draft.target,
    // hashed as it is stored and read back (JSON text): an `undefined` in a list or a NaN
    // would otherwise hash differently from the row, and a sound entry would fail verification
    detail: JSON.parse(JSON.stringify(draft.detail)) as Record<string, unknown>,
  };
  return { ...body, prev_hash: prevHash, hash: auditHash(prevHash, body) };
}

/**
 * The audit entry a stored message makes (MessageDraft.audited), appended in the transaction that
 * stores it, so that the message and its entry are durable together or not at all: an
 * operator's message, and the alerts_to agent's message in a thread (a continuation: the
 * thread's budget starts again). Undefined: nothing to audit.
 */
export function messageAudit(d: MessageDraft, a: Assignment): AuditDraft | undefined {
  if (d.audited === undefined) return undefined;
  if (d.audited === 'continuation' && a.thread_id === a.message_id) return undefined;
  return {
    at: d.receivedAt,
    actor: d.sender,
    action: d.audited,
    target: a.message_id,
    detail: { channel: a.channel, thread_id: a.thread_id },
  };
}

/**
 * The audit entry of an operator's act done by `op` (one marked `audited`), from its result,
 * appended in the same transaction: the act and its entry are durable together or not at all.
 * A replay is audited when it replayed (a second replay of the same dead letter is not an act).
 */
export function actAudit(op: StoreOp, result: unknown): AuditDraft | undefined {
  switch (op.op) {
    case 'pause':
    case 'resume':
      if (op.audited !== true) return undefined;
      return { at: op.now, actor: op.by, action: op.op, target: op.agent, detail: {} };
    case 'replay_dead_letter': {
      const r = result as OpResults['replay_dead_letter'];
      if (op.audited !== true || r === undefined || !r.replayed) return undefined;
      return {
        at: op.now,
        actor: op.by ?? 'adapter',
        action: 'replay',
        target: `dead_letter:${op.id}`,
        detail: { delivery_id: r.delivery_id },
      };
    }
    case 'redrive_create': {
      if (op.audited !== true) return undefined;
      const made = result as OpResults['redrive_create'];
      return {
        at: op.now,
        actor: op.by,
        action: 'redrive',
        target: made.redrive_id,
        detail: { ...op.selection, rate: op.rate, count: made.count },
      };
    }
    case 'cancel_scheduled': {
      // an operator's or alerts_to's scheduled message (audited when sent) cancelled
      const r = result as OpResults['cancel_scheduled'];
      if (op.audited !== true || !r.changed) return undefined;
      return { at: op.now, actor: op.sender, action: 'cancel', target: op.messageId, detail: {} };
    }
    default:
      return undefined;
  }
}

/**
 * The words of a search, each a quoted FTS5 string (so that `AND`, `*`, `"` or `:` typed by a
 * person are text, never query syntax), all required. Empty: undefined (no text condition).
 */
export function ftsWords(q: string | undefined): string | undefined {
  const words = wordsOf(q);
  return words.length === 0 ? undefined : words.map((w) => `"${w}"`).join(' ');
}

/** The words of `q` as both engines split them: letters and digits, lower-cased. */
export function wordsOf(q: string | undefined): string[] {
  if (q === undefined) return [];
  return (q.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []).slice(0, 32);
}

/** A filter with its empty fields dropped. */
export function cleanFilter(f: DeadLetterFilter): DeadLetterFilter {
  const out: Record<string, string> = {};
  for (const k of ['reason', 'recipient', 'channel', 'q'] as const) {
    const v = f[k];
    if (typeof v === 'string' && v !== '') out[k] = v;
  }
  return out;
}

/** The redrive's selection as stored (JSON), and back. */
export function selectionJson(s: RedriveSelection): string {
  return 'ids' in s
    ? JSON.stringify({ ids: [...new Set(s.ids)].sort((a, b) => a - b) })
    : JSON.stringify({ filter: cleanFilter(s.filter) });
}

export function parseSelection(json: string): {
  ids: number[] | null;
  filter: DeadLetterFilter;
} {
  const v = JSON.parse(json) as { ids?: number[]; filter?: DeadLetterFilter };
  return { ids: v.ids ?? null, filter: v.filter ?? {} };
}

export interface RedriveRow {
  readonly id: string;
  readonly created_at: number;
  readonly by: string;
  readonly rate: number;
  readonly total: number;
  readonly done: number;
  readonly skipped: number;
  readonly state: string;
}

export function redriveState(r: RedriveRow): RedriveState {
  return {
    redrive_id: r.id,
    total: Number(r.total),
    done: Number(r.done),
    skipped: Number(r.skipped),
    state: r.state === 'done' ? 'done' : 'running',
    rate: Number(r.rate),
    by: r.by,
    created_at: new Date(Number(r.created_at)).toISOString(),
  };
}

/** The answer of a pause or resume, from the agent's pause before and after. */
export function pauseAnswer(
  before: { since: number; by: string } | null,
  after: { since: number; by: string } | null,
): PauseAnswer {
  return { paused: after, changed: (before === null) !== (after === null) };
}

/** A new redrive's id. */
export function newRedriveId(): string {
  return `rd_${randomBytes(8).toString('hex')}`;
}

/** A redrive id as a client gives it back: refuses anything else with 404. */
export function assertRedriveId(id: string): void {
  if (!/^rd_[0-9a-f]{16,32}$/.test(id))
    throw new GatewayError('not_found', `no redrive "${id.slice(0, 64)}"`);
}

/** An audit log row as both engines keep it (times in ms, detail as JSON text). */
export interface AuditRow {
  seq: number;
  at: number;
  actor: string;
  action: string;
  target: string;
  detail: string;
  prev_hash: string;
  hash: string;
}

/**
 * The entry a row is read back as (GET /v1/audit, verification). A row changed behind the
 * adapter's back may hold what no append writes (a `detail` that is not JSON, an `at` that is
 * no time): it is read as it is (`detail` `{"unparsable": text}`, `at` the raw value), so that
 * the log stays readable past it and verification names it as changed rather than failing.
 */
export function auditView(r: AuditRow): AuditEntry {
  const ms = Number(r.at);
  return {
    seq: Number(r.seq),
    at: Number.isFinite(ms) && Math.abs(ms) <= 8.64e15 ? new Date(ms).toISOString() : String(r.at),
    actor: r.actor,
    action: r.action,
    target: r.target,
    detail: detailOf(r.detail),
    prev_hash: r.prev_hash,
    hash: r.hash,
  };
}

function detailOf(text: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(text);
    if (v !== null && typeof v === 'object' && !Array.isArray(v))
      return v as Record<string, unknown>;
  } catch {}
  return { unparsable: String(text) };
}
