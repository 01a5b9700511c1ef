/**
 * The sidecar's events, one typed map (docs/reference/events.md): each is emitted once, after
 * what it tells has happened (the breaker's state saved, the outbox's refusal decided, the gap
 * written to the file). `watch` subscribes the log and the journald emergencies to it, as one
 * table; the start gate's opening and the inbox's count of sends subscribe in server.ts; the
 * journey, the console's live view and tracing will too.
 */
import type { Logger } from 'pino';
import { type Emergencies, raiseOrLog } from '../journald/emergency.js';
import { EventMap } from '../protocol/events.js';
import type { BreakerEvents } from './circuit-breaker.js';

export interface SidecarEvents extends BreakerEvents {
  /** The adapter's /health answered 200 and the start check passed: agents may go on. */
  'gate:open': [];
  /** The gate is still shut `afterS` seconds after start. */
  'gate:alarm': [afterS: number];
  /**
   * The sidecar cannot go on (its token is another agent's, or no agent's): `line` says why.
   * The program stops and exits 1 (cli/sidecar.ts listens).
   */
  fatal: [line: string];
  /** A send of the agent's was acknowledged by the adapter with its channel's number. */
  'send:assigned': [channel: string, seq: number];
  /** A send was refused because the outbox holds its bound (`depth` = `capacity`). */
  'outbox:full': [outbox: { readonly depth: number; readonly capacity: number }];
  /**
   * A queued message was stored by the adapter as the outbox drained (201, or 200 for a key it
   * had stored before): `ack` is the adapter's answer, as a send's would have been.
   */
  'outbox:sent': [
    sent: { readonly idempotencyKey: string; readonly ack: Readonly<Record<string, unknown>> },
  ];
  /** A queued message the adapter refused for good moved to the local dead letters. */
  'outbox:dead-letter': [refused: { readonly idempotencyKey: string; readonly status: number }];
  /**
   * A delivery's number skipped past the channel's mark: the numbers between are scanned by
   * replay (`after` < n < `until`) before the delivery is handed over.
   */
  'inbox:gap': [gap: { readonly channel: string; readonly after: number; readonly until: number }];
  /** The inbox marks could not be written: kept in memory and tried again. */
  'marks:write-error': [err: unknown];
  /** A listener threw; the work it followed stands and the other listeners ran. */
  'listener:error': [err: unknown, event: string];
}

export class SidecarEventMap extends EventMap<SidecarEvents> {}

/**
 * The log lines and CRIT journald entries the events make: one table, so that what the
 * orchestrator sees is read in one place.
 */
export function watch(
  events: SidecarEventMap,
  logger: Logger,
  emergencies: Emergencies,
  adapterUrl: string,
): void {
  events.on('listener:error', (err, event) =>
    logger.error({ err, event }, `a listener of ${event} failed; the work it followed stands`),
  );
  events.on('breaker', (s) => {
    logger.warn({ breaker: s }, `circuit ${s.state}`);
    if (s.state === 'open')
      raiseOrLog(emergencies, logger, {
        reason: 'circuit_open',
        message: `the circuit to the adapter opened (step ${s.step}, next probe in ${s.resetMs} ms)`,
      });
  });
  events.on('gate:alarm', (afterS) =>
    raiseOrLog(emergencies, logger, {
      reason: 'adapter_unreachable',
      message: `the adapter at ${adapterUrl} has not answered /health for ${afterS} s since start`,
    }),
  );
  events.on('outbox:full', (o) =>
    raiseOrLog(emergencies, logger, {
      reason: 'outbox_full',
      message: `the outbox is full (${o.capacity}); new messages are refused until the adapter is back`,
      fields: { AGW_OUTBOX_DEPTH: o.depth },
    }),
  );
  events.on('outbox:dead-letter', (r) => {
    logger.error(
      { key: r.idempotencyKey, status: r.status },
      'the adapter refused a queued message for good',
    );
    raiseOrLog(emergencies, logger, {
      reason: 'dead_letter',
      message: `a queued message was refused by the adapter (${r.status}) and moved to the local dead letters`,
      fields: { AGW_IDEMPOTENCY_KEY: r.idempotencyKey, AGW_STATUS: r.status },
    });
  });
  events.on('inbox:gap', (g) =>
    logger.info(
      g,
      `channel ${g.channel}: numbers ${g.after + 1} to ${g.until - 1} are read back by replay`,
    ),
  );
  events.on('marks:write-error', (err) =>
    logger.error({ err }, 'inbox marks could not be written: kept in memory, tried again'),
  );
}
