/**
 * A sidecar for the credential tests, in-process, from AGW_* variables read as the program reads
 * them (AGW_ADAPTER_URL, AGW_AGENT_TOKEN_FILE, AGW_ADAPTER_CA, ...), its credential files looked
 * at every 20 ms.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { readSettings } from '../../src/cli/settings.js';
import { Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { type Sidecar, startSidecar } from '../../src/sidecar/server.js';
import { SIDECAR_SETTINGS, SidecarSettingsSchema } from '../../src/sidecar/settings.js';

export interface RunningSidecar {
  readonly sidecar: Sidecar;
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * A sidecar for `agent` from AGW_* variables (AGW_ADAPTER_URL, AGW_AGENT_TOKEN_FILE,
 * AGW_ADAPTER_CA, ...), read as the program reads them, its outbox in `dir`. The credential
 * files are looked at every 20 ms. Does not wait for the start gate.
 */
export async function startEnvSidecar(
  agent: string,
  dir: string,
  env: Record<string, string>,
  logger: Logger,
): Promise<RunningSidecar> {
  const { settings } = readSettings(SIDECAR_SETTINGS, SidecarSettingsSchema, [], {
    AGW_AGENT_ID: agent,
    AGW_LISTEN: '127.0.0.1:0',
    AGW_OUTBOX: join(dir, `${agent}-${randomUUID()}.db`),
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal.sock'),
    AGW_SHUTDOWN_GRACE_MS: '0',
    AGW_BREAKER_BASE_MS: '50',
    AGW_BREAKER_MAX_MS: '200',
    ...env,
  });
  const writer = new JournalWriter({ socketPath: settings.journalSocket, stderr: { write() {} } });
  const sidecar = await startSidecar({
    settings,
    logger,
    emergencies: new Emergencies(writer, { agentId: agent }),
    breaker: { baseMs: 50, maxMs: 200 },
    credentialWatch: { intervalMs: 20, settleMs: 50 },
  });
  return {
    sidecar,
    url: sidecar.url,
    stop: async () => {
      await sidecar.close();
      writer.close();
    },
  };
}
