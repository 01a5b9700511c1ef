/**
 * `agent-gateway emergency --reason R MESSAGE`: writes one priority=CRIT journald entry to
 * AGW_JOURNAL_SOCKET as AGW_AGENT_ID, bypassing the adapter. Exit 0 once journald took it; 1 with
 * a clear line if it could not (no socket: the entry went to stderr as <2>, which conmon and
 * journald's stdout stream still read as CRIT, but this command cannot know that anyone did).
 * A message longer than 4 KiB is cut, with a marker (the caps of src/journald/emergency.ts),
 * and a line on stderr says so. A reason the gateway writes itself (dead_letter, integrity, ...)
 * is written as manual, the one asked for in AGW_REQUESTED_REASON; a line on stderr says so.
 */
import { z } from 'zod';
import { EMERGENCY_DEFAULTS, Emergencies } from '../journald/emergency.js';
import { JournalWriter } from '../journald/writer.js';
import { EMERGENCY_SETTINGS, readSettings, SettingsError } from './settings.js';

const Schema = z.strictObject({
  journalSocket: z.string().min(1, 'must not be empty'),
  agentId: z.string({ error: 'is required: the agent this emergency speaks for' }).min(1),
});

export async function runEmergency(
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<number> {
  const rest: string[] = [];
  let reason: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--reason') reason = argv[++i];
    else if (a.startsWith('--reason=')) reason = a.slice(9);
    else rest.push(a);
  }
  const { settings, positionals } = readSettings(EMERGENCY_SETTINGS, Schema, rest, env);
  if (reason === undefined || !/^[a-z][a-z0-9_]{0,63}$/.test(reason)) {
    throw new SettingsError(
      '--reason: needs a short reason in lower case (manual, or one of your own such as gateway_down)',
    );
  }
  const message = positionals.join(' ').trim();
  if (message === '') throw new SettingsError('MESSAGE: say what is wrong, as the last argument');
  const writer = new JournalWriter({ socketPath: settings.journalSocket });
  const emergencies = new Emergencies(writer, {
    agentId: settings.agentId,
    pod: env.POD_NAME,
    namespace: env.POD_NAMESPACE,
  });
  const result = emergencies.tryRaise({ reason, message }, { explicit: true });
  await writer.flush();
  writer.close();
  if (result.written && result.clipped) {
    process.stderr.write(
      `agent-gateway emergency: the message was cut to ${EMERGENCY_DEFAULTS.maxMessageBytes} bytes (AGW_TRUNCATED says how long it was)\n`,
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
