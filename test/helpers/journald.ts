/**
 * A real systemd-journald for tests, in namespace mode: `systemd-journald NAME` listens on
 * /run/systemd/journal.NAME/socket and stores under /var/log/journal/<machine-id>.NAME. Read
 * back with journalctl --namespace. Stopped by pid; its journal files are removed.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

export const JOURNALD = '/lib/systemd/systemd-journald';

export interface TestJournal {
  readonly namespace: string;
  readonly socket: string;
  /** Entries of this namespace as journalctl -o json --all prints them (optionally matched). */
  read(...matches: string[]): Record<string, unknown>[];
  /** Stops journald (SIGTERM, by pid) and waits until it has exited. */
  stop(): Promise<void>;
  /** Starts it again on the same namespace. */
  start(): Promise<void>;
  /** SIGSTOP / SIGCONT: its socket stays but nobody reads it (a busy journald). */
  pause(): void;
  resume(): void;
  /** Stops it and removes its journal files. */
  destroy(): Promise<void>;
}

export async function startJournal(): Promise<TestJournal> {
  if (!existsSync(JOURNALD)) {
    throw new Error(
      `${JOURNALD} is missing: install the systemd package (.ci/run does) to run the journald tests`,
    );
  }
  const namespace = `agwtest${process.pid}x${Math.floor(Math.random() * 1e6)}`;
  const socket = `/run/systemd/journal.${namespace}/socket`;
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();

  const start = async () => {
    const c = spawn(JOURNALD, [namespace], { stdio: 'ignore' });
    child = c;
    exited = new Promise((resolve) => c.once('exit', () => resolve()));
    const deadline = Date.now() + 10_000;
    // journald creates its socket when it is ready to take entries
    while (!existsSync(socket)) {
      if (Date.now() > deadline || c.exitCode !== null)
        throw new Error(`journald ${namespace} did not start`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const stop = async () => {
    if (child !== undefined && child.exitCode === null) {
      child.kill('SIGCONT');
      child.kill('SIGTERM');
      await exited;
    }
    child = undefined;
  };
  await start();
  return {
    namespace,
    socket,
    read: (...matches) =>
      execFileSync(
        'journalctl',
        [`--namespace=${namespace}`, '-o', 'json', '--all', '--no-pager', ...matches],
        {
          encoding: 'utf8',
          maxBuffer: 512 * 1024 * 1024,
        },
      )
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>),
    stop,
    start,
    pause: () => child?.kill('SIGSTOP'),
    resume: () => child?.kill('SIGCONT'),
    destroy: async () => {
      await stop();
      const base = '/var/log/journal';
      if (existsSync(base)) {
        for (const d of readdirSync(base))
          if (d.endsWith(`.${namespace}`)) rmSync(join(base, d), { recursive: true, force: true });
      }
      rmSync(`/run/systemd/journal.${namespace}`, { recursive: true, force: true });
    },
  };
}

/** journalctl prints a value that is not valid text as an array of byte values. */
export function bytesOf(v: unknown): Buffer {
  return Array.isArray(v) ? Buffer.from(v as number[]) : Buffer.from(String(v), 'utf8');
}
