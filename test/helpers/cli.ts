/**
 * Real child processes of the built CLI (dist/), for crash, shutdown and end-to-end tests: each
 * is started with its own environment and stopped by its pid by the test that started it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

/** A running child process of the CLI. */
export interface ChildProcessOfCli {
  child: ChildProcess;
  pid: number;
  url: string;
  /** Resolves when the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Its stdout lines and stderr chunks, for failure messages. */
  lines: string[];
}
export type ChildAdapter = ChildProcessOfCli;
export type ChildSidecar = ChildProcessOfCli;

/**
 * Starts `agent-gateway <command>` and resolves once a JSON log line with a `url` matches
 * `ready`; rejects (and kills it) if it exits first or is not ready within 15 s.
 */
function spawnCli(
  command: string,
  args: string[],
  env: Record<string, string>,
  ready: (msg: string) => boolean,
): Promise<ChildProcessOfCli> {
  const child = spawn(process.execPath, [CLI, command, '--listen', '127.0.0.1:0', ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  child.stderr!.on('data', (d: Buffer) => lines.push(d.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${command} not ready within 15 s:\n${lines.join('\n')}`));
    }, 15_000);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      lines.push(line);
      const entry = JSON.parse(line) as { msg?: string; url?: string };
      if (entry.msg !== undefined && ready(entry.msg) && entry.url) {
        clearTimeout(timer);
        resolve({ child, pid: child.pid!, url: entry.url, exited, lines });
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited (${code ?? signal}) before ready:\n${lines.join('\n')}`));
    });
  });
}

/**
 * Starts `agent-gateway adapter` as a child process and waits until it is ready. Its send rate
 * is off (AGW_SEND_RATE=0) unless `env` or a `--send-rate` flag sets it: these tests send
 * faster than the default allows, and are not about rates.
 */
export function spawnAdapter(
  args: string[],
  env: Record<string, string> = {},
): Promise<ChildAdapter> {
  return spawnCli('adapter', args, { AGW_SEND_RATE: '0', ...env }, (msg) =>
    msg.startsWith('adapter ready'),
  );
}

/** Starts `agent-gateway sidecar` for an agent as a child process; resolves once it listens. */
export function spawnSidecar(
  env: Record<string, string>,
  args: string[] = [],
): Promise<ChildSidecar> {
  return spawnCli('sidecar', args, env, (msg) => msg.includes('listening on'));
}

/** Runs the CLI to completion and returns its exit code and output. */
export function runCli(args: string[], env: Record<string, string> = {}) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}
