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
 *   which its successor still contradicts (the successor's prev_hash is the old hash).
 * - `removed`: a seq missing between two entries, or entries renumbered down to close the gap
 *   (one that matches its fields only under a higher seq).
 * - `inserted`: an entry the chain passes over: the entry after it links to the one before it
 *   (so even a forged entry whose own hash is recomputed correctly is found, by its successor),
 *   or entries renumbered up to make room (one that matches its fields only under a lower seq);
 *   and a seq that appears twice.
 *
 * The anchor: the first entry read starts the chain. At seq 1 its prev_hash must be
 * GENESIS_HASH; after retention pruned the oldest entries its prev_hash is taken as given (the
 * entry it names is gone). Hence what no chain can show: entries removed at the oldest end (as
 * pruning does) or at the newest end, and an entry appended at the end by someone who computes
 * its hash as the adapter does. An entry inserted before the anchor reads as the anchor changed
 * unless it copied the anchor's prev_hash.
 */
import type { AuditEntry } from '../store.js';
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

export interface VerifyOptions {
  /**
   * Entries a read asks for. Default 500: ~150 KB of entries in memory at a time, and ~3 ms of
   * hashing between two reads (6 µs an entry on this machine: 100,000 entries in 0.6 s), so an
   * adapter checking at start goes on answering requests between pages.
   */
  readonly pageSize?: number;
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
 * another replica) that prunes while the walk reads makes a gap behind the oldest end: a gap
 * found below the log's first entry as it is now is that, and the walk starts over.
 */
export async function verifyAuditChain(
  read: AuditPages,
  opts: VerifyOptions = {},
): Promise<ChainReport> {
  const pageSize = opts.pageSize ?? PAGE;
  for (let attempt = 0; ; attempt++) {
    const report = await walk(read, pageSize);
    const b = report.broken;
    if (b === undefined || b.kind !== 'removed' || attempt >= RESTARTS) return report;
    const [first] = await read(0, 1);
    if (first === undefined || first.seq <= b.seq) return report;
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

/** The sound entry before a log that starts at seq 1: genesis. */
const GENESIS: Pick<AuditEntry, 'seq' | 'hash'> & { readonly prev_hash: undefined } = {
  seq: 0,
  hash: GENESIS_HASH,
  prev_hash: undefined,
};

type Prev = Pick<AuditEntry, 'seq' | 'hash'> & { readonly prev_hash: string | undefined };

async function walk(read: AuditPages, pageSize: number): Promise<ChainReport> {
  const entries = new Pages(read, pageSize);
  let prev: Prev | undefined;
  let first: number | undefined;
  let last: number | undefined;
  let count = 0;
  const report = (broken?: ChainBreak): ChainReport => ({ entries: count, first, last, broken });
  for (;;) {
    const e = await entries.next();
    if (e === undefined) return report();
    count++;
    first ??= e.seq;
    last = e.seq;
    if (prev === undefined) {
      // the anchor: at seq 1 it follows genesis; else its prev_hash is taken as given
      if (e.seq === 1) prev = GENESIS;
      else if (!selfConsistent(e))
        return report(at(e.seq, 'changed', 'its hash does not match its fields'));
      else {
        prev = e;
        continue;
      }
    }
    if (e.seq <= prev.seq)
      return report(at(e.seq, 'inserted', `seq ${e.seq} appears again after seq ${prev.seq}`));
    if (e.seq === prev.seq + 1 && e.prev_hash === prev.hash && selfConsistent(e)) {
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
    return at(prev.seq + 1, 'removed', `${missing} missing between seq ${prev.seq} and ${e.seq}`);
  }
  const links = e.prev_hash === prev.hash;
  // e links to what prev links to: two entries after one, prev is the one put in between
  if (!links && prev.prev_hash !== undefined && e.prev_hash === prev.prev_hash) {
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
  if (next !== undefined && next.prev_hash === prev.hash && prev !== GENESIS) {
    return at(
      e.seq,
      'inserted',
      `seq ${next.seq} links to seq ${prev.seq}: seq ${e.seq} was put in between`,
    );
  }
  if (next !== undefined && prev === GENESIS && next.prev_hash === GENESIS_HASH) {
    return at(
      e.seq,
      'inserted',
      `seq ${next.seq} starts the chain: seq ${e.seq} was put before it`,
    );
  }
  if (!sound) return at(e.seq, 'changed', 'its hash does not match its fields');
  if (prev === GENESIS)
    return at(e.seq, 'changed', 'it is seq 1 but its prev_hash is not the genesis hash');
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
