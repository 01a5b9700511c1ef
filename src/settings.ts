/**
 * The settings machinery below both programs: from the environment and flags, for every command. Each setting has an AGW_* variable
 * and a flag spelled from it (AGW_QUEUE_CAPACITY is --queue-capacity); flags win. Values go
 * through the program's zod schema into one frozen object; a bad or unknown one is a
 * SettingsError whose message is the one line the program prints before exit 2.
 */
import { z } from 'zod';

export class SettingsError extends Error {
  override name = 'SettingsError';
}

/** A setting: its variable, its default as the string a user would write, what it means. */
export interface SettingSpec {
  readonly env: string;
  readonly default?: string;
  /** The flag, when it is not the one spelled from env (watch's --namespace). */
  readonly flag?: string;
}

export function flagFor(env: string): string {
  return `--${env.replace(/^AGW_/, '').toLowerCase().replaceAll('_', '-')}`;
}

/**
 * Reads `specs` from env and argv and parses them with `schema`. Returns the frozen settings
 * and the positional arguments. `known` is every AGW_* variable of every program (the command
 * line assembles it from the programs' specs), so that a misspelling is caught wherever it is
 * set, even in a variable meant for another program.
 */
export function readSettings<S extends z.ZodType<unknown, Record<string, string>>>(
  specs: Record<string, SettingSpec>,
  schema: S,
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
  known: ReadonlySet<string>,
): { settings: Readonly<z.output<S>>; positionals: string[] } {
  for (const name of Object.keys(env)) {
    if (name.startsWith('AGW_') && !known.has(name)) {
      throw new SettingsError(`${name}: unknown setting${hint(name, [...known])}`);
    }
  }
  const flagOf = (s: SettingSpec) => s.flag ?? flagFor(s.env);
  const byFlag = new Map(Object.entries(specs).map(([key, s]) => [flagOf(s), key]));
  const raw: Record<string, string> = {};
  const source: Record<string, string> = {};
  for (const [key, s] of Object.entries(specs)) {
    const value = env[s.env];
    if (value !== undefined) {
      raw[key] = value;
      source[key] = s.env;
    } else if (s.default !== undefined) {
      raw[key] = s.default;
      source[key] = `${s.env} (default)`;
    }
  }
  const positionals: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    const key = byFlag.get(flag);
    if (key === undefined)
      throw new SettingsError(`${flag}: unknown flag${hint(flag, [...byFlag.keys()])}`);
    const value = eq < 0 ? argv[++i] : arg.slice(eq + 1);
    if (value === undefined) throw new SettingsError(`${flag}: needs a value`);
    raw[key] = value;
    source[key] = `${specs[key]!.env} (${flag})`;
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const key = String(issue.path[0] ?? '');
    const spec = specs[key];
    const name = source[key] ?? (spec ? `${spec.env} (${flagOf(spec)})` : key);
    const got = raw[key] === undefined ? 'it is not set' : `got "${raw[key]}"`;
    throw new SettingsError(`${name}: ${issue.message}; ${got}`);
  }
  return { settings: deepFreeze(parsed.data), positionals };
}

/** Frozen all the way down: `settings.listen.port` cannot be changed behind a reader's back. */
function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** An integer setting with its bounds. */
export function intSetting(min: number, max: number) {
  return z.string().transform((s, ctx) => {
    const n = Number(s.trim());
    if (s.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
      ctx.addIssue({ code: 'custom', message: `must be an integer from ${min} to ${max}` });
      return z.NEVER;
    }
    return n;
  });
}

/** host:port, with [v6] in brackets; port 0 asks the system for a free one. */
export const listenSetting = z.string().transform((s, ctx) => {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]+):(\d{1,5})$/.exec(s.trim());
  const port = Number(m?.[2]);
  if (m === null || port > 65535) {
    ctx.addIssue({
      code: 'custom',
      message: 'must be host:port, such as 127.0.0.1:8080 or [::1]:8080',
    });
    return z.NEVER;
  }
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
});

function hint(name: string, known: string[]): string {
  let best: string | undefined;
  let bestDistance = 3;
  for (const k of known) {
    const d = distance(name, k);
    if (d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  return best === undefined ? '' : ` (did you mean ${best}?)`;
}

/** Levenshtein distance, for "did you mean". */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(
        prev[j]! + 1,
        cur[j - 1]! + 1,
        prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    prev = cur;
  }
  return prev[b.length]!;
}
