/**
 * The stored messages known to fail their checksum, as one store has met them since open: never
 * served, left out of replay windows, and told by an alert/integrity (`checksum_mismatch`) once.
 * A few at most; a restart finds them again. Engine-neutral: both stores check every row they
 * read through `intact`.
 */
import { crc32 } from 'node:zlib';
import type { BodyRow } from './stored-message.js';

export class CorruptRows {
  readonly #ids = new Set<number>();
  #list: number[] = [];
  /** Found by reads that hand nothing out, not told by an alert yet (the next lease or sweep). */
  #unreported = new Set<number>();

  /**
   * Whether a stored message passes its checksum. One that fails is remembered; with `report`,
   * a read that hands nothing out found it, and the next lease or sweep raises its alert (a
   * lease that meets one dead-letters it instead).
   */
  intact(r: BodyRow, report: boolean): boolean {
    if (crc32(r.body) === r.checksum) return true;
    if (!this.#ids.has(r.id)) {
      this.#ids.add(r.id);
      this.#list = [...this.#ids];
      if (report) this.#unreported.add(r.id);
    }
    return false;
  }

  /** How many are known. */
  get size(): number {
    return this.#ids.size;
  }

  /** Their row ids, for the SQL that leaves them out of replay windows. */
  get ids(): readonly number[] {
    return this.#list;
  }

  /** Rows whose alert is still to be raised. */
  get unreported(): ReadonlySet<number> {
    return this.#unreported;
  }

  /** Taken to be told now; `restore` puts them back if that transaction rolls back. */
  takeUnreported(): number[] {
    const out = [...this.#unreported];
    this.#unreported = new Set();
    return out;
  }

  restore(ids: Iterable<number>): void {
    for (const id of ids) this.#unreported.add(id);
  }
}
