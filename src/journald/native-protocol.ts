/**
 * journald's native protocol (systemd.io/JOURNAL_NATIVE_PROTOCOL): one datagram per entry, one
 * field per line. `KEY=value\n` for plain text; for a value holding a newline or bytes that are
 * not text, the binary-safe form: `KEY\n`, the value's length in bytes as a 64-bit little-endian
 * integer, the bytes, `\n`.
 */

export type FieldValue = string | Buffer | number | boolean;
export type Fields = Record<string, FieldValue | undefined>;

/** Keys: upper case A-Z, 0-9 and _, not starting with _ or a digit, at most 64 characters. */
export function normalizeKey(key: string): string {
  let k = key
    .toUpperCase()
    .replace(/[^A-Z0-9_]/g, '_')
    .replace(/^_+/, '');
  if (k === '' || /^[0-9]/.test(k)) k = `X${k}`;
  return k.slice(0, 64);
}

/** Text that can go as KEY=value: no newline, valid UTF-8, no control bytes but tab. */
function plain(value: Buffer): boolean {
  for (const b of value) if ((b < 0x20 && b !== 0x09) || b === 0x7f) return false;
  return Buffer.from(value.toString('utf8'), 'utf8').equals(value);
}

function toBuffer(v: FieldValue): Buffer {
  return Buffer.isBuffer(v) ? v : Buffer.from(String(v), 'utf8');
}

const TRUNCATED = Buffer.from(
  '\n[... truncated by agent-gateway: the entry was larger than one datagram]',
);

/**
 * Encodes fields into one datagram of at most `maxBytes`. Keys are normalized (a later field
 * with the same normalized key wins); an entry that would be larger is cut at its largest
 * field, which then ends with a marker, and AGW_TRUNCATED names it and its full length.
 */
export function encodeEntry(fields: Fields, maxBytes: number): Buffer {
  const entries = new Map<string, Buffer>();
  for (const [key, value] of Object.entries(fields)) {
    if (value !== undefined) entries.set(normalizeKey(key), toBuffer(value));
  }
  let size = encodedSize(entries);
  if (size > maxBytes) {
    let largest = '';
    for (const [k, v] of entries)
      if (largest === '' || v.length > entries.get(largest)!.length) largest = k;
    const original = entries.get(largest)!;
    entries.set('AGW_TRUNCATED', Buffer.from(`${largest}:${original.length}`));
    size = encodedSize(entries);
    // binary form from here on (the marker holds a newline): key + \n + 8 + value + \n
    const room = Math.max(0, maxBytes - (size - original.length) - TRUNCATED.length - 10);
    entries.set(largest, Buffer.concat([original.subarray(0, room), TRUNCATED]));
  }
  const parts: Buffer[] = [];
  for (const [k, v] of entries) {
    if (plain(v)) {
      parts.push(Buffer.from(`${k}=`), v, NL);
    } else {
      const len = Buffer.alloc(8);
      len.writeBigUInt64LE(BigInt(v.length));
      parts.push(Buffer.from(`${k}\n`), len, v, NL);
    }
  }
  return Buffer.concat(parts);
}

const NL = Buffer.from('\n');

function encodedSize(entries: Map<string, Buffer>): number {
  let n = 0;
  // the binary form's worst case: key, \n, 8 bytes of length, value, \n
  for (const [k, v] of entries) n += k.length + 10 + v.length;
  return n;
}
