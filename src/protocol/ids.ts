import { randomUUID } from 'node:crypto';

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then randomness, so ids sort roughly by
 * creation time. Built from randomUUID(), whose entropy Node caches, by overwriting the time
 * and version fields: about 0.1 µs, against ~1 µs for filling 16 random bytes per call.
 */
export function uuidv7(now: number = Date.now()): string {
  const time = now.toString(16).padStart(12, '0');
  const random = randomUUID();
  // random: xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx (variant bits already RFC 9562's)
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${random.slice(15)}`;
}

/** A UUIDv7 in its text form: every message_id is one. */
export const UUIDV7_PATTERN =
  /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

/** The milliseconds a UUIDv7 carries, or undefined for anything that is not one. */
export function uuidv7Time(id: string): number | undefined {
  if (!UUIDV7_PATTERN.test(id)) return undefined;
  return Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
}
