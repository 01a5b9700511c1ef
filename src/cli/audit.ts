/**
 * `agent-gateway audit verify [--db FILE|URL]`: checks the audit log's hash chain
 * (docs/reference/configuration.md; docs/design/operators.md, "Verification"). `--db` is AGW_DB
 * (default ./data/adapter.db, as the adapter's): a SQLite file, opened read-only, or a postgres://
 * URL; nothing is migrated or written, so it may run while adapters serve. The chain is walked by
 * store/rules/audit-chain.ts, page by page, from the anchor the store keeps beside the log to
 * it, so entries removed at either end are named as well. Exit 0: one line, "audit log: N
 * entries, seq A..B, chain intact"; 1: the first break, named by its seq and kind (changed,
 * removed, inserted); 2: a bad flag, or a store that cannot be reached or read (one line on
 * stderr).
 */
import { z } from 'zod';
import type { SettingSpec } from '../settings.js';
import { type AuditSource, AuditSourceError, openAuditSource } from '../store/audit-source.js';
import { type ChainReport, chainSummary, verifyAuditChain } from '../store/rules/audit-chain.js';
import { type CommandHelp, usageLine } from './help.js';
import { readSettings, SettingsError } from './settings.js';

export const AUDIT_SETTINGS = {
  db: { env: 'AGW_DB', default: './data/adapter.db' },
} as const satisfies Record<string, SettingSpec>;

const Schema = z.strictObject({ db: z.string().min(1, 'must not be empty') });

export const HELP: CommandHelp = {
  subcommand: 'verify',
  about:
    'Walks the audit log from where retention pruned it to the newest entry its anchor holds, ' +
    'page by page, from a SQLite file (opened read-only) or a postgres:// URL; nothing is ' +
    'written, so it may run while adapters serve. ' +
    'Exit 0: one line, the chain intact; 1: the first break, by its seq and kind (changed, ' +
    'removed, inserted); 2: a bad flag, or a store that cannot be reached or read.',
  settings: AUDIT_SETTINGS,
  schema: Schema,
};

export async function runAudit(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const { settings, positionals } = readSettings(AUDIT_SETTINGS, Schema, argv, env);
  if (positionals[0] !== 'verify' || positionals.length > 1) {
    const got = positionals.length === 0 ? 'none' : `"${positionals.join(' ')}"`;
    throw new SettingsError(`give the subcommand verify (got ${got}); ${usageLine('audit', HELP)}`);
  }
  const say = (line: string) => process.stderr.write(`agent-gateway audit: ${line}\n`);
  let source: AuditSource;
  try {
    source = await openAuditSource(settings.db);
  } catch (err) {
    if (!(err instanceof AuditSourceError)) throw err;
    say(err.message);
    return 2;
  }
  let report: ChainReport;
  try {
    report = await verifyAuditChain(source.read, { anchor: source.anchor });
  } catch (err) {
    say(`cannot read the audit log: ${(err as Error).message}`);
    return 2;
  } finally {
    await source.close().catch(() => undefined);
  }
  process.stdout.write(`${chainSummary(report)}\n`);
  return report.broken === undefined ? 0 : 1;
}
