/**
 * The README's first commands work: `npm start`'s stack (examples/local-stack.mjs, after the
 * build) and then the quick start's curl lines, read from README.md itself, so this fails when
 * the README drifts; and the `try:` lines the stack prints. A send answered 201 delivered, the
 * inbox hands the message over, the ack answers 200 acked (a bare `curl -d` was a form post:
 * 415 not_json).
 *
 * The stack runs on free ports (STACK_ADAPTER_PORT=0, STACK_SIDECAR_PORT=0) and its files in a
 * temp folder (STACK_DATA), so it meets no other stack on this machine. The one change made to
 * the README's lines is their port: the README's are the stack's defaults (the first sidecar on
 * 7071, one per agent in examples/topology.yaml's order), each mapped to the same agent's
 * sidecar here. curl's status code is added by a config file of the test's (CURL_HOME), not by
 * changing the lines. Every process is stopped by its pid: the stack's, then any of its children
 * still there.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { parse } from 'yaml';
import { tempDir } from '../helpers/topology.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
/** The stack's default first sidecar port (examples/local-stack.mjs). */
const FIRST_SIDECAR_PORT = 7071;

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** The curl lines of the README's quick start: its sh block after "Send a message through". */
function quickStart(): string[] {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const from = readme.indexOf("Send a message through pm's sidecar");
  expect(from, 'the quick start in README.md').toBeGreaterThan(0);
  const block = /```sh\n([\s\S]*?)```/.exec(readme.slice(from));
  expect(block, 'its sh block').not.toBeNull();
  return block![1]!.split('\n').filter((l) => l.trim() !== '');
}

/** Runs one shell line as written; curl's config (CURL_HOME) appends the status code. */
function sh(line: string, curlHome: string): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    execFile(
      'bash',
      ['-c', line],
      { env: { PATH: process.env.PATH ?? '', CURL_HOME: curlHome, HOME: curlHome } },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`${line}: ${err.message}\n${stderr}`));
        const at = stdout.lastIndexOf('\n');
        const text = stdout.slice(0, at);
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {}
        resolve({ status: Number(stdout.slice(at + 1)), body });
      },
    );
  });
}

/** The pids of a process's children (Linux /proc), read while they run. */
function childrenOf(pid: number): number[] {
  return readdirSync(`/proc/${pid}/task`).flatMap((tid) =>
    readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8')
      .split(' ')
      .filter((p) => p.trim() !== '')
      .map(Number),
  );
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Starts the stack; resolves with its table (who → URL) and the `try:` lines it printed. */
async function startStack(data: string) {
  const child: ChildProcess = spawn(process.execPath, [join(root, 'examples/local-stack.mjs')], {
    env: {
      PATH: process.env.PATH ?? '',
      STACK_ADAPTER_PORT: '0',
      STACK_SIDECAR_PORT: '0',
      STACK_DATA: data,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const pid = child.pid!;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const output: string[] = [];
  child.stderr!.on('data', (d: Buffer) => output.push(d.toString()));
  let children: number[] = [];
  cleanups.push(async () => {
    if (alive(pid)) {
      children = childrenOf(pid);
      process.kill(pid, 'SIGTERM'); // it stops its children, then exits
      await exited;
    }
    for (const c of children) if (alive(c)) process.kill(c, 'SIGKILL');
  });
  const table = new Map<string, string>();
  const tries: string[] = [];
  await new Promise<void>((resolve, reject) => {
    exited.then(() => reject(new Error(`the stack exited:\n${output.join('')}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      output.push(line);
      const row = /^ {2}(adapter|sidecar \S+)\s+(http:\/\/\S+)$/.exec(line);
      if (row !== null) table.set(row[1]!, row[2]!);
      const cmd = /^\s+(?:try:\s+)?(curl .*)$/.exec(line);
      if (cmd !== null) tries.push(cmd[1]!);
      if (tries.length === 2) resolve();
    });
  });
  children = childrenOf(pid);
  return { table, tries };
}

it("runs the README's quick start as written against npm start's stack", async () => {
  const { dir, cleanup } = tempDir('agw-readme-');
  cleanups.push(cleanup);
  writeFileSync(join(dir, '.curlrc'), 'write-out = "\\n%{http_code}"\n');
  const agents = (
    parse(readFileSync(join(root, 'examples/topology.yaml'), 'utf8')) as {
      agents: { id: string }[];
    }
  ).agents.map((a) => a.id);
  const { table, tries } = await startStack(join(dir, 'data'));
  expect(table.size).toBe(1 + agents.length);

  // the README's ports, the stack's defaults, name the agents whose sidecars they are
  const portOf = (agent: string) => new URL(table.get(`sidecar ${agent}`)!).port;
  const lines = quickStart();
  expect(lines).toHaveLength(3);
  const readmeAgents = lines.map((l) => {
    const port = Number(/localhost:(\d+)/.exec(l)?.[1]);
    return agents[port - FIRST_SIDECAR_PORT];
  });
  expect(readmeAgents).toEqual(['pm', 'qa', 'qa']); // "through pm's sidecar ... through qa's"
  const here = lines.map((l, i) =>
    l.replace(/localhost:\d+/, `localhost:${portOf(readmeAgents[i]!)}`),
  );

  const sent = await sh(here[0]!, dir);
  expect(sent).toMatchObject({ status: 201, body: { status: 'delivered', channel: 'product' } });
  const inbox = await sh(here[1]!, dir);
  expect(inbox.status).toBe(200);
  const { deliveries } = inbox.body as { deliveries: { delivery_id: number; message: object }[] };
  expect(deliveries.map((d) => d.message)).toEqual([
    expect.objectContaining({
      message_id: (sent.body as { message_id: string }).message_id,
      sender: 'pm',
      kind: 'task/request',
    }),
  ]);
  // the README acks the delivery_id the inbox answers on a fresh stack
  const readmeIds = JSON.parse(/'(\{"delivery_ids".*?\})'/.exec(lines[2]!)![1]!).delivery_ids;
  expect(deliveries.map((d) => d.delivery_id)).toEqual(readmeIds);
  const acked = await sh(here[2]!, dir);
  expect(acked).toMatchObject({ status: 200, body: { acked: readmeIds } });

  // and the `try:` lines the stack prints, as printed: a send through pm's, qa's inbox
  expect(tries).toHaveLength(2);
  const trySent = await sh(tries[0]!, dir);
  expect(trySent).toMatchObject({ status: 201, body: { status: 'delivered' } });
  const tryInbox = await sh(tries[1]!, dir);
  expect(tryInbox.status).toBe(200);
  expect((tryInbox.body as { deliveries: { message: object }[] }).deliveries).toEqual([
    expect.objectContaining({
      message: expect.objectContaining({
        message_id: (trySent.body as { message_id: string }).message_id,
      }),
    }),
  ]);
}, 90_000);
