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
import { AdapterSettingsSchema, storeOptions } from '../../src/adapter/settings.js';
import { compileTopology } from '../../src/adapter/topology.js';
import { openStore } from '../../src/store/open.js';
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
  const compiled = compileTopology(topology);
  const adapter = await startAdapter({
    settings,
    topology: compiled,
    store: openStore(settings.db, storeOptions(settings, compiled.alertsTo)),
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

/** Starts `agent-gateway adapter` as a child process and waits until it is ready. */
export function spawnAdapter(
  args: string[],
  env: Record<string, string> = {},
): Promise<ChildAdapter> {
  return spawnCli('adapter', args, env, (msg) => msg.startsWith('adapter ready'));
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
