/**
 * Verification of the audit log's hash chain (docs/design/operators.md, "Verification"): pure,
 * the same for both engines, over pages of entries read in seq order, so that a log of any
 * length is checked in bounded memory. `agent-gateway audit verify` reads the pages from the
 * database directly (store/audit-source.ts), the adapter at start through Store.audit
 * (adapter/audit-check.ts).
 *
 * Each entry holds the hash of the one before it, and its own hash covers that and its fields
 * (seq included), so every tampering leaves a mark where the stored chain departs from a
 * sound one. The first such place is named by a `seq` and a kind:
 *
 * - `changed`: an entry whose hash does not match its fields (a column rewritten: actor,
 *   detail, at, prev_hash or the hash itself); or an entry rewritten with its hash recomputed,
 *   which its successor still contradicts (the successor's prev_hash is the old hash), or, for
 *   the newest entry, the anchor does (it holds the hash appended).
 * - `removed`: a seq missing between two entries, or entries renumbered down to close the gap
 *   (one that matches its fields only under a higher seq); entries missing at the oldest end
 *   (the first entry does not follow what retention pruned) or at the newest end (the anchor
 *   holds a higher seq than the last entry, an empty log included).
 * - `inserted`: an entry the chain passes over: the entry after it links to the one before it
 *   (so even a forged entry whose own hash is recomputed correctly is found, by its successor),
 *   or entries renumbered up to make room (one that matches its fields only under a lower seq);
 *   a seq that appears twice; an entry at a seq retention pruned.
 *
 * The anchor (AuditAnchor): a row the store keeps beside the log (audit_anchor), written in
 * the transaction of every append and every prune: the newest entry's seq and hash, and the
 * highest seq retention pruned with the hash the first kept entry must hold as prev_hash. The
 * walk starts from the pruned end (from genesis at seq 1 when nothing was pruned) and must
 * reach the anchor's seq with the anchor's hash there, so entries removed at either end are
 * named as well as in the middle, and the newest entry rewritten with its hash recomputed too;
 * and since an append numbers its entry from the anchor, a seq is never given twice. A missing
 * anchor row (deleted behind the store's back) is itself a break (`removed`).
 *
 * What no chain shows: an entry added past the newest one the anchor holds by someone who
 * computes its hash as the adapter does (the next append chains on from it: an adapter of a
 * version before the anchor appends so during a rolling upgrade), and tampering by someone who
 * rewrites the anchor along with the log. A store from before the anchor (the CLI on an older
 * adapter's file) is walked as it was then: the first entry read starts the chain, at seq 1
 * from GENESIS_HASH, else its prev_hash taken as given, so entries removed at either end
 * cannot show.
 */
import type { AuditAnchor, AuditEntry } from '../store.js';
import { type AuditBody, auditHash, GENESIS_HASH } from './operators.js';

export type ChainBreakKind = 'changed' | 'removed' | 'inserted';

/** The first place the chain departs from a sound one. */
export interface ChainBreak {
  /** The entry changed or inserted, or the first seq missing. */
  readonly seq: number;
  readonly kind: ChainBreakKind;
  /** One sentence on what was found, for logs and the CLI. */
  readonly why: string;
}

export interface ChainReport {
  /** Entries read: all of them when intact, up to the break otherwise. */
  readonly entries: number;
  /** The first and last seq read (undefined: an empty log). */
  readonly first: number | undefined;
  readonly last: number | undefined;
  /** Undefined: the chain is intact. */
  readonly broken: ChainBreak | undefined;
}

/** Entries with seq > `after`, oldest first, at most `limit` (Store.audit). */
export type AuditPages = (after: number, limit: number) => Promise<readonly AuditEntry[]>;

/** What the store keeps beside the log: store.ts AuditAnchor (defined there, as AuditEntry is). */
export type { AuditAnchor };

/** The anchor's row as both engines keep it. */
export interface AuditAnchorRow {
  seq: number;
  hash: string;
  pruned_seq: number;
  pruned_hash: string;
}

/** The anchor as a row is read back (PostgreSQL's bigint may come as text). */
export function anchorView(r: AuditAnchorRow): AuditAnchor {
  return {
    seq: Number(r.seq),
    hash: r.hash,
    prunedSeq: Number(r.pruned_seq),
    prunedHash: r.pruned_hash,
  };
}

/**
 * Reads the anchor of a store that keeps one; undefined: its row is gone (deleted behind the
 * store's back), which is a break of its own.
 */
export type AnchorRead = () => Promise<AuditAnchor | undefined>;

/** A store that keeps the anchor (both engines; adapter/audit-check.ts reads it). */
export interface AuditAnchorSource {
  auditAnchor(): Promise<AuditAnchor | undefined>;
}

/**
 * The audit log's end as an append reads it, one row (the engines' `auditEnd`): the last entry's
 * seq and hash, and the anchor's; null: no entry, no anchor row.
 */
export interface AuditEndRow {
  last_seq: number | null;
  last_hash: string | null;
  anchor_seq: number | null;
  anchor_hash: string | null;
}

/** Where an append puts its entry, and whether it then moves the anchor to it. */
export interface NextAudit {
  readonly seq: number;
  readonly prevHash: string;
  readonly anchored: boolean;
}

/**
 * Where the next entry goes: after the newest entry the anchor holds, linked to its hash, so a
 * seq freed by entries removed at the newest end is never given again and their removal stays
 * a gap the walk names. Entries found past the anchor (appended by an adapter of a version
 * before it, during a rolling upgrade on PostgreSQL, or by a forger) are chained on from: the
 * walk judges them as any other. Without the anchor row (deleted behind the store's back,
 * which the walk names) it goes on from the log's last entry, as before the anchor, and no
 * anchor is made up.
 */
export function nextAudit(r: AuditEndRow | undefined): NextAudit {
  const last =
    r?.last_seq === null || r?.last_seq === undefined || r.last_hash === null
      ? undefined
      : { seq: Number(r.last_seq), hash: r.last_hash };
  if (r?.anchor_seq === null || r?.anchor_seq === undefined || r.anchor_hash === null)
    return { seq: (last?.seq ?? 0) + 1, prevHash: last?.hash ?? GENESIS_HASH, anchored: false };
  const anchor = { seq: Number(r.anchor_seq), hash: r.anchor_hash };
  const from = last !== undefined && last.seq > anchor.seq ? last : anchor;
  return { seq: from.seq + 1, prevHash: from.hash, anchored: true };
}

/** The last of the entries a prune deleted (the anchor's new pruned end); undefined: none. */
export function prunedTo(
  gone: readonly { seq: number; hash: string }[],
): { seq: number; hash: string } | undefined {
  let top: { seq: number; hash: string } | undefined;
  for (const g of gone) {
    const seq = Number(g.seq);
    if (top === undefined || seq > top.seq) top = { seq, hash: g.hash };
  }
  return top;
}

export interface VerifyOptions {
  /**
   * Entries a read asks for. Default 500: ~150 KB of entries in memory at a time, and ~3 ms of
   * hashing between two reads (6 µs an entry on this machine: 100,000 entries in 0.6 s), so an
   * adapter checking at start goes on answering requests between pages.
   */
  readonly pageSize?: number;
  /**
   * The store's anchor, read before each walk: every entry up to its seq was appended before
   * the walk began (entries appended while it reads are past it, and judged by the chain).
   * Absent: a store from before the anchor, whose ends are taken as found.
   */
  readonly anchor?: AnchorRead;
}

const PAGE = 500;
/**
 * How far a renumbered entry is looked for, each way: a forger who removed (or inserted) up to
 * this many entries and renumbered the rest is named `removed` (`inserted`) rather than
 * `changed`. 2 × 1,024 hashes, about 2 ms, spent once, at the break.
 */
const RENUMBERED_WITHIN = 1024;
/** Walks started over when retention pruned the entries being read (below). */
const RESTARTS = 3;

/**
 * Walks the log in seq order and reports the first break. A retention pass (of this adapter or
 * another replica) that prunes while the walk reads makes a gap behind the oldest end: with an
 * anchor, one whose pruned seq moved since the walk began; without, a gap found below the log's
 * first entry as it is now. The walk then starts over.
 */
export async function verifyAuditChain(
  read: AuditPages,
  opts: VerifyOptions = {},
): Promise<ChainReport> {
  const pageSize = opts.pageSize ?? PAGE;
  const readAnchor = opts.anchor;
  for (let attempt = 0; ; attempt++) {
    const anchor = readAnchor === undefined ? NOT_KEPT : await readAnchor();
    const report = await check(read, pageSize, anchor);
    const b = report.broken;
    if (b === undefined || b.kind !== 'removed' || attempt >= RESTARTS) return report;
    if (readAnchor !== undefined && anchor !== NOT_KEPT && anchor !== undefined) {
      const now = await readAnchor();
      if (now === undefined || now.prunedSeq === anchor.prunedSeq) return report;
    } else {
      const [first] = await read(0, 1);
      if (first === undefined || first.seq <= b.seq) return report;
    }
  }
}

/** The report as one line, as the CLI prints it and the adapter logs it. */
export function chainSummary(r: ChainReport): string {
  const b = r.broken;
  if (b !== undefined) return `audit log: chain broken at seq ${b.seq} (${b.kind}): ${b.why}`;
  const span = r.first === undefined ? '' : `, seq ${r.first}..${r.last}`;
  return `audit log: ${r.entries} entries${span}, chain intact`;
}

/** Whether an entry's hash matches its fields, as numbered `seq` (default its own). */
export function selfConsistent(e: AuditEntry, seq = e.seq): boolean {
  const body: AuditBody = {
    seq,
    at: e.at,
    actor: e.actor,
    action: e.action,
    target: e.target,
    detail: e.detail,
  };
  return auditHash(e.prev_hash, body) === e.hash;
}

/** A store from before the anchor (VerifyOptions.anchor absent). */
const NOT_KEPT = Symbol('no anchor kept');

/**
 * Where a sound chain starts, before its first entry: genesis (seq 0), or the last entry
 * retention pruned, as the anchor holds it. Its entry is gone, hence no prev_hash.
 */
interface Start {
  readonly seq: number;
  readonly hash: string;
  readonly prev_hash: undefined;
}

/** The sound entry before a log that starts at seq 1: genesis. */
const GENESIS: Start = { seq: 0, hash: GENESIS_HASH, prev_hash: undefined };

type Prev = AuditEntry | Start;

const isStart = (p: Prev): p is Start => p.prev_hash === undefined;

/** Where retention left off, as the chain's start says it (for the reports). */
const pruneNote = (s: Start) =>
  s.seq === 0 ? 'nothing was pruned' : `retention pruned up to seq ${s.seq}`;

/** The walk, then the newest end of the log against the anchor. */
async function check(
  read: AuditPages,
  pageSize: number,
  anchor: AuditAnchor | undefined | typeof NOT_KEPT,
): Promise<ChainReport> {
  if (anchor === NOT_KEPT) return (await walk(read, pageSize)).report;
  if (anchor === undefined) {
    // the row is gone: the walk as without one, then the loss of it told
    const { report } = await walk(read, pageSize);
    return report.broken !== undefined ? report : { ...report, broken: anchorGone(report) };
  }
  const start: Start = { seq: anchor.prunedSeq, hash: anchor.prunedHash, prev_hash: undefined };
  const { report, last } = await walk(read, pageSize, start, anchor);
  if (report.broken !== undefined) return report;
  // every entry up to the anchor's seq was appended before the walk began: each must be there
  // (entries past it, appended since, the walk judged as any other)
  const end = last?.seq ?? start.seq;
  if (end >= anchor.seq) return report;
  const missing =
    end + 1 === anchor.seq ? `seq ${anchor.seq} is` : `seq ${end + 1}..${anchor.seq} are`;
  const where =
    last === undefined
      ? `missing: the log is empty (${pruneNote(start)})`
      : `missing at the newest end: the last entry is seq ${end}`;
  return {
    ...report,
    broken: at(end + 1, 'removed', `${missing} ${where}, the anchor holds seq ${anchor.seq}`),
  };
}

const anchorGone = (r: ChainReport): ChainBreak =>
  at(
    (r.last ?? 0) + 1,
    'removed',
    "the anchor (audit_anchor) is gone: what was removed at the log's ends cannot be told",
  );

const newestRewritten = (seq: number): ChainBreak =>
  at(
    seq,
    'changed',
    'its hash is not the one the anchor holds for it: it was rewritten with its hash recomputed',
  );

async function walk(
  read: AuditPages,
  pageSize: number,
  start?: Start,
  anchor?: AuditAnchor,
): Promise<{ report: ChainReport; last: AuditEntry | undefined }> {
  const entries = new Pages(read, pageSize);
  let prev: Prev | undefined = start;
  let first: number | undefined;
  let last: AuditEntry | undefined;
  let count = 0;
  const report = (broken?: ChainBreak) => ({
    report: { entries: count, first, last: last?.seq, broken },
    last,
  });
  for (;;) {
    const e = await entries.next();
    if (e === undefined) return report();
    count++;
    first ??= e.seq;
    last = e;
    if (prev === undefined) {
      // no anchor kept: at seq 1 it follows genesis; else its prev_hash is taken as given
      if (e.seq === 1) prev = GENESIS;
      else if (!selfConsistent(e))
        return report(at(e.seq, 'changed', 'its hash does not match its fields'));
      else {
        prev = e;
        continue;
      }
    }
    if (e.seq <= prev.seq) {
      if (isStart(prev) && prev.seq > 0)
        return report(at(e.seq, 'inserted', `seq ${e.seq} is one ${pruneNote(prev)}`));
      return report(at(e.seq, 'inserted', `seq ${e.seq} appears again after seq ${prev.seq}`));
    }
    if (e.seq === prev.seq + 1 && e.prev_hash === prev.hash && selfConsistent(e)) {
      // the newest entry when the walk began: the anchor holds its hash
      if (anchor !== undefined && e.seq === anchor.seq && e.hash !== anchor.hash)
        return report(newestRewritten(e.seq));
      prev = e;
      continue;
    }
    return report(breakAt(prev, e, await entries.peek()));
  }
}

/**
 * What the first entry `e` that does not follow `prev` soundly says, with the entry after it
 * (`next`, when there is one) to tell an entry inserted from one changed.
 */
function breakAt(prev: Prev, e: AuditEntry, next: AuditEntry | undefined): ChainBreak {
  const gap = e.seq - prev.seq - 1;
  if (gap > 0) {
    const missing = gap === 1 ? `seq ${prev.seq + 1} is` : `seq ${prev.seq + 1}..${e.seq - 1} are`;
    if (isStart(prev))
      return at(
        prev.seq + 1,
        'removed',
        `${missing} missing before seq ${e.seq}, the first entry (${pruneNote(prev)})`,
      );
    return at(prev.seq + 1, 'removed', `${missing} missing between seq ${prev.seq} and ${e.seq}`);
  }
  const links = e.prev_hash === prev.hash;
  // e links to what prev links to: two entries after one, prev is the one put in between
  if (!links && !isStart(prev) && e.prev_hash === prev.prev_hash) {
    return at(
      prev.seq,
      'inserted',
      `seq ${e.seq} links to the entry before seq ${prev.seq}: seq ${prev.seq} was put in between`,
    );
  }
  const sound = selfConsistent(e);
  if (!sound) {
    const shift = renumbered(e);
    if (shift > 0)
      return at(
        e.seq,
        'removed',
        `seq ${e.seq} matches its fields as seq ${e.seq + shift}: ${plural(shift)} before it removed and the rest renumbered`,
      );
    if (shift < 0)
      return at(
        e.seq + shift,
        'inserted',
        `seq ${e.seq} matches its fields as seq ${e.seq + shift}: ${plural(-shift)} put in at seq ${e.seq + shift} and the rest renumbered`,
      );
  }
  // the entry after e links to prev: the chain passes e over
  if (next !== undefined && next.prev_hash === prev.hash) {
    if (!isStart(prev))
      return at(
        e.seq,
        'inserted',
        `seq ${next.seq} links to seq ${prev.seq}: seq ${e.seq} was put in between`,
      );
    return at(
      e.seq,
      'inserted',
      prev.seq === 0
        ? `seq ${next.seq} starts the chain: seq ${e.seq} was put before it`
        : `seq ${next.seq} links to seq ${prev.seq}, the last one retention pruned: seq ${e.seq} was put before it`,
    );
  }
  if (!sound) return at(e.seq, 'changed', 'its hash does not match its fields');
  if (isStart(prev))
    return at(
      e.seq,
      'changed',
      prev.seq === 0
        ? 'it is seq 1 but its prev_hash is not the genesis hash'
        : `its prev_hash is not the hash of seq ${prev.seq}, the last entry retention pruned`,
    );
  // both sound, the link broken: prev was rewritten with its hash recomputed (e still holds
  // the old one)
  return at(
    prev.seq,
    'changed',
    `seq ${e.seq}'s prev_hash is not its hash: seq ${prev.seq} was rewritten with its hash recomputed`,
  );
}

/** The shift under which `e` matches its fields (+: it was numbered higher), or 0: none. */
function renumbered(e: AuditEntry): number {
  for (let d = 1; d <= RENUMBERED_WITHIN; d++) {
    if (selfConsistent(e, e.seq + d)) return d;
    if (e.seq - d >= 1 && selfConsistent(e, e.seq - d)) return -d;
  }
  return 0;
}

const at = (seq: number, kind: ChainBreakKind, why: string): ChainBreak => ({ seq, kind, why });
const plural = (n: number) => (n === 1 ? '1 entry' : `${n} entries`);

/** The entries, page by page, with a look at the next one. */
class Pages {
  readonly #read: AuditPages;
  readonly #size: number;
  #page: readonly AuditEntry[] = [];
  #i = 0;
  #after = 0;
  #done = false;

  constructor(read: AuditPages, size: number) {
    this.#read = read;
    this.#size = size;
  }

  async next(): Promise<AuditEntry | undefined> {
    const e = await this.peek();
    if (e !== undefined) this.#i++;
    return e;
  }

  async peek(): Promise<AuditEntry | undefined> {
    if (this.#i >= this.#page.length && !this.#done) {
      this.#page = await this.#read(this.#after, this.#size);
      this.#i = 0;
      this.#done = this.#page.length < this.#size;
      const tail = this.#page.at(-1);
      if (tail !== undefined) this.#after = tail.seq;
    }
    return this.#page[this.#i];
  }
}
