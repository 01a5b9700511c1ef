/**
 * Byte-bounded pages: every paged read of the store (replay, dead letters, the inbox's lease)
 * ends before its items would pass the caller's bound, and still holds its first item however
 * large. Rows are turned into JSON one at a time as the page grows, so a row past the bound is
 * read once at most and never kept.
 */
import { PAGE_ITEM_OVERHEAD } from '../../protocol/limits.js';

/**
 * The JSON of `rows`, in order, while their UTF-8 bytes and `extraPerItem` beside each (the
 * fields a page puts around an item, and its comma) fit in `maxBytes`; at least the first.
 */
export function fitting<R>(
  rows: Iterable<R>,
  toJson: (row: R) => string,
  maxBytes: number,
  extraPerItem = PAGE_ITEM_OVERHEAD,
): string[] {
  const out: string[] = [];
  let bytes = 0;
  for (const row of rows) {
    const json = toJson(row);
    bytes += Buffer.byteLength(json) + extraPerItem;
    if (out.length > 0 && bytes > maxBytes) break; // leaving the loop ends an iterate()
    out.push(json);
  }
  return out;
}

/**
 * What a delivery's own fields add to its message's bytes (protocol/wire.ts deliveryJson:
 * `{"delivery_id":<16 digits>,"attempt":<3>,"lease_expires_at":"<24>","message":}` is 88 at
 * most, and a comma): within an item's overhead.
 */
export const DELIVERY_FIELDS_BYTES = PAGE_ITEM_OVERHEAD;

/** fitting, over rows read as the page grows (an engine whose reads are asynchronous). */
export async function fittingAsync<R>(
  rows: AsyncIterable<R>,
  toJson: (row: R) => string,
  maxBytes: number,
  extraPerItem = PAGE_ITEM_OVERHEAD,
): Promise<string[]> {
  const out: string[] = [];
  let bytes = 0;
  for await (const row of rows) {
    const json = toJson(row);
    bytes += Buffer.byteLength(json) + extraPerItem;
    if (out.length > 0 && bytes > maxBytes) break;
    out.push(json);
  }
  return out;
}
