/**
 * The adapter's events, one typed map (docs/reference/events.md): each is emitted once, after
 * what it tells has happened (after the commit, never for rolled-back work), and on transitions,
 * not per message. `watch` subscribes the log and the journald emergencies to it, as one table;
 * metrics subscribe in metrics.ts; the journey, the console's live view and tracing will too.
 */
import type { Logger } from 'pino';
import { type Emergencies, raiseOrLog } from '../journald/emergency.js';
import { EventMap } from '../protocol/events.js';
import type { AlertPayload, CommitEffects, SentAlert } from '../store/store.js';
import type { ConnectionEvents } from './connection-limits.js';
import type { ResponseEvents } from './response-budget.js';

export interface CommitStats {
  /** Messages appended (a batch counts each), and operations of any kind. */
  readonly messages: number;
  readonly operations: number;
  readonly seconds: number;
}

/** What the group commit tells (group-commit.ts); a part of the adapter's map. */
export interface CommitEvents {
  /** A group committed; before anyone in it is answered. */
  commit: [stats: CommitStats, effects: CommitEffects];
  /** A group's transaction failed and rolled back; everyone in it was told to retry. */
  'commit:error': [err: unknown];
  /** An alert a group wrote to alerts_to (after `commit`, whose listeners woke the polls). */
  alert: [alert: SentAlert];
  /** Deliveries moved to the dead letters, told by their alert/dead-letter. */
  'delivery:dead-letter': [alert: AlertPayload];
  /**
   * A listener threw (the group stands and is answered as if it had not; the other listeners
   * still ran), or the group commit's `beforeGroup` hook did (`event` 'beforeGroup').
   */
  'listener:error': [err: unknown, event: string];
}

export interface StalledAgent {
  readonly agent: string;
  /** Deliveries waiting for it. */
  readonly pending: number;
  /** Its last poll (ISO 8601), or null when none since the adapter started. */
  readonly lastPoll: string | null;
  readonly stalledS: number;
}

export interface AdapterEvents extends CommitEvents, ConnectionEvents, ResponseEvents {
  /** An agent has not polled for AGW_STALL_S while deliveries wait; its alert/stalled committed. */
  'agent:stalled': [stalled: StalledAgent];
  /** Writes keep failing on the storage: /health answers 503 from now. */
  'storage:failing': [
    failure: { readonly why: string; readonly count: number; readonly err: Error },
  ];
  /** A write committed again after `storage:failing`: /health answers 200. */
  'storage:recovered': [by: string];
}

export class AdapterEventMap extends EventMap<AdapterEvents> {}

/**
 * The log lines and CRIT journald entries the events make: one table, so that what the
 * orchestrator sees is read in one place.
 */
export function watch(
  events: AdapterEventMap,
  logger: Logger,
  emergencies: Emergencies | undefined,
): void {
  events.on('commit:error', (err) =>
    logger.error({ err }, 'group commit failed; its senders were told to retry'),
  );
  events.on('listener:error', (err, event) =>
    logger.error({ err, event }, `a listener of ${event} failed; the work it followed stands`),
  );
  events.on('alert', (a) => {
    if (a.kind === 'alert/storage' && a.payload.reason === 'storage_full') {
      logger.warn(
        { alert: a.payload },
        `storage full: ${a.payload.count} message(s) of ${a.payload.recipient} refused (storage_full) since the last alert`,
      );
      return;
    }
    if (a.kind !== 'alert/dead-letter' && a.kind !== 'alert/integrity') return;
    // A corrupt row is quarantined by the store (never served, its delivery dead-lettered, its
    // channel released); the log and the CRIT entry say so.
    const p = a.payload;
    const reason = a.kind === 'alert/integrity' ? 'integrity' : 'dead_letter';
    const message =
      reason !== 'integrity'
        ? `${p.count} deliveries to ${p.recipient} dead-lettered (${p.reason})`
        : p.reason === 'integrity'
          ? `${p.count} stored message(s) to ${p.recipient} failed their checksum: quarantined to the dead letters, never served`
          : p.reason === 'audit_chain'
            ? auditChainMessage(p)
            : `${p.count} stored message(s) of ${p.recipient} failed their checksum on a read: skipped, never served`;
    if (reason === 'integrity') logger.error({ alert: p }, `integrity: ${message}`);
    raiseOrLog(emergencies, logger, {
      reason,
      message,
      fields: {
        AGW_RECIPIENT: p.recipient,
        AGW_DETAIL: p.reason,
        AGW_COUNT: p.count,
        AGW_MESSAGE_IDS: p.message_ids.join(','),
      },
    });
  });
  events.on('agent:stalled', (s) => {
    const message = `${s.agent} has not polled for ${s.stalledS} s while ${s.pending} deliveries wait for it`;
    logger.warn({ agent: s.agent, pending: s.pending, last_poll: s.lastPoll }, message);
    raiseOrLog(emergencies, logger, {
      reason: 'stalled',
      message,
      fields: {
        AGW_RECIPIENT: s.agent,
        AGW_PENDING: s.pending,
        AGW_LAST_POLL: s.lastPoll ?? 'none since the adapter started',
        AGW_STALLED_S: s.stalledS,
      },
    });
  });
  events.on('storage:failing', (f) => {
    logger.fatal({ err: f.err }, `storage: ${f.why}; /health answers 503 until a write commits`);
    raiseOrLog(emergencies, logger, {
      reason: 'storage',
      message: `adapter store writes keep failing: ${f.why}`,
      fields: { AGW_COUNT: f.count, AGW_DETAIL: f.err.message },
    });
  });
  events.on('response:timeout', (bytes) =>
    logger.warn({ bytes }, 'a client did not take its answer in time; its connection was cut'),
  );
  events.on('storage:recovered', (by) =>
    logger.warn(`storage: writes work again (${by} committed); /health answers 200`),
  );
}

/**
 * An `audit_chain` alert's sentence (adapter/audit-check.ts): its first id names the break as
 * `audit:<seq>:<kind>`.
 */
function auditChainMessage(p: AlertPayload): string {
  const m = /^audit:(\d+):([a-z]+)$/.exec(p.message_ids[0] ?? '');
  const where = m === null ? '' : ` at seq ${m[1]} (${m[2]})`;
  return `the audit log's hash chain is broken${where}: the adapter goes on serving and appends after the break; agent-gateway audit verify names it`;
}
