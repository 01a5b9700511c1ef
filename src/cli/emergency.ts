/**
 * `agent-gateway emergency --reason R MESSAGE`: writes one priority=CRIT journald entry to
 * AGW_JOURNAL_SOCKET as AGW_AGENT_ID, bypassing the adapter. Exit 0 once journald took it; 1 with
 * a clear line if it could not (no socket: the entry went to stderr as <2>, which conmon and
 * journald's stdout stream still read as CRIT, but this command cannot know that anyone did).
 * A message longer than 4 KiB is cut, with a marker (the caps of src/journald/emergency.ts),
 * and a line on stderr says so. A reason the gateway writes itself (dead_letter, integrity, ...)
 * is written as manual, the one asked for in AGW_REQUESTED_REASON; a line on stderr says so.
 * `--field NAME=VALUE` (repeatable) adds a field of the caller's own (a ticket, a runbook) that
 * `agent-gateway watch` prints with the entry; a name the gateway writes itself (AGW_*, MESSAGE,
 * PRIORITY, ...) is dropped, and a line on stderr says so.
 */
import { z } from 'zod';
import { EMERGENCY_DEFAULTS, Emergencies } from '../journald/emergency.js';
import { JournalWriter } from '../journald/writer.js';
import { type ArgSpec, takeArgs } from './args.js';
import type { CommandHelp } from './help.js';
import { EMERGENCY_SETTINGS, readSettings, SettingsError } from './settings.js';

const Schema = z.strictObject({
  journalSocket: z.string().min(1, 'must not be empty'),
  agentId: z.string({ error: 'is required: the agent this emergency speaks for' }).min(1),
});

/** Its flags (arguments, not settings): what it parses, and what --help lists. */
export const EMERGENCY_ARGS = {
  reason: {
    flag: '--reason',
    value: 'R',
    required: true,
    doc: 'lower case, at most 64: manual, or one of your own such as gateway_down (AGW_REASON)',
  },
  field: {
    flag: '--field',
    value: 'NAME=VALUE',
    repeat: true,
    doc: 'a field of your own on the entry (TICKET=T-12); watch prints it with the entry',
  },
} as const satisfies Record<string, ArgSpec>;

export const HELP: CommandHelp = {
  positionals: 'MESSAGE',
  about:
    'MESSAGE (the rest of the line) says what is wrong; the entry carries PRIORITY=2, ' +
    'MESSAGE_ID=80911d6a6b994fc880b96a0641d4e224, AGW_AGENT_ID and AGW_REASON. Exit 0 once ' +
    'journald took it; 1 if it could not (the entry then went to stderr as <2>...); 2 for bad ' +
    'arguments.',
  args: EMERGENCY_ARGS,
  settings: EMERGENCY_SETTINGS,
  schema: Schema,
  otherEnv: "POD_NAME and POD_NAMESPACE (the entry's AGW_POD and AGW_NAMESPACE, when set).",
};

export async function runEmergency(
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<number> {
  const { args, rest } = takeArgs(argv, EMERGENCY_ARGS);
  const { reason } = args;
  const { settings, positionals } = readSettings(EMERGENCY_SETTINGS, Schema, rest, env);
  if (reason === undefined || !/^[a-z][a-z0-9_]{0,63}$/.test(reason)) {
    throw new SettingsError(
      '--reason: needs a short reason in lower case (manual, or one of your own such as gateway_down)',
    );
  }
  const fields: Record<string, string> = {};
  for (const f of args.field ?? []) {
    const eq = f.indexOf('=');
    if (eq < 1)
      throw new SettingsError(`--field: needs NAME=VALUE, such as TICKET=T-12; got "${f}"`);
    fields[f.slice(0, eq)] = f.slice(eq + 1);
  }
  const message = positionals.join(' ').trim();
  if (message === '') throw new SettingsError('MESSAGE: say what is wrong, as the last argument');
  const writer = new JournalWriter({ socketPath: settings.journalSocket });
  const emergencies = new Emergencies(writer, {
    agentId: settings.agentId,
    pod: env.POD_NAME,
    namespace: env.POD_NAMESPACE,
  });
  const result = emergencies.tryRaise({ reason, message, fields }, { explicit: true });
  await writer.flush();
  writer.close();
  if (result.written && result.clipped) {
    const d = EMERGENCY_DEFAULTS;
    process.stderr.write(
      `agent-gateway emergency: the entry was cut to journald's caps (MESSAGE ${d.maxMessageBytes} bytes, ${d.maxFields} fields, ${d.maxEntryBytes} bytes in all; a --field the gateway writes itself, AGW_* or MESSAGE, is dropped): AGW_TRUNCATED names what was cut, AGW_FIELDS_DROPPED counts what was dropped\n`,
    );
  }
  if (result.written && result.requestedReason !== undefined) {
    process.stderr.write(
      `agent-gateway emergency: ${result.requestedReason} is a reason the gateway writes itself; the entry says AGW_REASON=manual and AGW_REQUESTED_REASON=${result.requestedReason}\n`,
    );
  }
  if (writer.stats.sent === 1) return 0;
  process.stderr.write(
    `agent-gateway emergency: journald did not take the entry (no socket at ${settings.journalSocket}); it went to stderr only\n`,
  );
  return 1;
}
