/**
 * `agent-gateway COMMAND --help`: rendered from the declarations the command parses with, never
 * from a copy: its own flags (args.ts) and its settings (the SettingSpec tables of
 * adapter/settings.ts, sidecar/settings.ts, cli/settings.ts), with each setting's variable, flag
 * and default, and "required" where the command's schema refuses it unset. Plain text within 100
 * columns, for a terminal and for a pager.
 */
import { z } from 'zod';
import { flagFor, type SettingSpec } from '../settings.js';
import type { ArgSpec } from './args.js';

/** The widest line --help prints. */
export const HELP_COLUMNS = 100;

/** What one command's --help says, besides its name and one-line summary (main.ts). */
export interface CommandHelp {
  /** The word that follows its name, before any flag: audit's `verify`. */
  readonly subcommand?: string;
  /** Its positional arguments, as the usage line shows them after the flags: `MESSAGE`, `ID`. */
  readonly positionals?: string;
  /** What it does and how it ends (exit codes): prose, wrapped to HELP_COLUMNS. */
  readonly about: string;
  /** Its own flags: what it parses with takeArgs. */
  readonly args?: Record<string, ArgSpec>;
  /** Its settings: what it reads with readSettings. */
  readonly settings?: Record<string, SettingSpec>;
  /** The schema the settings are parsed with: a setting it refuses unset shows as required. */
  readonly schema?: z.ZodType;
  /** Variables other than AGW_* it reads, a sentence (OTEL_*, POD_NAME). */
  readonly otherEnv?: string;
}

/** Where every setting's meaning is written down. */
const SETTINGS_DOC = 'docs/reference/configuration.md';

/**
 * `usage: agent-gateway <name> ...`, from its declarations: its flags (brackets unless required),
 * its settings' flags (each, when there are three at most), its positionals.
 */
export function usageLine(name: string, h: CommandHelp): string {
  const usage = [`usage: agent-gateway ${name}`];
  if (h.subcommand !== undefined) usage.push(h.subcommand);
  for (const a of Object.values(h.args ?? {})) {
    const one = a.value === undefined ? a.flag : `${a.flag} ${a.value}`;
    usage.push(a.required === true ? one : `[${one}]${a.repeat === true ? '...' : ''}`);
  }
  const settings = Object.values(h.settings ?? {});
  if (settings.length > 3) usage.push('[--setting VALUE]...');
  else for (const s of settings) usage.push(`[${s.flag ?? flagFor(s.env)} VALUE]`);
  if (h.positionals !== undefined) usage.push(h.positionals);
  return usage.join(' ');
}

/** The whole --help text of `agent-gateway <name>`, ending with a newline. */
export function renderHelp(name: string, summary: string, h: CommandHelp): string {
  const args = Object.values(h.args ?? {});
  const settings = Object.entries(h.settings ?? {});
  const [first, ...more] = wrap(usageLine(name, h), HELP_COLUMNS - 9);
  const out = [first!, ...more.map((l) => `         ${l}`), ''];
  out.push(...wrap(`${summary[0]?.toUpperCase() ?? ''}${summary.slice(1)}. ${h.about}`), '');
  if (args.length > 0) {
    out.push('flags:');
    out.push(
      ...table(
        args.map((a) => [
          a.value === undefined ? a.flag : `${a.flag} ${a.value}`,
          a.default === undefined ? a.doc : `${a.doc} (default ${a.default})`,
        ]),
      ),
      '',
    );
  }
  if (settings.length > 0) {
    const required = requiredKeys(h.schema);
    out.push('settings: an AGW_* variable, or its flag (a flag wins over its variable):');
    out.push(
      ...table([
        ['flag', 'variable', 'default'],
        ...settings.map(([key, s]) => [
          s.flag ?? flagFor(s.env),
          s.env,
          s.default ?? (required.has(key) ? '(required)' : '(none)'),
        ]),
      ]),
    );
    out.push('', ...wrap(`What each setting means: ${SETTINGS_DOC}.`), '');
  }
  if (h.otherEnv !== undefined) out.push(...wrap(`Also read: ${h.otherEnv}`), '');
  return `${out.join('\n').trimEnd()}\n`;
}

/** The usage of the program: every command with its summary. */
export function renderCommands(commands: Record<string, { summary: string }>): string {
  const out = ['usage: agent-gateway <command> [flags]', '', 'commands:'];
  out.push(...table(Object.entries(commands).map(([name, c]) => [name, c.summary])));
  out.push(
    '',
    ...wrap(
      "`agent-gateway <command> --help` lists a command's flags and the AGW_* settings it reads; " +
        `${SETTINGS_DOC} says what each means.`,
    ),
  );
  return `${out.join('\n')}\n`;
}

/**
 * The settings the schema refuses to leave unset (no default, not optional): AGW_TOPOLOGY of the
 * adapter, AGW_AGENT_ID of the sidecar. A schema whose shape cannot be seen shows none.
 */
function requiredKeys(schema: z.ZodType | undefined): Set<string> {
  let s: unknown = schema;
  while (s instanceof z.ZodPipe) s = s.in;
  if (!(s instanceof z.ZodObject)) return new Set();
  const shape = s.shape as Record<string, z.ZodType>;
  return new Set(Object.keys(shape).filter((k) => !shape[k]!.safeParse(undefined).success));
}

/**
 * Rows in columns two spaces apart, indented by two. The last column is wrapped to what is left
 * of HELP_COLUMNS; when even one of its words does not fit there, it goes on the lines below,
 * indented by six.
 */
function table(rows: string[][]): string[] {
  const n = Math.max(...rows.map((r) => r.length));
  const widths = Array.from({ length: n - 1 }, (_, i) =>
    Math.max(...rows.map((r) => (r[i] ?? '').length)),
  );
  const lead = widths.reduce((sum, w) => sum + w + 2, 2);
  const out: string[] = [];
  for (const r of rows) {
    const head = `  ${r
      .slice(0, -1)
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')}  `;
    const lines = wrap(r.at(-1) ?? '', HELP_COLUMNS - lead);
    if (lines.every((l) => l.length <= HELP_COLUMNS - lead)) {
      out.push(
        (head + (lines[0] ?? '')).trimEnd(),
        ...lines.slice(1).map((l) => ' '.repeat(lead) + l),
      );
    } else {
      out.push(head.trimEnd(), ...wrap(r.at(-1)!, HELP_COLUMNS - 6).map((l) => `      ${l}`));
    }
  }
  return out;
}

/** Words to lines of at most `width` (a longer word stays whole, on a line of its own). */
function wrap(text: string, width = HELP_COLUMNS): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/).filter((w) => w !== '')) {
    const next = line === '' ? word : `${line} ${word}`;
    if (next.length > width && line !== '') {
      lines.push(line);
      line = word;
    } else line = next;
  }
  if (line !== '') lines.push(line);
  return lines;
}
