/**
 * The spans both programs make, after OpenTelemetry's messaging conventions (CONTRACT.md, "Trace
 * context"): `send <channel>` (PRODUCER), `receive <channel>` (CONSUMER, linked to every message
 * it hands over), `settle <channel>`. Deliveries are read from their JSON's head (the fields
 * before the payload), never parsed whole.
 */
import { parseTraceparent, type TraceContext, traceOfMessage } from '../protocol/trace-context.js';
import { MESSAGING_SYSTEM, type Span, type SpanLink, type Tracing } from './tracing.js';

/** What a hand-over's span needs of one delivery. */
export interface HandedOver {
  readonly deliveryId: number;
  readonly attempt: number;
  readonly messageId: string;
  readonly channel: string;
  readonly trace: TraceContext | undefined;
}

/** The head of a delivery's JSON (`{"delivery_id":..,"attempt":..,..,"message":{...`). */
export function handedOver(deliveryJson: string): HandedOver {
  const end = deliveryJson.indexOf('"payload":');
  const head = end < 0 ? deliveryJson : deliveryJson.slice(0, end);
  return {
    deliveryId: Number(/"delivery_id":(-?\d+)/.exec(head)?.[1] ?? 0),
    attempt: Number(/"attempt":(\d+)/.exec(head)?.[1] ?? 1),
    messageId: /"message_id":"([^"]+)"/.exec(head)?.[1] ?? '',
    channel: /"channel":"([^"]+)"/.exec(head)?.[1] ?? '',
    trace: traceOfMessage(head),
  };
}

/** The destination a span is named for: the one channel of its messages, or `inbox`. */
function destinationOf(items: readonly { readonly channel: string }[]): string {
  const first = items[0]?.channel;
  return first !== undefined && items.every((i) => i.channel === first) ? first : 'inbox';
}

/**
 * A message taken for sending: `send <to>`, a child of its creation context (none: a new trace).
 * The caller ends it once the message is stored, or queued.
 */
export function startSend(
  tracing: Tracing,
  to: string,
  parent: TraceContext | undefined,
  sender: string,
): Span {
  return tracing.start(`send ${to}`, 'producer', {
    parent,
    attributes: {
      'messaging.system': MESSAGING_SYSTEM,
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.destination.name': to,
      'agw.sender': sender,
    },
  });
}

/** What became of a send: its assignment on the span. */
export function sent(
  span: Span,
  a: { message_id: string; channel: string; thread_id?: string; hop?: number },
): void {
  span.set({
    'messaging.message.id': a.message_id,
    'messaging.destination.name': a.channel,
    'agw.thread_id': a.thread_id,
    'agw.hop': a.hop,
  });
}

/**
 * A poll begun: `receive`, a child of the poller's context. Named and linked when it hands
 * something over (received); a poll that hands over nothing is never ended, so never recorded.
 */
export function startReceive(
  tracing: Tracing,
  recipient: string,
  parent: TraceContext | undefined,
): Span {
  return tracing.start('receive inbox', 'consumer', {
    parent,
    attributes: {
      'messaging.system': MESSAGING_SYSTEM,
      'messaging.operation.type': 'receive',
      'messaging.operation.name': 'receive',
      'agw.recipient': recipient,
    },
  });
}

/** Ends a receive span that handed `items` over, linked to each message's context. */
export function received(span: Span, items: readonly HandedOver[]): void {
  if (items.length === 0) return; // not recorded: nothing was handed over
  const destination = destinationOf(items);
  span.rename(`receive ${destination}`);
  span.set({
    'messaging.destination.name': destination,
    'messaging.batch.message_count': items.length,
    ...(items.length === 1
      ? { 'messaging.message.id': items[0]!.messageId, 'agw.attempt': items[0]!.attempt }
      : {}),
  });
  for (const l of linksOf(items)) span.link(l);
  span.end();
}

function linksOf(items: readonly HandedOver[]): SpanLink[] {
  return items.flatMap((i) =>
    i.trace === undefined || parseTraceparent(i.trace.traceparent) === undefined
      ? []
      : [
          {
            context: i.trace,
            attributes: {
              'messaging.message.id': i.messageId,
              'messaging.destination.name': i.channel,
              'agw.attempt': i.attempt,
              'agw.delivery_id': i.deliveryId,
            },
          },
        ],
  );
}

/**
 * Acks or nacks: `settle <channel>`, a child of the settler's context, linked to the messages
 * whose contexts are known here. Ended by the caller with the outcome.
 */
export function startSettle(
  tracing: Tracing,
  operation: 'ack' | 'nack',
  recipient: string,
  parent: TraceContext | undefined,
  ids: readonly number[],
  known: readonly HandedOver[] = [],
): Span {
  return tracing.start(`settle ${known.length > 0 ? destinationOf(known) : 'inbox'}`, 'client', {
    parent,
    links: linksOf(known),
    attributes: {
      'messaging.system': MESSAGING_SYSTEM,
      'messaging.operation.type': 'settle',
      'messaging.operation.name': operation,
      'messaging.batch.message_count': ids.length,
      'agw.recipient': recipient,
      ...(known.length === 1 ? { 'messaging.message.id': known[0]!.messageId } : {}),
    },
  });
}
