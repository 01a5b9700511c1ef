/**
 * A real systemd-journald for tests, in namespace mode: `systemd-journald NAME` listens on
 * /run/systemd/journal.NAME/socket and stores under /var/log/journal/<machine-id>.NAME. Read
 * back with journalctl --namespace. Stopped by pid; its journal files are removed.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { UnixDgram } from '../../src/journald/unix-dgram.js';
import { JournalWriter } from '../../src/journald/writer.js';

export const JOURNALD = '/lib/systemd/systemd-journald';

export interface TestJournal {
  readonly namespace: string;
  readonly socket: string;
  /** Entries of this namespace as journalctl -o json --all prints them (optionally matched). */
  read(...matches: string[]): Record<string, unknown>[];
  /**
   * The first entry matching `matches`, as soon as journald has it: `journalctl -f` from the
   * start of the journal, stopped (by its pid) once it printed one.
   */
  next(...matches: string[]): Promise<Record<string, unknown>>;
  /**
   * Until journald has stored every entry sent to it so far: it reads its socket in order, so
   * once a marker sent now (from a socket of its own) is in the journal, so is all before it.
   */
  settled(): Promise<void>;
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
      `${JOURNALD} is missing: install the systemd package (npm test does, through test/setup.sh) to run the journald tests`,
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
    const deadline = Date.now() + 10_000; // generous: it only bounds a failing start
    // Until it takes connections: a restarted journald binds a new socket where the old one's
    // file still is, so the file being there says nothing.
    while (!connectable(socket)) {
      if (Date.now() > deadline || c.exitCode !== null)
        throw new Error(`journald ${namespace} did not start`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const next = (...matches: string[]) => nextEntry(namespace, matches);
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
    next,
    settled: async () => {
      const marker = randomUUID();
      const w = new JournalWriter({ socketPath: socket });
      w.write({ MESSAGE: 'marker', SYSLOG_IDENTIFIER: 'agw-test-marker', AGW_MARKER: marker });
      await w.flush();
      w.close();
      await next(`AGW_MARKER=${marker}`);
    },
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

function connectable(socket: string): boolean {
  if (!existsSync(socket)) return false;
  const probe = new UnixDgram();
  try {
    probe.connect(socket);
    return true;
  } catch {
    return false;
  } finally {
    probe.close();
  }
}

function nextEntry(namespace: string, matches: string[]): Promise<Record<string, unknown>> {
  const follow = spawn(
    'journalctl',
    [`--namespace=${namespace}`, '-f', '--no-tail', '-o', 'json', '--all', ...matches],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return new Promise((resolve, reject) => {
    // a generous bound, only so that a missing entry fails with its name, not a test timeout
    const timer = setTimeout(() => {
      follow.kill('SIGTERM');
      reject(new Error(`no journal entry ${matches.join(' ')} within 20 s`));
    }, 20_000);
    createInterface({ input: follow.stdout! }).on('line', (line) => {
      if (!line.startsWith('{')) return;
      clearTimeout(timer);
      follow.kill('SIGTERM');
      resolve(JSON.parse(line) as Record<string, unknown>);
    });
    follow.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`journalctl -f exited (${code ?? signal}) before ${matches.join(' ')}`));
    });
  });
}
