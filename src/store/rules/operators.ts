/**
 * What both engines share of the operators' data (docs/design/operators.md): the audit log's
 * hash chain, the words of a full-text query, a redrive's selection. Pure.
 */
import { createHash, randomBytes } from 'node:crypto';
import { GatewayError } from '../../protocol/errors.js';
import type {
  AuditDraft,
  AuditEntry,
  DeadLetterFilter,
  PauseAnswer,
  RedriveSelection,
  RedriveState,
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

/** The entry `draft` becomes as number `seq` after `prevHash`: SHA-256(prev_hash ‖ canonical). */
export function auditEntry(seq: number, draft: AuditDraft, prevHash: string): AuditEntry {
  const body = {
    seq,
    at: new Date(draft.at).toISOString(),
    actor: draft.actor,
    action: draft.action,
    target: draft.target,
    detail: draft.detail,
  };
  const hash = createHash('sha256').update(prevHash).update(canonicalJson(body)).digest('hex');
  return { ...body, prev_hash: prevHash, hash };
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

/** The entry a row is read back as (GET /v1/audit). */
export function auditView(r: AuditRow): AuditEntry {
  return {
    seq: Number(r.seq),
    at: new Date(Number(r.at)).toISOString(),
    actor: r.actor,
    action: r.action,
    target: r.target,
    detail: JSON.parse(r.detail) as Record<string, unknown>,
    prev_hash: r.prev_hash,
    hash: r.hash,
  };
}
