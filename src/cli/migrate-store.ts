/**
 * `agent-gateway migrate-store --from <sqlite file> --to <postgres url>`: copies a stopped
 * SQLite adapter's store into an empty PostgreSQL database (docs/deploy.md, "Moving a SQLite
 * adapter's data to PostgreSQL"). This file reads the arguments and answers; the file is opened
 * by store/sqlite/copy-source.ts and copied by store/postgres/copy-from-sqlite.ts, in one
 * transaction. One line of counts on stdout. Exit 0: copied; 2: a bad argument or a refusal (the
 * file is held by another process, is not an adapter's store of this version, or the database
 * already holds messages); 1: a failure (nothing of the copy is left behind: the transaction
 * rolled back).
 */
import { parseArgs } from 'node:util';
import type Database from 'better-sqlite3';
import { CopyRefusal } from '../store/copy-refusal.js';
import { isPostgresUrl, shownDb } from '../store/open.js';
import { copyFromSqlite } from '../store/postgres/copy-from-sqlite.js';
import { openCopySource } from '../store/sqlite/copy-source.js';
import type { ArgSpec } from './args.js';
import { type CommandHelp, usageLine } from './help.js';

/** Its flags: what it parses, and what --help lists. */
export const MIGRATE_STORE_ARGS = {
  from: {
    flag: '--from',
    value: 'FILE',
    required: true,
    doc: "the stopped SQLite adapter's store (its AGW_DB file)",
  },
  to: {
    flag: '--to',
    value: 'URL',
    required: true,
    doc: 'the PostgreSQL database to copy it into (postgres:// or postgresql://); no messages yet',
  },
} as const satisfies Record<string, ArgSpec>;

export const HELP: CommandHelp = {
  about:
    'Copies everything in one transaction and prints one line of counts. Exit 0: copied; 2: a ' +
    'bad argument or a refusal (the file is held by another process, is no adapter store of ' +
    'this version, or the database already holds messages); 1: a failure, with nothing left ' +
    'behind. docs/deploy.md, "Moving a SQLite adapter\'s data to PostgreSQL".',
  args: MIGRATE_STORE_ARGS,
};

export async function runMigrateStore(argv: readonly string[]): Promise<number> {
  const say = (line: string) => process.stderr.write(`agent-gateway migrate-store: ${line}\n`);
  let from: string;
  let to: string;
  try {
    ({ from, to } = readArgs(argv));
  } catch (err) {
    // node's parseArgs explains at length how to pass a positional: its first sentence will do
    say(`${(err as Error).message.split('. ')[0]} (${usageLine('migrate-store', HELP)})`);
    return 2;
  }
  let source: Database.Database | undefined;
  try {
    source = openCopySource(from);
    const counts = await copyFromSqlite(source, to);
    process.stdout.write(
      `migrate-store: copied ${counts.channels} channels, ${counts.messages} messages, ` +
        `${counts.deliveries} deliveries, ${counts.deadLetters} dead letters, ` +
        `${counts.agents} agents, ${counts.threads} threads, ${counts.alerts} alert states, ` +
        `${counts.events} delivery events, ${counts.polls} agent polls, ` +
        `${counts.scheduled} scheduled messages ` +
        `from ${from} into ${shownDb(to)}\n`,
    );
    return 0;
  } catch (err) {
    if (err instanceof CopyRefusal) {
      say(err.message);
      return 2;
    }
    say(`failed, nothing was copied: ${messageOf(err)}`);
    return 1;
  } finally {
    source?.close();
  }
}

/** One line about an error (a connection's AggregateError has no message of its own). */
function messageOf(err: unknown): string {
  const e = err as { message?: string; code?: string; errors?: unknown[] };
  const text = e.message || e.code || (e.errors?.[0] !== undefined ? messageOf(e.errors[0]) : '');
  return (text || String(err)).replace(/\s+/g, ' ');
}

function readArgs(argv: readonly string[]): { from: string; to: string } {
  // node's parseArgs, strict, with the options of the table above: --from and --to
  const { values } = parseArgs({
    args: [...argv],
    options: Object.fromEntries(
      Object.values(MIGRATE_STORE_ARGS).map((a) => [a.flag.slice(2), { type: 'string' as const }]),
    ),
    strict: true,
    allowPositionals: false,
  });
  const { from, to } = values as { from?: string; to?: string };
  if (from === undefined || from === '') throw new Error('--from is required');
  if (to === undefined || to === '') throw new Error('--to is required');
  if (!isPostgresUrl(to)) throw new Error('--to must be a postgres:// or postgresql:// URL');
  return { from, to };
}
