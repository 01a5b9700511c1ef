/**
 * A sidecar for tests, in-process on port 0 with a temp outbox and no journald (child
 * processes of the CLI are in cli.ts).
 */
import { join } from 'node:path';
import { pino } from 'pino';
import { Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { type Sidecar, startSidecar } from '../../src/sidecar/server.js';
import { SidecarSettingsSchema } from '../../src/sidecar/settings.js';
import { tempDir, tokenOf } from './topology.js';

export interface TestSidecar {
  sidecar: Sidecar;
  url: string;
  /** Closes the sidecar, then removes its folder. */
  stop: () => Promise<void>;
}

/** A sidecar for `agent` in front of the adapter at `adapterUrl`, once its start gate is open. */
export async function startTestSidecar(agent: string, adapterUrl: string): Promise<TestSidecar> {
  const { dir, cleanup } = tempDir('agw-sidecar-');
  const settings = SidecarSettingsSchema.parse({
    listen: '127.0.0.1:0',
    adapterUrl,
    agentId: agent,
    agentToken: tokenOf(agent),
    outbox: join(dir, 'outbox.db'),
    outboxCapacity: '1000',
    startupAlarmS: '60',
    shutdownGraceMs: '0',
    breakerBaseMs: '50',
    breakerMaxMs: '200',
    adapterConnectTimeoutMs: '2000',
    journalSocket: join(dir, 'no-journal.sock'),
    log: 'stdout',
    logLevel: 'silent',
  });
  const writer = new JournalWriter({ socketPath: settings.journalSocket, stderr: { write() {} } });
  const sidecar = await startSidecar({
    settings,
    logger: pino({ level: 'silent' }),
    emergencies: new Emergencies(writer, { agentId: agent }),
    breaker: { baseMs: 50, maxMs: 200 },
  });
  const stop = async () => {
    await sidecar.close();
    writer.close();
    cleanup();
  };
  try {
    await sidecar.gateOpen;
  } catch (err) {
    await stop();
    throw err;
  }
  return { sidecar, url: sidecar.url, stop };
}
