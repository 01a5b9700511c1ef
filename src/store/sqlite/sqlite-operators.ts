/**
 * The operators' part of the SQLite store (docs/design/operators.md): pauses, search, filtered
 * dead letters, bulk redrives and the audit log. Runs inside the store's transactions; the
 * store calls it, and it calls back for the one thing it does not own (a dead letter's replay).
 */
import type Database from 'better-sqlite3';
import {
  type AuditAnchor,
  type AuditAnchorRow,
  type AuditEndRow,
  anchorView,
  nextAudit,
  prunedTo,
} from '../rules/audit-chain.js';
import {
  type AuditRow,
  auditEntry,
  auditView,
  ftsWords,
  parseSelection,
  pauseAnswer,
  type RedriveRow,
  redriveState,
  selectionJson,
} from '../rules/operators.js';
import type {
  AuditDraft,
  AuditEntry,
  DeadLetterFilter,
  MessageQuery,
  PauseAnswer,
  PauseEvent,
  RedriveSelection,
  RedriveState,
} from '../store.js';
import { SQL } from './sql.js';

type Paused = { since: number; by: string };

interface RedriveTableRow extends RedriveRow {
  readonly selection: string;
  readonly max_dead: number;
  readonly cursor_message: number;
  readonly cursor_dead: number;
}

/** A query's conditions and their parameters, built from the fields a filter gives. */
interface Where {
  readonly sql: string;
  readonly params: unknown[];
}

export class Operators {
  readonly #db: Database.Database;
  readonly #s;
  /** Agents paused now (the last row of each in agent_pauses), reloaded after a rollback. */
  #paused = new Map<string, Paused>();
  readonly #prepared = new Map<string, Database.Statement>();

  constructor(db: Database.Database) {
    this.#db = db;
    const p = <T = unknown>(sql: string) => db.prepare<unknown[], T>(sql);
    this.#s = {
      insertPause: p(SQL.insertPause),
      pausedNow: p<{ agent: string; at: number; by: string }>(SQL.pausedNow),
      pausesSince: p<PauseEvent>(SQL.pausesSince),
      agentCounts: p<{ pending: number; critical_pending: number; leased: number }>(
        SQL.agentCounts,
      ),
      openDeadLetters: p<number>(SQL.openDeadLetters).pluck(),
      lastPolls: p<{ agent: string; last_poll: number }>(SQL.lastPolls),
      lastSequences: p<{ name: string; last_seq: number }>(SQL.lastSequences),
      maxDeadLetter: p<number>(SQL.maxDeadLetter).pluck(),
      insertRedrive: p(SQL.insertRedrive),
      redrive: p<RedriveTableRow>(SQL.redrive),
      runningRedrives: p<string>(SQL.runningRedrives).pluck(),
      redriveProgress: p(SQL.redriveProgress),
      searchMark: p<number>(SQL.searchMark).pluck(),
      indexMessages: p(SQL.indexMessages),
      lastOfBatch: p<number | null>(SQL.lastOfBatch).pluck(),
      moveSearchMark: p(SQL.moveSearchMark),
      auditEnd: p<AuditEndRow>(SQL.auditEnd),
      insertAudit: p(SQL.insertAudit),
      moveAuditAnchor: p(SQL.moveAuditAnchor),
      auditAnchor: p<AuditAnchorRow>(SQL.auditAnchor),
      audit: p<AuditRow>(SQL.audit),
      pruneAudit: p<{ seq: number; hash: string }>(SQL.pruneAudit),
      pruneAuditAnchor: p(SQL.pruneAuditAnchor),
    };
    this.reload();
  }

  /** Re-reads what is kept in memory (after a rollback). */
  reload(): void {
    this.#paused = new Map(
      this.#s.pausedNow.all().map((r) => [r.agent, { since: r.at, by: r.by }] as const),
    );
  }

  paused(agent: string): Paused | undefined {
    return this.#paused.get(agent);
  }

  pausedNow(): Readonly<Record<string, Paused>> {
    return Object.fromEntries(this.#paused);
  }

  pausesSince(at: number): PauseEvent[] {
    return this.#s.pausesSince.all(at);
  }

  /** A pause or resume: a row when it changes something, nothing for a repeat. */
  setPaused(agent: string, pause: boolean, by: string, now: number): PauseAnswer {
    const before = this.#paused.get(agent) ?? null;
    if (pause === (before !== null)) return pauseAnswer(before, before);
    this.#s.insertPause.run(agent, now, pause ? 'paused' : 'resumed', by);
    const after = pause ? { since: now, by } : null;
    if (after === null) this.#paused.delete(agent);
    else this.#paused.set(agent, after);
    return pauseAnswer(before, after);
  }

  counts(agent: string): {
    pending: number;
    critical_pending: number;
    leased: number;
    dead_letters: number;
  } {
    const c = this.#s.agentCounts.get(agent);
    return {
      pending: c?.pending ?? 0,
      critical_pending: c?.critical_pending ?? 0,
      leased: c?.leased ?? 0,
      dead_letters: this.#s.openDeadLetters.get(agent) ?? 0,
    };
  }

  lastPolls(): Map<string, number> {
    return new Map(this.#s.lastPolls.all().map((r) => [r.agent, r.last_poll]));
  }

  lastSequences(): Record<string, number> {
    return Object.fromEntries(this.#s.lastSequences.all().map((r) => [r.name, r.last_seq]));
  }

  /** Search: the matching messages' rows, newest first. */
  searchRows(
    query: MessageQuery,
  ): IterableIterator<{ id: number; body: string; checksum: number }> {
    const conds: string[] = [];
    const params: unknown[] = [];
    if (query.after > 0) {
      conds.push('m.id < ?');
      params.push(query.after);
    }
    for (const [col, v] of [
      ['m.channel', query.channel],
      ['m.sender', query.sender],
      ['m.kind', query.kind],
    ] as const) {
      if (v === undefined || v === '') continue;
      conds.push(`${col} = ?`);
      params.push(v);
    }
    const words = ftsWords(query.q);
    if (words !== undefined) {
      conds.push('m.id IN (SELECT rowid FROM message_text WHERE message_text MATCH ?)');
      params.push(words);
    }
    const where = conds.length === 0 ? '' : `WHERE ${conds.join(' AND ')}`;
    const sql = `SELECT m.id, m.body, m.checksum FROM messages m ${where} ORDER BY m.id DESC LIMIT ?`;
    return this.#prepare(sql).iterate(...params, query.limit) as IterableIterator<{
      id: number;
      body: string;
      checksum: number;
    }>;
  }

  /** The open dead letters matching `filter` with id > after, oldest first. */
  deadLetterRows(
    filter: DeadLetterFilter,
    after: number,
    limit: number,
  ): IterableIterator<unknown> {
    const w = this.#openWhere(filter, null);
    const sql = `
      SELECT dl.id, dl.reason, dl.note, dl.attempts, dl.recipient, dl.created_at,
             dl.replay_delivery, m.id AS message, m.body, m.checksum
      FROM dead_letters dl JOIN messages m ON m.id = dl.message
      WHERE dl.id > ? AND ${w.sql} ORDER BY dl.id LIMIT ?`;
    return this.#prepare(sql).iterate(after, ...w.params, limit);
  }

  createRedrive(
    id: string,
    by: string,
    selection: RedriveSelection,
    rate: number,
    now: number,
  ): { redrive_id: string; count: number } {
    const json = selectionJson(selection);
    const sel = parseSelection(json);
    const maxDead = this.#s.maxDeadLetter.get() ?? 0;
    const total =
      sel.ids !== null
        ? sel.ids.length
        : (this.#prepare(
            `SELECT count(*) FROM dead_letters dl JOIN messages m ON m.id = dl.message
             WHERE dl.id <= ? AND ${this.#openWhere(sel.filter, null).sql}`,
          )
            .pluck()
            .get(maxDead, ...this.#openWhere(sel.filter, null).params) as number);
    this.#s.insertRedrive.run(id, now, by, json, maxDead, rate, total);
    return { redrive_id: id, count: total };
  }

  /**
   * One step of a redrive: up to `max` open dead letters after its cursor in message order,
   * each replayed by `replay`, the cursor and counts moved with them. Done when none is left
   * after it;
   * then what the selection held but was no longer open (replayed meanwhile, or an id that was
   * never an open dead letter) is counted skipped.
   */
  stepRedrive(
    id: string,
    max: number,
    replay: (deadLetter: number, by: string) => boolean,
  ): RedriveState | undefined {
    const r = this.#s.redrive.get(id);
    if (r === undefined) return undefined;
    if (r.state === 'done') return redriveState(r);
    const sel = parseSelection(r.selection);
    const w = this.#openWhere(sel.filter, sel.ids);
    // one more than it takes: whether any is left after this step, so the last step says done
    const ahead = this.#prepare(
      `SELECT dl.id, dl.message FROM dead_letters dl JOIN messages m ON m.id = dl.message
       WHERE dl.id <= ? AND (dl.message, dl.id) > (?, ?) AND ${w.sql}
       ORDER BY dl.message, dl.id LIMIT ?`,
    ).all(r.max_dead, r.cursor_message, r.cursor_dead, ...w.params, max + 1) as {
      id: number;
      message: number;
    }[];
    const rows = ahead.slice(0, max);
    let { done, skipped } = r;
    let cm = r.cursor_message;
    let cd = r.cursor_dead;
    for (const dl of rows) {
      if (replay(dl.id, r.by)) done++;
      else skipped++;
      cm = dl.message;
      cd = dl.id;
    }
    const finished = ahead.length <= max;
    if (finished) skipped = Math.max(skipped, r.total - done);
    const state = finished ? 'done' : 'running';
    this.#s.redriveProgress.run(done, skipped, state, cm, cd, id);
    return redriveState({ ...r, done, skipped, state });
  }

  redrive(id: string): RedriveState | undefined {
    const r = this.#s.redrive.get(id);
    return r === undefined ? undefined : redriveState(r);
  }

  runningRedrives(): string[] {
    return this.#s.runningRedrives.all();
  }

  /**
   * Indexes for search up to `max` messages stored after the search mark, and moves the mark;
   * inside the caller's transaction. How many it indexed (fewer than `max`: caught up).
   */
  indexForSearch(max: number): number {
    const mark = this.#s.searchMark.get() ?? 0;
    const last = this.#s.lastOfBatch.get(mark, max);
    if (last === null || last === undefined) return 0;
    const { changes } = this.#s.indexMessages.run(mark, max);
    this.#s.moveSearchMark.run(last);
    return changes;
  }

  /**
   * The next entry of the audit log, and the anchor moved to it, in the caller's transaction
   * (rules/audit-chain.ts): numbered from the anchor, so a seq is never given twice.
   */
  appendAudit(draft: AuditDraft): AuditEntry {
    const next = nextAudit(this.#s.auditEnd.get());
    const entry = auditEntry(next.seq, draft, next.prevHash);
    const { seq, actor, action, target, detail, prev_hash, hash } = entry;
    this.#s.insertAudit.run(
      seq,
      draft.at,
      actor,
      action,
      target,
      JSON.stringify(detail),
      prev_hash,
      hash,
    );
    if (next.anchored) this.#s.moveAuditAnchor.run(seq, hash);
    return entry;
  }

  audit(after: number, limit: number): AuditEntry[] {
    return this.#s.audit.all(after, limit).map(auditView);
  }

  /** The audit log's anchor; undefined: its row is gone. */
  auditAnchor(): AuditAnchor | undefined {
    const row = this.#s.auditAnchor.get();
    return row === undefined ? undefined : anchorView(row);
  }

  /**
   * Up to `limit` entries from the oldest end, before `before` (StoreOp prune_audit), and the
   * anchor's pruned end moved to the last of them, in the caller's transaction.
   */
  pruneAudit(before: number, limit: number): number {
    const gone = this.#s.pruneAudit.all(before, limit);
    const last = prunedTo(gone);
    if (last !== undefined) this.#s.pruneAuditAnchor.run(last.seq, last.hash, last.seq);
    return gone.length;
  }

  /** The conditions of an open dead letter matching the filter (and one of `ids`). */
  #openWhere(f: DeadLetterFilter, ids: readonly number[] | null): Where {
    const conds = ['dl.replay_delivery IS NULL'];
    const params: unknown[] = [];
    if (ids !== null) {
      conds.push('dl.id IN (SELECT value FROM json_each(?))');
      params.push(JSON.stringify(ids));
    }
    for (const [col, v] of [
      ['dl.reason', f.reason],
      ['dl.recipient', f.recipient],
      ['m.channel', f.channel],
    ] as const) {
      if (v === undefined || v === '') continue;
      conds.push(`${col} = ?`);
      params.push(v);
    }
    const words = ftsWords(f.q);
    if (words !== undefined) {
      conds.push('dl.message IN (SELECT rowid FROM message_text WHERE message_text MATCH ?)');
      params.push(words);
    }
    return { sql: conds.join(' AND '), params };
  }

  #prepare(sql: string): Database.Statement {
    let st = this.#prepared.get(sql);
    if (st === undefined) {
      st = this.#db.prepare(sql);
      this.#prepared.set(sql, st);
    }
    return st;
  }
}
