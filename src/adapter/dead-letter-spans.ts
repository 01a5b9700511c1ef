/**
 * Dead letters in traces (CONTRACT.md, "Trace context"): with tracing on, each copy a commit
 * dead-letters is recorded as a `dead_letter` event on a `settle <channel>` span, a child of its
 * message's creation context, so the sender's trace shows where its message stopped and why. A
 * nack with retry false is not among them: its own `settle` span carries that event (routes.ts).
 * Dead letters are rare; reading their message back (for its context) is done after the commit,
 * off its path, and only while tracing is on.
 */
import type { Logger } from 'pino';
import { traceOfMessage } from '../protocol/trace-context.js';
import type { DeadLettered, Store } from '../store/store.js';
import { MESSAGING_SYSTEM, type Tracing } from '../telemetry/tracing.js';
import type { GroupCommit } from './group-commit.js';

export function traceDeadLetters(
  commits: GroupCommit,
  store: Store,
  tracing: Tracing,
  logger: Logger,
): void {
  if (!tracing.on) return;
  commits.on('commit', (_stats, effects) => {
    for (const d of effects.deadLettered ?? []) {
      if (d.reason === 'rejected') continue;
      record(store, tracing, d).catch((err: unknown) =>
        logger.debug({ err, message_id: d.messageId }, 'a dead letter was not traced'),
      );
    }
  });
}

async function record(store: Store, tracing: Tracing, d: DeadLettered): Promise<void> {
  const at = Date.now();
  const status = await store.messageStatus(d.messageId);
  const head = status?.message;
  const channel = head === undefined ? 'inbox' : (/"channel":"([^"]+)"/.exec(head)?.[1] ?? 'inbox');
  const span = tracing.start(`settle ${channel}`, 'internal', {
    parent: head === undefined ? undefined : traceOfMessage(head),
    startTime: at,
    attributes: {
      'messaging.system': MESSAGING_SYSTEM,
      'messaging.operation.type': 'settle',
      'messaging.operation.name': 'dead_letter',
      'messaging.destination.name': channel,
      'messaging.message.id': d.messageId,
      'agw.recipient': d.recipient,
      'agw.attempt': d.attempt,
    },
  });
  span.event('dead_letter', { 'agw.reason': d.reason, 'agw.recipient': d.recipient });
  span.end(at);
}
