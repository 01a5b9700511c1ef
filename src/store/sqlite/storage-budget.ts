/**
 * Storage bounds of the SQLite store (StorageLimits in store.ts): the store's size, each
 * sender's share of it, and the free space kept on its volume. A new message of an agent is
 * admitted here, inside the transaction that would write it and before it takes a sequence
 * number; past a bound it is refused with 503 `storage_full` and nothing of it is written.
 *
 * Kept cheap on the send path, and what is exact enough for each bound:
 * - The store's size is SQLite's own count: (page_count − freelist_count) × page_size, the pages
 *   in use (pages retention freed are reused before the file grows, so they do not count). Read
 *   at the first admission of a transaction (two pragmas, ~27 µs), then counted on by each
 *   message's size in that transaction. Exact at each transaction's start.
 * - A sender's share counts each of its stored messages by `size`: the stored bytes plus the
 *   measured cost of a row with its index entries (MESSAGE_OVERHEAD_BYTES) and of each delivery
 *   (DELIVERY_OVERHEAD_BYTES, both in rules/storage.ts). An estimate, within a few hundred
 *   bytes a message of what the pages hold (page slack varies); it only has to keep one sender
 *   from taking the whole store, and the size bound itself is exact. The totals live in memory. On disk,
 *   `sender_usage` (one row per sender) holds them as of a message id (`usage_mark.as_of`):
 *   written back at the end of a transaction at most once every USAGE_SAVE_MS, and in every
 *   transaction that prunes, each time with the mark at the highest id then stored. An open,
 *   and a rollback, read them and add the messages stored after the mark (a range of the
 *   rowid: at most a second of sends), so a crash or a rollback never leaves them out of step,
 *   and a send's commit no longer writes their page (one 4 KiB WAL frame of ~12: docs/design/durability.md).
 *   Deletes only ever take ids at or below the mark (a prune moves it in its own transaction),
 *   and a new message's id is above every id stored, so the sum after the mark counts each
 *   message exactly once.
 * - Free space is statfs of the store's folder (~4 µs), taken at most once a second or after
 *   the store grew by a quarter of the reserve, plus the free pages inside the file: a fast
 *   writer cannot overrun the reserve between two looks.
 */
import { statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import type Database from 'better-sqlite3';
import type { GatewayError } from '../../protocol/errors.js';
import { storageRefusal } from '../rules/storage.js';
import type { StorageLimits, StorageUse } from '../store.js';
import { SQL } from './sql.js';

/** The senders' totals are written back at most this often, ms, and with every prune. */
export const USAGE_SAVE_MS = 1000;

/** Free space is looked at again after this long, ms. */
const STATFS_EVERY_MS = 1000;

export class StorageBudget {
  readonly #limits: StorageLimits;
  readonly #dir: string;
  readonly #s;
  readonly #pageSize: number;
  #senders = new Map<string, number>();
  readonly #changed = new Set<string>();
  /** A prune took bytes away: the totals are written back in its transaction. */
  #pruned = false;
  /** When the totals were last written back (performance.now(), ms). */
  #savedAt = Number.NEGATIVE_INFINITY;
  /** Bytes in use; undefined until the first admission of a transaction reads it. */
  #used: number | undefined;
  #freePagesBytes = 0;
  /** The volume's free bytes at the last statfs (Infinity when it cannot be read). */
  #volumeFree = Number.POSITIVE_INFINITY;
  #volumeAt = Number.NEGATIVE_INFINITY;
  #usedAtVolume = 0;

  constructor(db: Database.Database, file: string, limits: StorageLimits) {
    this.#limits = limits;
    this.#dir = dirname(file);
    const p = <T = unknown>(sql: string) => db.prepare<unknown[], T>(sql);
    this.#s = {
      usage: p<{ sender: string; bytes: number }>(SQL.senderUsage),
      setUsage: p(SQL.setSenderUsage),
      mark: p<number>(SQL.usageMark).pluck(),
      setMark: p(SQL.setUsageMark),
      after: p<{ sender: string; bytes: number }>(SQL.usageAfter),
      pageCount: p<number>(SQL.pageCount).pluck(),
      freelist: p<number>(SQL.freelistCount).pluck(),
    };
    this.#pageSize = p<number>(SQL.pageSize).pluck().get()!;
    this.reload();
  }

  /**
   * The refusal of a new message of `bytes` (messageSize) from `sender` when it would pass a
   * bound; undefined when it may be written.
   */
  admit(sender: string, bytes: number): GatewayError | undefined {
    const used = this.#readUsed();
    const mine = this.#senders.get(sender) ?? 0;
    return storageRefusal(sender, bytes, used, mine, this.#limits, () => this.#available(used));
  }

  /** A message was written: counted against its sender. */
  add(sender: string, bytes: number): void {
    this.#senders.set(sender, (this.#senders.get(sender) ?? 0) + bytes);
    this.#changed.add(sender);
    if (this.#used !== undefined) this.#used += bytes;
  }

  /** A message was pruned. */
  remove(sender: string, bytes: number): void {
    this.#senders.set(sender, Math.max(0, (this.#senders.get(sender) ?? 0) - bytes));
    this.#changed.add(sender);
    this.#pruned = true;
  }

  /**
   * At the end of each transaction, inside it: after a prune, USAGE_SAVE_MS after the last
   * time, or at once (`atOnce`, at close), the changed totals are written with the mark of the
   * messages they count. The next transaction reads the size afresh.
   */
  save(atOnce = false): void {
    this.#used = undefined;
    if (this.#changed.size === 0) return;
    const now = performance.now();
    if (!atOnce && !this.#pruned && now - this.#savedAt < USAGE_SAVE_MS) return;
    for (const sender of this.#changed) this.#s.setUsage.run(sender, this.#senders.get(sender));
    this.#s.setMark.run();
    this.#changed.clear();
    this.#pruned = false;
    this.#savedAt = now;
  }

  /**
   * At open, and after a rollback: the totals as committed, the messages stored after their
   * mark added (those are written back with the next save).
   */
  reload(): void {
    this.#senders = new Map(this.#s.usage.all().map((r) => [r.sender, r.bytes]));
    this.#changed.clear();
    let after: { sender: string; bytes: number }[] = [];
    try {
      after = this.#s.after.all(this.#s.mark.get()!);
    } catch {
      // a page of those rows is broken: the store's quick_check reports it and stops the
      // adapter; until then the totals as written stand, short of at most a second of sends
    }
    for (const { sender, bytes } of after) {
      this.#senders.set(sender, (this.#senders.get(sender) ?? 0) + bytes);
      this.#changed.add(sender);
    }
    this.#pruned = false;
    this.#used = undefined;
  }

  use(): StorageUse {
    const used = this.#readUsed();
    const availableBytes = this.#available(used);
    this.#used = undefined; // read outside a transaction: not counted on
    return { usedBytes: used, availableBytes, senders: Object.fromEntries(this.#senders) };
  }

  #readUsed(): number {
    if (this.#used === undefined) {
      const pages = this.#s.pageCount.get()!;
      const free = this.#s.freelist.get()!;
      this.#freePagesBytes = free * this.#pageSize;
      this.#used = (pages - free) * this.#pageSize;
    }
    return this.#used;
  }

  /** Free bytes the store could still grow into: the volume's, and its own free pages. */
  #available(used: number): number {
    const now = performance.now();
    const grown = used - this.#usedAtVolume;
    if (now - this.#volumeAt >= STATFS_EVERY_MS || grown >= this.#limits.reserveBytes / 4) {
      try {
        const fs = statfsSync(this.#dir);
        this.#volumeFree = fs.bavail * fs.bsize;
      } catch {
        this.#volumeFree = Number.POSITIVE_INFINITY; // no statfs here: the other bounds hold
      }
      this.#volumeAt = now;
      this.#usedAtVolume = used;
    }
    return this.#volumeFree - Math.max(0, grown) + this.#freePagesBytes;
  }
}
