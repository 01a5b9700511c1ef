/**
 * `agent-gateway adapter`: reads the settings and the topology, starts the adapter, and stops
 * it on SIGTERM or SIGINT; SIGHUP reloads its credentials and TLS files. Exit 2 for a bad
 * setting, topology, TLS file or JWKS (one line on stderr), 1 when the store cannot be opened or
 * fails its integrity check.
 */

import { loadSecurity } from '../adapter/security.js';
import { startAdapter } from '../adapter/server.js';
import { ADAPTER_SETTINGS, AdapterSettingsSchema, storeOptions } from '../adapter/settings.js';
import { loadTopology } from '../adapter/topology.js';
import { Emergencies } from '../journald/emergency.js';
import { SdNotify } from '../journald/sd-notify.js';
import { JournalWriter } from '../journald/writer.js';
import { createLogger } from '../log.js';
import { openStore, shownDb } from '../store/open.js';
import type { Store } from '../store/store.js';
import { openTracing } from '../telemetry/tracing.js';
import type { CommandHelp } from './help.js';
import { readSettings, SettingsError } from './settings.js';

export const HELP: CommandHelp = {
  about:
    'Serves the agents (their sidecars) over HTTP from the topology file (agents, tokens, ' +
    'channels); SIGTERM or SIGINT stops it, SIGHUP re-reads its credentials and TLS files. ' +
    'Exit 2 for a bad setting, topology, TLS file or JWKS (one line on stderr); 1 when its ' +
    'store cannot be opened or fails its integrity check.',
  settings: ADAPTER_SETTINGS,
  schema: AdapterSettingsSchema,
  otherEnv:
    'OTEL_* (traces, only when set: OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...); ' +
    'POD_NAME and POD_NAMESPACE (on its CRIT entries); NOTIFY_SOCKET (systemd Type=notify).',
};

export async function runAdapter(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const { settings, positionals } = readSettings(
    ADAPTER_SETTINGS,
    AdapterSettingsSchema,
    argv,
    env,
  );
  if (positionals.length > 0) throw new SettingsError(`unexpected argument "${positionals[0]}"`);
  const topology = loadTopology(settings.topology, { allowDevTokens: settings.allowDevTokens });
  // TLS files and the JWKS: one that cannot be used is a bad setting (exit 2), told before the
  // store is opened
  const security = loadSecurity(settings, topology);
  // OTEL_* (CONTRACT.md, "Trace context"): a bad one is a bad setting, told before anything
  // else is opened; none, nothing loaded. A failing export is told in the log, made below.
  let warn = (_line: string) => {};
  const tracing = await openTracing('adapter', env, (line) => warn(line));
  const journal = new JournalWriter({ socketPath: settings.journalSocket });
  const logger = createLogger(
    'agent-gateway-adapter',
    settings.logLevel,
    settings.log === 'journald' ? journal : undefined,
  );
  warn = (line) => logger.warn(line);
  const emergencies = new Emergencies(journal, {
    agentId: 'adapter',
    pod: env.POD_NAME,
    namespace: env.POD_NAMESPACE,
  });
  const notify = new SdNotify(env);
  const finish = async (code: number) => {
    await tracing.shutdown().catch((err: unknown) => {
      logger.warn({ err }, 'the last spans could not be exported');
    });
    await journal.flush();
    journal.close();
    notify.close();
    return code;
  };
  let adapter: Awaited<ReturnType<typeof startAdapter>> | undefined;
  let store: Store;
  // SIGHUP: credentials (topology tokens, subjects, operators; the JWKS) and the TLS files are
  // re-read; what cannot be used is refused with a log line and the old stays. Taken from the
  // first moment (node's default for SIGHUP ends the process): one that comes while the adapter
  // starts is done once it has started, since the files may have changed after they were read.
  let stopping = false;
  let hupWhileStarting = false;
  const hup = () => {
    if (adapter === undefined) hupWhileStarting = true;
    else if (!stopping) adapter.reload('SIGHUP');
  };
  process.on('SIGHUP', hup);
  logger.debug('adapter starting: opening its store');
  try {
    // The composition root: the store is chosen here, from AGW_DB.
    store = await openStore(settings.db, storeOptions(settings, topology));
  } catch (err) {
    // A store that cannot be opened (a full or read-only volume, a file that is no database, a
    // schema newer than this adapter) stops every agent's traffic: the out-of-band channel says
    // so, as for a failed integrity check.
    const message = `adapter cannot start: its store cannot be opened: ${(err as Error).message}`;
    logger.fatal({ err, db: shownDb(settings.db) }, message);
    emergencies.raise({ reason: 'storage', message, fields: { AGW_DB: shownDb(settings.db) } });
    process.off('SIGHUP', hup);
    return finish(1);
  }
  try {
    adapter = await startAdapter({
      settings,
      topology,
      store,
      logger,
      emergencies,
      notify,
      tracing,
      security,
    });
  } catch (err) {
    logger.fatal({ err }, `adapter cannot start: ${(err as Error).message}`);
    process.off('SIGHUP', hup);
    return finish(1);
  }
  const running = adapter;
  if (hupWhileStarting) running.reload('SIGHUP');
  logger.info(
    { url: adapter.url, db: shownDb(settings.db), sync: settings.sync },
    `adapter listening on ${adapter.url}`,
  );

  const stopped = new Promise<number>((resolve) => {
    const stop = (signal: string) => {
      stopping = true;
      logger.info({ signal }, 'adapter stopping: intake closed, finishing commits in flight');
      running.close().then(
        () => resolve(finish(0)),
        (err: unknown) => {
          logger.error({ err }, 'adapter did not stop cleanly');
          resolve(finish(1));
        },
      );
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  void stopped.then(() => process.off('SIGHUP', hup));
  const failed = async (err: unknown): Promise<number> => {
    logger.fatal({ err }, `adapter store failed its integrity check: ${(err as Error).message}`);
    emergencies.raise({
      reason: 'integrity',
      message: `adapter store failed its integrity check: ${(err as Error).message}`,
    });
    if (stopping) return stopped.then(() => 1);
    await adapter.close();
    return finish(1);
  };
  try {
    await adapter.ready;
  } catch (err) {
    return failed(err);
  }
  logger.info(
    { url: adapter.url },
    'adapter ready: store open, first sweep done; its integrity check runs in the background',
  );
  // close() waits for the check, so this settles before a stop does.
  return adapter.integrity.then((ms) => {
    logger.info({ ms }, `the store's integrity check passed in ${ms} ms`);
    return stopped;
  }, failed);
}
