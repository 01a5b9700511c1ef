/**
 * What the adapter serves, as types for readers (the client, the sidecar's inbox repair) and as
 * the one place the JSON of a delivery and a dead letter is put together. A stored message is
 * kept as the JSON readers see, so these splice its bytes in rather than parse and re-encode it.
 */
export type { Delivery, Message } from './agent-api.js';

/** `{"delivery_id":...,"message":<the stored bytes>}` */
export function deliveryJson(
  id: number,
  attempt: number,
  leaseExpiresAt: number,
  messageJson: string,
): string {
  const expires = new Date(leaseExpiresAt).toISOString();
  return `{"delivery_id":${id},"attempt":${attempt},"lease_expires_at":"${expires}","message":${messageJson}}`;
}

/** A copy's state as an ask's reply tells it (the store's take_reply). */
export type ReplyState = 'leased' | 'acked' | 'dead_letter';

/**
 * An ask's reply (docs/design/time.md, "Asking"): the delivery as the inbox gives it, with its
 * `state`. An acked or dead-lettered copy holds no lease (`lease_expires_at` null); a message
 * that fails its checksum is `"message":null`, as the dead letters show one.
 */
export function replyJson(
  id: number,
  attempt: number,
  leaseExpiresAt: number | null,
  state: ReplyState,
  messageJson: string,
): string {
  const expires = leaseExpiresAt === null ? 'null' : `"${new Date(leaseExpiresAt).toISOString()}"`;
  return `{"delivery_id":${id},"attempt":${attempt},"lease_expires_at":${expires},"state":"${state}","message":${messageJson}}`;
}

export interface DeadLetterFields {
  readonly id: number;
  readonly reason: string;
  readonly attempts: number;
  readonly recipient: string;
  readonly deadLetteredAt: number;
  readonly replayDeliveryId: number | null;
  /** The agent's reason, for a delivery it rejected (nack with retry false). */
  readonly note: string | null;
}

/** One entry of GET /v1/dead-letters, with its message's stored bytes. */
export function deadLetterJson(d: DeadLetterFields, messageJson: string): string {
  return `{"id":${d.id},"reason":${JSON.stringify(d.reason)},"note":${JSON.stringify(d.note)},"attempts":${d.attempts},"recipient":${JSON.stringify(
    d.recipient,
  )},"dead_lettered_at":"${new Date(d.deadLetteredAt).toISOString()}","replay_delivery_id":${
    d.replayDeliveryId ?? 'null'
  },"message":${messageJson}}`;
}

/**
 * The channel_sequence_id of a stored message's JSON, without parsing its payload: the assigned
 * fields come before `"payload":` (the first unescaped one is the envelope's own, since string
 * values escape their quotes).
 */
export function sequenceOf(messageJson: string): number {
  const head = messageJson.slice(0, messageJson.indexOf('"payload":'));
  const m = /"channel_sequence_id":(\d+)/.exec(head);
  if (m === null) throw new Error('a stored message without its channel_sequence_id');
  return Number(m[1]);
}

/** The message_id of a stored message's JSON (its first field), without parsing it. */
export function messageIdOf(messageJson: string): string {
  const m = /^\{"message_id":"([^"]+)"/.exec(messageJson);
  if (m === null) throw new Error('a stored message without its message_id');
  return m[1]!;
}

/** The id a deadLetterJson string starts with. */
export function deadLetterIdOf(json: string): number {
  const m = /^\{"id":(\d+),/.exec(json);
  if (m === null) throw new Error('a dead letter without its id');
  return Number(m[1]);
}
