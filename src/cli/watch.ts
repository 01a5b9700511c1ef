/**
 * `agent-gateway watch [--namespace NS] [--since T] [--forward URL]`: follows journald for the
 * gateway's CRIT entries and prints one JSON line each; SIGTERM or SIGINT stops it (exit 0).
 * With --forward, entries wait to be POSTed in a queue of at most 1,000 (the oldest waiting is
 * dropped past it); drops are reported on stderr, one line per burst, and again at exit, after
 * forwarding has had up to 10 s to send what waits (a second signal ends it at once).
 */
import { z } from 'zod';
import { watch } from '../journald/watch.js';
import { readSettings, SettingsError, WATCH_SETTINGS } from './settings.js';

const Schema = z.strictObject({ namespace: z.string().min(1).optional() });

export async function runWatch(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const rest: string[] = [];
  const args: { since?: string; forward?: string } = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const m = /^--(since|forward)(?:=(.*))?$/.exec(a);
    if (m === null) {
      rest.push(a);
      continue;
    }
    const value = m[2] ?? argv[++i];
    if (value === undefined) throw new SettingsError(`--${m[1]}: needs a value`);
    args[m[1] as 'since' | 'forward'] = value;
  }
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
