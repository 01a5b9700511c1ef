/**
 * Adapters for tests: in-process on port 0 with a temp database, or a real child process of the
 * built CLI (dist/) for crash and shutdown tests.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { type Adapter, startAdapter } from '../../src/adapter/server.js';
import { AdapterSettingsSchema } from '../../src/adapter/settings.js';
import { compileTopology } from '../../src/adapter/topology.js';
import {
  type TopologyObject,
  tempDir,
  tokenOf,
  topologyObject,
  writeTopology,
} from './topology.js';

export const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

export interface TestAdapter {
  adapter: Adapter;
  url: string;
  db: string;
  dir: string;
  stop: () => Promise<void>;
}

export async function startTestAdapter(
  overrides: Record<string, string> = {},
  opts: { now?: () => number; topology?: TopologyObject } = {},
): Promise<TestAdapter> {
  const { topology = topologyObject(), ...rest } = opts;
  const { dir, cleanup } = tempDir();
  const db = join(dir, 'adapter.db');
  const settings = AdapterSettingsSchema.parse({
    listen: '127.0.0.1:0',
    topology: writeTopology(dir, topology),
    db,
    sync: 'full',
    maxMessageBytes: '262144',
    queueCapacity: '500',
    leaseMs: '30000',
    maxRetries: '3',
    retryBaseMs: '1000',
    retentionDays: '30',
    retentionKeepKinds: 'task/request,policy/update',
    log: 'stdout',
    journalSocket: '/nonexistent/agw-test-journal.sock',
    logLevel: 'silent',
    ...overrides,
  });
  const adapter = await startAdapter({
    settings,
    topology: compileTopology(topology),
    logger: pino({ level: 'silent' }),
    ...rest,
  });
  await adapter.ready;
  return {
    adapter,
    url: adapter.url,
    db,
    dir,
    stop: async () => {
      await adapter.close();
      cleanup();
    },
  };
}

export interface ChildAdapter {
  child: ChildProcess;
  pid: number;
  url: string;
  /** Resolves when the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  lines: string[];
}

/** Starts `agent-gateway adapter` as a child process and waits until it is ready. */
export function spawnAdapter(
  args: string[],
  env: Record<string, string> = {},
): Promise<ChildAdapter> {
  const child = spawn(process.execPath, [CLI, 'adapter', '--listen', '127.0.0.1:0', ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  child.stderr!.on('data', (d: Buffer) => lines.push(d.toString()));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      lines.push(line);
      const entry = JSON.parse(line) as { msg?: string; url?: string };
      if (entry.msg?.startsWith('adapter ready') && entry.url) {
        clearTimeout(timer);
        resolve({ child, pid: child.pid!, url: entry.url, exited, lines });
      }
    });
    exited.then(({ code, signal }) =>
      reject(new Error(`adapter exited (${code ?? signal}) before ready:\n${lines.join('\n')}`)),
    );
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`adapter not ready within 15 s:\n${lines.join('\n')}`));
    }, 15_000);
    exited.then(() => clearTimeout(timer));
  });
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

/** A JSON answer of any shape: tests index into it freely. */
// biome-ignore lint/suspicious/noExplicitAny: test bodies are checked by the assertions that read them
export type Json = any;

/** A JSON request with an agent's token. */
export async function call(
  url: string,
  method: string,
  path: string,
  opts: { agent?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: Json; headers: Headers }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...opts.headers };
  if (opts.agent !== undefined) headers.authorization = `Bearer ${tokenOf(opts.agent)}`;
  const res = await fetch(url + path, {
    method,
    headers,
    body: opts.raw ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body)),
  });
  const text = await res.text();
  let body: Json = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status: res.status, body, headers: res.headers };
}

export interface ChildSidecar {
  child: ChildProcess;
  url: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  lines: string[];
}

/** Starts `agent-gateway sidecar` for an agent as a child process; resolves once it listens. */
export function spawnSidecar(env: Record<string, string>): Promise<ChildSidecar> {
  const child = spawn(process.execPath, [CLI, 'sidecar', '--listen', '127.0.0.1:0'], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  child.stderr!.on('data', (d: Buffer) => lines.push(d.toString()));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      lines.push(line);
      const entry = JSON.parse(line) as { msg?: string; url?: string };
      if (entry.msg?.includes('listening on') && entry.url) {
        clearTimeout(timer);
        resolve({ child, url: entry.url, exited, lines });
      }
    });
    exited.then(({ code, signal }) =>
      reject(
        new Error(`sidecar exited (${code ?? signal}) before listening:\n${lines.join('\n')}`),
      ),
    );
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`sidecar not listening within 15 s:\n${lines.join('\n')}`));
    }, 15_000);
    exited.then(() => clearTimeout(timer));
  });
}
