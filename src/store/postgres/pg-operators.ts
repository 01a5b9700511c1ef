/**
 * The operators' part of the PostgreSQL store (docs/design/operators.md), as
 * sqlite/sqlite-operators.ts is SQLite's: pauses, search, filtered dead letters, bulk redrives
 * and the audit log, inside the store's transactions (pg-tx.ts) or its reads. What replicas
 * share is in rows: a pause is the agents row every lease locks; a redrive's cursor is its row,
 * locked by the step that moves it; the audit log's end is held by LOCK_AUDIT. The statements
 * built from a filter are here; the fixed ones are in pg-sql.ts.
 */
import { createHash } from 'node:crypto';
import { type AuditEndRow, nextAudit, prunedTo } from '../rules/audit-chain.js';
import {
  auditEntry,
  parseSelection,
  pauseAnswer,
  type RedriveRow,
  redriveState,
  selectionJson,
  wordsOf,
} from '../rules/operators.js';
import type {
  AuditDraft,
  AuditEntry,
  DeadLetterFilter,
  MessageQuery,
  PauseAnswer,
  RedriveSelection,
  RedriveState,
} from '../store.js';
import type { Tx } from './pg-tx.js';

/** A statement built at run time, prepared under a name of its text. */
export interface Built {
  readonly name: string;
  readonly text: string;
}

/** A redrives row (pg-sql.ts migration 4). */
export interface RedriveTableRow extends RedriveRow {
  readonly selection: string;
  readonly max_dead: number;
  readonly cursor_message: number;
  readonly cursor_dead: number;
}

/** A dead letter a redrive step takes next, with its recipient (whose row it locks). */
export interface RedriveCandidate {
  readonly id: number;
  readonly message: number;
  readonly recipient: string;
}

/** Prepared statements are named by their text's hash: one text, one name, per connection. */
const named = (text: string): Built => ({
  name: `agw_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`,
  text,
});

/** A statement's conditions, its parameters numbered from $1 in the order added. */
class Conditions {
  readonly sql: string[] = [];
  readonly params: unknown[] = [];

  /** `$n` for a new parameter, cast to `type`. */
  param(value: unknown, type: string): string {
    this.params.push(value);
    return `$${this.params.length}::${type}`;
  }

  /**
   * The full-text condition on message `m` (the expression of the messages_text index, so the
   * index answers it): every word of `q` as rules/operators.ts wordsOf splits it, diacritics
   * removed as the index removes them. No words: no condition.
   */
  words(q: string | undefined): void {
    const words = wordsOf(q);
    if (words.length === 0) return;
    this.sql.push(
      `agw_search_vector(m.body, m.kind) @@ plainto_tsquery('simple', agw_search_text(${this.param(words.join(' '), 'text')}))`,
    );
  }

  /** column = value, for each value given (an empty one is no condition). */
  equal(pairs: readonly (readonly [string, string | undefined])[]): void {
    for (const [col, v] of pairs) {
      if (v === undefined || v === '') continue;
      this.sql.push(`${col} = ${this.param(v, 'text')}`);
    }
  }

  /** An open dead letter `dl` (its message `m`) matching the filter, and one of `ids`. */
  openDeadLetter(f: DeadLetterFilter, ids: readonly number[] | null): void {
    this.sql.push('dl.replay_delivery IS NULL');
    if (ids !== null) this.sql.push(`dl.id = ANY(${this.param(ids, 'bigint[]')})`);
    this.equal([
      ['dl.reason', f.reason],
      ['dl.recipient', f.recipient],
      ['m.channel', f.channel],
    ]);
    this.words(f.q);
  }

  get where(): string {
    return this.sql.length === 0 ? 'TRUE' : this.sql.join(' AND ');
  }
}

/**
 * Messages matching `query` with id < `before`, newest first: at most `limit`, no more of them
 * than reach `maxBytes` (the first always), as channelMessages bounds its pages.
 */
export function searchStatement(
  query: MessageQuery,
  before: number,
  limit: number,
  maxBytes: number,
  overhead: number,
): { built: Built; values: unknown[] } {
  const c = new Conditions();
  c.sql.push(`m.id < ${c.param(before, 'bigint')}`);
  c.equal([
    ['m.channel', query.channel],
    ['m.sender', query.sender],
    ['m.kind', query.kind],
  ]);
  c.words(query.q);
  const n = c.params.length;
  const text = `
    SELECT id, body, checksum FROM (
      SELECT id, body, checksum,
        sum(octet_length(body) + $${n + 3}::int) OVER (ORDER BY id DESC)
          - octet_length(body) - $${n + 3}::int AS before
      FROM (SELECT m.id, m.body, m.checksum FROM messages m WHERE ${c.where}
            ORDER BY m.id DESC LIMIT $${n + 1}::int) s
    ) w WHERE before < $${n + 2}::bigint ORDER BY id DESC`;
  return { built: named(text), values: [...c.params, limit, maxBytes, overhead] };
}

/** The open dead letters matching `filter` with id > `after`, oldest first, with messages. */
export function deadLettersStatement(
  filter: DeadLetterFilter,
  after: number,
  limit: number,
): { built: Built; values: unknown[] } {
  const c = new Conditions();
  c.sql.push(`dl.id > ${c.param(after, 'bigint')}`);
  c.openDeadLetter(filter, null);
  const text = `
    SELECT dl.id, dl.reason, dl.note, dl.attempts, dl.recipient, dl.created_at,
           dl.replay_delivery, m.id AS message, m.body, m.checksum
    FROM dead_letters dl JOIN messages m ON m.id = dl.message
    WHERE ${c.where} ORDER BY dl.id LIMIT ${c.param(limit, 'int')}`;
  return { built: named(text), values: c.params };
}

/** The next `max` dead letters of a redrive after its cursor, in message order. */
function candidatesStatement(r: RedriveTableRow, max: number): { built: Built; values: unknown[] } {
  const sel = parseSelection(r.selection);
  const c = new Conditions();
  c.sql.push(`dl.id <= ${c.param(r.max_dead, 'bigint')}`);
  c.sql.push(
    `(dl.message, dl.id) > (${c.param(r.cursor_message, 'bigint')}, ${c.param(r.cursor_dead, 'bigint')})`,
  );
  c.openDeadLetter(sel.filter, sel.ids);
  const text = `
    SELECT dl.id, dl.message, dl.recipient
    FROM dead_letters dl JOIN messages m ON m.id = dl.message
    WHERE ${c.where} ORDER BY dl.message, dl.id LIMIT ${c.param(max, 'int')}`;
  return { built: named(text), values: c.params };
}

/** Per transaction: the redrives rows it locked, as it moved them. */
const lockedRedrives = new WeakMap<Tx, Map<string, RedriveTableRow>>();

/**
 * Locks the redrives `ids` (sorted) and reads each one's next `max` dead letters: the group
 * does this before any other lock (pg-store.ts #lockGroup), so that it can then lock their
 * recipients' rows in the one order. The recipients, sorted.
 */
export async function lockRedrives(
  tx: Tx,
  steps: readonly { id: string; max: number }[],
): Promise<string[]> {
  const ids = [...new Set(steps.map((s) => s.id))].sort();
  const rows = await tx.q<RedriveTableRow>('lockRedrives', [ids]);
  const held = new Map(rows.map((r) => [r.id, r]));
  lockedRedrives.set(tx, held);
  const recipients = new Set<string>();
  const reads = steps.map(async (s) => {
    const r = held.get(s.id);
    if (r === undefined || r.state === 'done') return;
    const { built, values } = candidatesStatement(r, Math.max(1, s.max) + 1);
    for (const c of await tx.qBuilt<RedriveCandidate>(built, values)) recipients.add(c.recipient);
  });
  await Promise.all(reads);
  return [...recipients].sort();
}

/** A pause or resume of `agent` (its row locked): its row and a journeys' row, or nothing. */
export function setPaused(
  tx: Tx,
  agent: string,
  pause: boolean,
  by: string,
  now: number,
): PauseAnswer {
  const a = tx.agent(agent);
  const before = a.paused;
  if (pause === (before !== null)) return pauseAnswer(before, before);
  const after = pause ? { since: now, by } : null;
  tx.write('setPaused', [
    agent,
    after?.since ?? null,
    after?.by ?? null,
    now,
    pause ? 'paused' : 'resumed',
    by,
  ]);
  a.paused = after;
  tx.wroteOperatorAct = true;
  return pauseAnswer(before, after);
}

/**
 * Redrive `id` (the adapter's, rules/operators.ts assertRedriveId's form) of the dead letters
 * existing now (up to the highest id) that match `selection`.
 */
export async function createRedrive(
  tx: Tx,
  id: string,
  by: string,
  selection: RedriveSelection,
  rate: number,
  now: number,
): Promise<{ redrive_id: string; count: number }> {
  const json = selectionJson(selection);
  const sel = parseSelection(json);
  // A dead letter of a transaction not yet committed may have a lower id and be taken by the
  // steps without being counted here: `total` then falls short, and the steps' counts tell.
  const maxDead = (await tx.one<{ max: number }>('maxDeadLetter'))?.max ?? 0;
  let total = sel.ids?.length ?? 0;
  if (sel.ids === null) {
    const c = new Conditions();
    c.sql.push(`dl.id <= ${c.param(maxDead, 'bigint')}`);
    c.openDeadLetter(sel.filter, null);
    const text = `
      SELECT count(*)::int AS n FROM dead_letters dl JOIN messages m ON m.id = dl.message
      WHERE ${c.where}`;
    const [r] = await tx.qBuilt<{ n: number }>(named(text), c.params);
    total = r?.n ?? 0;
  }
  tx.write('insertRedrive', [id, now, by, json, maxDead, rate, total]);
  tx.wroteOperatorAct = true;
  return { redrive_id: id, count: total };
}

/**
 * One step of a redrive (its row locked by lockRedrives): as sqlite-operators.ts stepRedrive,
 * up to `max` open dead letters after its cursor in message order, each replayed by `replay`
 * (which locks a recipient's row the group did not: `lockLate`), the cursor and counts moved
 * in the same transaction. Done when none is left; then what the selection held but was no
 * longer open is counted skipped.
 */
export async function stepRedrive(
  tx: Tx,
  id: string,
  max: number,
  lockLate: (recipients: readonly string[]) => Promise<void>,
  replay: (deadLetter: number, by: string) => Promise<boolean>,
): Promise<RedriveState | undefined> {
  const held = lockedRedrives.get(tx);
  const r = held?.get(id);
  if (r === undefined) return undefined;
  if (r.state === 'done') return redriveState(r);
  // one more than it takes: whether any is left after this step, so the last step says done
  const { built, values } = candidatesStatement(r, max + 1);
  // read again under the row's lock: the same as lockRedrives read, unless a step of this
  // group moved the cursor since (its recipients are then locked now)
  const ahead = await tx.qBuilt<RedriveCandidate>(built, values);
  const rows = ahead.slice(0, max);
  await lockLate(rows.map((c) => c.recipient));
  let { done, skipped } = r;
  let cm = r.cursor_message;
  let cd = r.cursor_dead;
  for (const dl of rows) {
    if (await replay(dl.id, r.by)) done++;
    else skipped++;
    cm = dl.message;
    cd = dl.id;
  }
  const finished = ahead.length <= max;
  if (finished) skipped = Math.max(skipped, r.total - done);
  const state = finished ? 'done' : 'running';
  tx.write('redriveProgress', [done, skipped, state, cm, cd, id]);
  tx.wroteOperatorAct = true;
  const moved = { ...r, done, skipped, state, cursor_message: cm, cursor_dead: cd };
  held!.set(id, moved);
  return redriveState(moved);
}

/**
 * The next entry of the audit log, and the anchor moved to it (LOCK_AUDIT held, taken by the
 * group's #lockGroup: one chain across replicas, and its anchor changed by one transaction at a
 * time): numbered from the anchor, so a seq is never given twice (rules/audit-chain.ts).
 */
export async function appendAudit(tx: Tx, draft: AuditDraft): Promise<AuditEntry> {
  const next = nextAudit(await tx.one<AuditEndRow>('auditEnd'));
  const entry = auditEntry(next.seq, draft, next.prevHash);
  const { seq, actor, action, target, detail, prev_hash, hash } = entry;
  tx.write('insertAudit', [
    seq,
    draft.at,
    actor,
    action,
    target,
    JSON.stringify(detail),
    prev_hash,
    hash,
  ]);
  if (next.anchored) tx.write('moveAuditAnchor', [seq, hash]);
  tx.wroteOperatorAct = true;
  return entry;
}

/**
 * Up to `limit` entries from the oldest end, before `before`, and the anchor's pruned end moved
 * to the last of them (LOCK_AUDIT held).
 */
export async function pruneAudit(tx: Tx, before: number, limit: number): Promise<number> {
  const gone = await tx.q<{ seq: number; hash: string }>('pruneAudit', [before, limit]);
  const last = prunedTo(gone);
  if (last !== undefined) tx.write('pruneAuditAnchor', [last.seq, last.hash]);
  return gone.length;
}
