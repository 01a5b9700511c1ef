/**
 * `agent-gateway sidecar`: reads the settings, starts the sidecar, stops it on SIGTERM or
 * SIGINT (one last drain within AGW_SHUTDOWN_GRACE_MS; the rest stays in the outbox).
 */

import { Emergencies } from '../journald/emergency.js';
import { JournalWriter } from '../journald/writer.js';
import { createLogger } from '../log.js';
import { SidecarEventMap } from '../sidecar/events.js';
import { startSidecar } from '../sidecar/server.js';
import { SIDECAR_SETTINGS, SidecarSettingsSchema } from '../sidecar/settings.js';
import { openTracing } from '../telemetry/tracing.js';
import type { CommandHelp } from './help.js';
import { readSettings, SettingsError } from './settings.js';

export const HELP: CommandHelp = {
  about:
    'Serves one agent on loopback: its sends go through a durable outbox to the adapter, its ' +
    'inbox, acks and emergencies through it. AGW_AGENT_TOKEN or AGW_AGENT_TOKEN_FILE is ' +
    'required. SIGTERM or SIGINT stops it after one last drain (AGW_SHUTDOWN_GRACE_MS); what ' +
    'is left stays in the outbox. Exit 2 for a bad setting or a token that is not the ' +
    "agent's.",
  settings: SIDECAR_SETTINGS,
  schema: SidecarSettingsSchema,
  otherEnv: 'OTEL_* (traces, only when set); POD_NAME and POD_NAMESPACE (on its CRIT entries).',
};

export async function runSidecar(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const { settings, positionals } = readSettings(
    SIDECAR_SETTINGS,
    SidecarSettingsSchema,
    argv,
    env,
  );
  if (positionals.length > 0) throw new SettingsError(`unexpected argument "${positionals[0]}"`);
  // OTEL_* (CONTRACT.md, "Trace context"): a bad one is a bad setting, told before anything
  // else is opened; none, nothing loaded. A failing export is told in the log, made below.
  let warn = (_line: string) => {};
  const tracing = await openTracing('sidecar', env, (line) => warn(line));
  const journal = new JournalWriter({ socketPath: settings.journalSocket });
  const logger = createLogger(
    'agent-gateway-sidecar',
    settings.logLevel,
    settings.log === 'journald' ? journal : undefined,
  );
  warn = (line) => logger.warn(line);
  const emergencies = new Emergencies(journal, {
    agentId: settings.agentId,
    pod: env.POD_NAME,
    namespace: env.POD_NAMESPACE,
  });
  let sidecar: Awaited<ReturnType<typeof startSidecar>>;
  const events = new SidecarEventMap();
  const fatalLine = new Promise<string>((resolve) => events.on('fatal', resolve));
  try {
    sidecar = await startSidecar({
      settings,
      logger,
      emergencies,
      events,
      breaker: { baseMs: settings.breakerBaseMs, maxMs: settings.breakerMaxMs },
      tracing,
    });
  } catch (err) {
    logger.fatal({ err }, `sidecar cannot start: ${(err as Error).message}`);
    journal.close();
    return 1;
  }
  logger.info(
    {
      url: sidecar.url,
      agent: settings.agentId,
      adapter: settings.adapterUrl,
      outbox: settings.outbox,
      // which files are re-read when they change (paths only)
      ...(settings.adapterTls === undefined ? {} : { tls: settings.adapterTls }),
      ...(settings.agentTokenFile === undefined ? {} : { token_file: settings.agentTokenFile }),
    },
    `sidecar for ${settings.agentId} listening on ${sidecar.url}`,
  );
  sidecar.gateOpen.then(() =>
    logger.info({ url: sidecar.url }, 'sidecar ready: the adapter answered /health'),
  );
  const code = await new Promise<number>((resolve) => {
    const stop = (signal: string) => {
      logger.info({ signal, queued: sidecar.outbox.depth }, 'sidecar stopping');
      sidecar.close().then(
        () => resolve(0),
        (err: unknown) => {
          logger.error({ err }, 'sidecar did not stop cleanly');
          resolve(1);
        },
      );
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
    // a start check failed (the token is not this agent's): one line, exit 2, as a bad setting
    fatalLine.then((line) => {
      process.stderr.write(`agent-gateway sidecar: ${line}\n`);
      sidecar.close().then(
        () => resolve(2),
        () => resolve(2),
      );
    });
  });
  await tracing.shutdown().catch((err: unknown) => {
    logger.warn({ err }, 'the last spans could not be exported');
  });
  await journal.flush();
  journal.close();
  return code;
}
