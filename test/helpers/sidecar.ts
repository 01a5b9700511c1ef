/**
 * A sidecar for tests, in-process on port 0 with a temp outbox and no journald (child
 * processes of the CLI are in cli.ts).
 */
import { join } from 'node:path';
import { type Logger, pino } from 'pino';
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

/**
 * A sidecar for `agent` in front of the adapter at `adapterUrl`, once its start gate is open.
 * `listen`: AGW_LISTEN (default 127.0.0.1:0); `logger`: instead of a silent one.
 */
export async function startTestSidecar(
  agent: string,
  adapterUrl: string,
  opts: { listen?: string; logger?: Logger } = {},
): Promise<TestSidecar> {
  const { dir, cleanup } = tempDir('agw-sidecar-');
  const settings = SidecarSettingsSchema.parse({
    listen: opts.listen ?? '127.0.0.1:0',
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
    logger: opts.logger ?? pino({ level: 'silent' }),
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

/** A logger at debug whose lines (parsed) a test reads, and waits for. */
export function capturingLogger() {
  const lines: Record<string, unknown>[] = [];
  const waiting = new Set<() => void>();
  const logger = pino(
    { level: 'debug' },
    {
      write(line: string) {
        lines.push(JSON.parse(line) as Record<string, unknown>);
        for (const wake of [...waiting]) wake();
      },
    },
  );
  /** The first line that matches, once it has been written. */
  const line = (match: (l: Record<string, unknown>) => boolean) =>
    new Promise<Record<string, unknown>>((resolve) => {
      const check = () => {
        const found = lines.find(match);
        if (found === undefined) return;
        waiting.delete(check);
        resolve(found);
      };
      waiting.add(check);
      check();
    });
  return { logger, lines, line };
}
