/**
 * A command's arguments that are not settings (emergency's --reason, watch's --since, wait-ready's
 * --url), declared once: each command's table is what it parses and what its `--help` prints
 * (help.ts), so the two cannot drift. Settings (AGW_* variables and the flags spelled from them)
 * are read by settings.ts; `takeArgs` takes a command's own flags out of argv first and leaves
 * the rest to it.
 */
import { SettingsError } from '../settings.js';

/** A flag that is an argument of one command, not a setting. */
export interface ArgSpec {
  /** The flag, `--` and lower case: `--reason`. */
  readonly flag: string;
  /** What its value is called in the usage line (`R`, `URL`); none: a switch, no value. */
  readonly value?: string;
  /** The usage line shows it without brackets; the command itself refuses it missing. */
  readonly required?: boolean;
  /** May be given more than once: every value kept, in order. */
  readonly repeat?: boolean;
  /** Its default, as a user would write it, for --help. */
  readonly default?: string;
  /** One line for --help: what it is. */
  readonly doc: string;
}

type ValueOf<A extends ArgSpec> = A extends { readonly repeat: true }
  ? string[]
  : A extends { readonly value: string }
    ? string
    : boolean;

/** What `takeArgs` found: each flag given, by its key in the table. */
export type ArgValues<S extends Record<string, ArgSpec>> = {
  -readonly [K in keyof S]?: ValueOf<S[K]>;
};

/**
 * Takes the flags of `specs` out of `argv` (`--flag VALUE` or `--flag=VALUE`; a switch alone) and
 * returns them with the rest of argv, in order, for the settings and the positionals. A value is
 * the next argument whatever it looks like, as for settings. A flag without its value, a value
 * given to a switch, is a SettingsError (exit 2).
 */
export function takeArgs<S extends Record<string, ArgSpec>>(
  argv: readonly string[],
  specs: S,
): { args: ArgValues<S>; rest: string[] } {
  const byFlag = new Map(Object.entries(specs).map(([key, a]) => [a.flag, key]));
  const args: Record<string, string | string[] | boolean> = {};
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const eq = a.indexOf('=');
    const flag = a.startsWith('--') && eq > 0 ? a.slice(0, eq) : a;
    const key = byFlag.get(flag);
    if (key === undefined) {
      rest.push(a);
      continue;
    }
    const spec = specs[key]!;
    if (spec.value === undefined) {
      if (flag !== a) throw new SettingsError(`${flag}: takes no value`);
      args[key] = true;
      continue;
    }
    const value = flag === a ? argv[++i] : a.slice(eq + 1);
    if (value === undefined) throw new SettingsError(`${flag}: needs a value`);
    if (spec.repeat === true) args[key] = [...((args[key] as string[] | undefined) ?? []), value];
    else args[key] = value; // the last one wins, as for a setting's flag
  }
  return { args: args as ArgValues<S>, rest };
}

/** The flags of `specs` as a sentence: "--url, --timeout and --insecure". */
export function flagList(specs: Record<string, ArgSpec>): string {
  const flags = Object.values(specs).map((a) => a.flag);
  return flags.length < 2 ? flags.join('') : `${flags.slice(0, -1).join(', ')} and ${flags.at(-1)}`;
}
