/**
 * The audit log's chain, checked at start (docs/design/operators.md, "Verification"): walked
 * page by page through Store.audit, from the anchor the store keeps beside the log to it, by the
 * same rule `agent-gateway audit verify` uses (store/rules/audit-chain.ts), in the background
 * once the adapter serves: entries changed, inserted, or removed anywhere (in the middle, at the
 * oldest end, at the newest end) are named. A broken chain is told, and nothing stops: messages
 * are not at risk, so /health stays 200 and new entries append after the break.
 *
 * It is told as every integrity failure is: an `alert/integrity` to the alerts_to agent
 * (reason `audit_chain`, `recipient` "audit_log", the break as `audit:<seq>:<kind>` in
 * `message_ids`), committed as the `alert` op through the group commit; its `alert` event makes
 * the error log line and the CRIT journald entry (reason `integrity`), as for a corrupt message
 * (events.ts watch). The check adds a log line of its own with what it found.
 */
import type { Logger } from 'pino';
import { type ChainReport, chainSummary, verifyAuditChain } from '../store/rules/audit-chain.js';
import type { Store } from '../store/store.js';
import type { GroupCommit } from './group-commit.js';

/** The subject of the alert: the log, not an agent or a channel. */
export const AUDIT_LOG_SUBJECT = 'audit_log';

export interface AuditCheckOptions {
  /** Where the entries and the anchor are read (Store.audit, Store.auditAnchor). */
  readonly store: Pick<Store, 'audit' | 'auditAnchor'>;
  /** Where the alert is committed. */
  readonly commits: GroupCommit;
  readonly logger: Logger;
  readonly now: () => number;
}

/**
 * Checks the chain; resolves with what it found, or undefined when the log could not be read
 * (said in the log: the next start checks again). Never rejects: it runs in the background.
 */
export async function checkAuditChain(o: AuditCheckOptions): Promise<ChainReport | undefined> {
  const started = performance.now();
  let report: ChainReport;
  const { store } = o;
  const anchor = () => store.auditAnchor();
  try {
    report = await verifyAuditChain((after, limit) => store.audit(after, limit), { anchor });
  } catch (err) {
    o.logger.error(
      { err },
      'audit log: its chain could not be checked (the store could not be read)',
    );
    return undefined;
  }
  const ms = Math.round(performance.now() - started);
  const b = report.broken;
  if (b === undefined) {
    o.logger.info({ entries: report.entries, ms }, chainSummary(report));
    return report;
  }
  o.logger.error(
    { audit_seq: b.seq, audit_break: b.kind, entries: report.entries, ms },
    `${chainSummary(report)}; the adapter goes on serving and appends after the break`,
  );
  try {
    await o.commits.run({
      op: 'alert',
      recipient: AUDIT_LOG_SUBJECT,
      reason: 'audit_chain',
      messageId: `audit:${b.seq}:${b.kind}`,
      now: o.now(),
    });
  } catch (err) {
    o.logger.error({ err }, 'audit log: the alert about its broken chain could not be written');
  }
  return report;
}
