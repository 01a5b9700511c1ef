/**
 * The fingerprint of a request body, which decides "same key, same body" (200 duplicate) from
 * "same key, other body" (409). It covers what the sender chose (to, kind, priority,
 * reply_to_sequence_id, reply_to, payload) with object keys sorted, so a client that
 * re-serializes the same message in another key order is still recognised as repeating itself.
 */
import { createHash } from 'node:crypto';
import type { Envelope } from './envelope.js';

export function fingerprint(e: Envelope): Buffer {
  return createHash('sha256')
    .update(
      canonicalJson({
        to: e.to,
        kind: e.kind,
        priority: e.priority,
        reply_to_sequence_id: e.reply_to_sequence_id ?? null,
        // left out when absent (canonicalJson skips undefined), so that a message without it
        // keeps the fingerprint stored before reply_to existed: a retry across the upgrade is
        // still a duplicate, not a 409
        reply_to: e.reply_to ?? undefined,
        payload: e.payload,
        // as sent, left out when absent as reply_to is: a retry with the same ttl_ms is the same
        // message although the deadline it gives would be later
        expires_at: e.expires_at,
        ttl_ms: e.ttl_ms,
        deliver_at: e.deliver_at,
      }),
    )
    .digest();
}

/** JSON with object keys in sorted order at every depth. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const obj = value as Record<string, unknown>;
  const parts: string[] = [];
  for (const k of Object.keys(obj).sort()) {
    if (obj[k] !== undefined) parts.push(`${JSON.stringify(k)}:${canonicalJson(obj[k])}`);
  }
  return `{${parts.join(',')}}`;
}
