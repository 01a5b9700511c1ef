/**
 * `agent-gateway watch [--namespace NS] [--since T] [--forward URL]`: follows journald for the
 * gateway's CRIT entries and prints one JSON line each, with the AGW_* fields and any field the
 * emergency's caller added (`emergency --field`, POST /v1/emergency's `fields`); SIGTERM or
 * SIGINT stops it (exit 0).
 * With --forward, entries wait to be POSTed in a queue of at most 1,000 (the oldest waiting is
 * dropped past it); drops are reported on stderr, one line per burst, and again at exit, after
 * forwarding has had up to 10 s to send what waits (a second signal ends it at once).
 */
import { z } from 'zod';
import { watch } from '../journald/watch.js';
import { type ArgSpec, takeArgs } from './args.js';
import type { CommandHelp } from './help.js';
import { readSettings, SettingsError, WATCH_SETTINGS } from './settings.js';

const Schema = z.strictObject({ namespace: z.string().min(1).optional() });

/** Its flags (arguments, not settings): what it parses, and what --help lists. */
export const WATCH_ARGS = {
  since: {
    flag: '--since',
    value: 'T',
    doc: 'from this time, as journalctl takes it ("2026-11-29 20:00:00", -1h); default: from now',
  },
  forward: {
    flag: '--forward',
    value: 'URL',
    doc: 'also POST each entry to this http(s) URL as JSON, in order, with retries',
  },
} as const satisfies Record<string, ArgSpec>;

export const HELP: CommandHelp = {
  about:
    'Runs journalctl -f -p crit MESSAGE_ID=80911d6a6b994fc880b96a0641d4e224 and prints each ' +
    'entry as one JSON line: time, message, priority, identifier, its AGW_* fields and the ' +
    "caller's own (emergency --field). SIGTERM or SIGINT stops it, exit 0. Needs journalctl " +
    'and read access to the journal.',
  args: WATCH_ARGS,
  settings: WATCH_SETTINGS,
  schema: Schema,
};

export async function runWatch(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const { args, rest } = takeArgs(argv, WATCH_ARGS);
  const { settings, positionals } = readSettings(WATCH_SETTINGS, Schema, rest, env);
  if (positionals.length > 0) throw new SettingsError(`unexpected argument "${positionals[0]}"`);
  if (args.forward !== undefined && !/^https?:\/\//.test(args.forward)) {
    throw new SettingsError('--forward: must be an http:// or https:// URL');
  }
  const w = watch({
    namespace: settings.namespace,
    since: args.since,
    forward: args.forward,
    onEntry: (e) => process.stdout.write(`${JSON.stringify(e)}\n`),
    onError: (m) => process.stderr.write(`agent-gateway watch: ${m}\n`),
  });
  const stop = () => w.stop();
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  const code = await w.done;
  process.off('SIGTERM', stop);
  process.off('SIGINT', stop);
  return code;
}
