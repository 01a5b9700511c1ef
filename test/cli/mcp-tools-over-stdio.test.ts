/**
 * `agent-gateway mcp` with real processes: an adapter, two sidecars, and for each agent the
 * command started by the SDK's own StdioClientTransport, speaking to its sidecar over HTTP
 * (AGW_SIDECAR_URL). The same tools and checks as over the sidecar's /mcp
 * (test/sidecar/mcp-tools-over-http.test.ts); here also: stdout carries MCP messages only, a
 * sidecar that does not answer is a tool result, and bad settings stop the command.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import {
  type ChildAdapter,
  type ChildSidecar,
  CLI,
  runCli,
  spawnAdapter,
  spawnSidecar,
} from '../helpers/cli.js';
import type { Json } from '../helpers/http.js';
import {
  connectClient,
  expectContractTools,
  expectErrors,
  expectExchange,
  type McpSession,
  tool,
} from '../helpers/mcp.js';
import { tempDir, tokenOf, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-mcp-stdio-');
const topology = writeTopology(dir);
afterAll(cleanup);

/** Every process a test started, stopped by its pid after it; the shared ones after the file. */
const pids: number[] = [];
const shared: number[] = [];
const closing: (() => Promise<void>)[] = [];
const kill = (pid: number) => {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {} // already gone
};
afterEach(async () => {
  for (const close of closing.splice(0).reverse()) await close();
  for (const pid of pids.splice(0)) kill(pid);
});
afterAll(() => {
  for (const pid of shared.splice(0)) kill(pid);
});

async function adapterOn(db: string, port = 0, list = pids): Promise<ChildAdapter> {
  const a = await spawnAdapter([
    '--topology',
    topology,
    '--db',
    db,
    '--listen',
    `127.0.0.1:${port}`,
  ]);
  list.push(a.pid);
  return a;
}

async function sidecarFor(agent: string, adapterUrl: string, list = pids): Promise<ChildSidecar> {
  const s = await spawnSidecar({
    AGW_ADAPTER_URL: adapterUrl,
    AGW_AGENT_ID: agent,
    AGW_AGENT_TOKEN: tokenOf(agent),
    AGW_OUTBOX: join(dir, `outbox-${agent}-${randomUUID()}.db`),
    AGW_BREAKER_BASE_MS: '50',
    AGW_BREAKER_MAX_MS: '200',
    AGW_JOURNAL_SOCKET: join(dir, 'no-journal.sock'),
  });
  list.push(s.pid);
  return s;
}

/** `agent-gateway mcp` for the sidecar at `url`, started by the SDK's stdio transport. */
async function mcpFor(url: string): Promise<McpSession & { stderr: string[]; pid: number }> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, 'mcp'],
    env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: url },
    stderr: 'pipe',
  });
  const stderr: string[] = [];
  transport.stderr?.on('data', (d: Buffer) => stderr.push(d.toString()));
  const session = await connectClient(transport);
  const pid = transport.pid!;
  pids.push(pid);
  closing.push(() => session.client.close());
  return { ...session, stderr, pid };
}

let pm: ChildSidecar;
let qa: ChildSidecar;
beforeAll(async () => {
  // shared by the tests that need no outage; that one starts its own
  const adapter = await adapterOn(join(dir, 'shared.db'), 0, shared);
  pm = await sidecarFor('pm', adapter.url, shared);
  qa = await sidecarFor('qa', adapter.url, shared);
});

it('offers the contract tools; a task is sent, fetched, answered and acked, and its sender sees it acked', {
  timeout: 30_000, // two processes started, then the exchange: past 5 s on a loaded machine
}, async () => {
  const pmMcp = await mcpFor(pm.url);
  const qaMcp = await mcpFor(qa.url);
  await expectContractTools(qaMcp.client);
  await expectExchange(pmMcp.client, qaMcp.client);
  // nothing but MCP on stdout: the client read every line as a message
  expect([...pmMcp.errors, ...qaMcp.errors]).toEqual([]);
  expect(pmMcp.stderr.join('')).toContain(`for the sidecar at ${pm.url}`);
});

it("answers refusals as tool results carrying the adapter's or the envelope's code", async () => {
  const { client } = await mcpFor(pm.url);
  await expectErrors(client);
});

it('answers sidecar_unreachable, as a tool result, when the sidecar does not answer', async () => {
  const { client, errors } = await mcpFor('http://127.0.0.1:9'); // discard: nothing listens
  const r = await tool(client, 'send_message', { to: '@qa', kind: 'status', payload: {} });
  expect(r).toMatchObject({
    isError: true,
    json: { error: 'sidecar_unreachable', retry_after_s: 2 },
  });
  expect(r.json.message).toContain('http://127.0.0.1:9');
  expect(errors).toEqual([]);
});

it('with the adapter down, send_message answers queued, and the message arrives once it is back', {
  timeout: 60_000,
}, async () => {
  const db = join(dir, 'outage.db');
  const first = await adapterOn(db);
  const port = Number(new URL(first.url).port);
  const pmOwn = await sidecarFor('pm', first.url);
  const qaOwn = await sidecarFor('qa', first.url);
  const pmMcp = await mcpFor(pmOwn.url);
  const qaMcp = await mcpFor(qaOwn.url);
  first.child.kill('SIGTERM');
  await first.exited;

  const queued = await tool(pmMcp.client, 'send_message', {
    to: '@qa',
    kind: 'status',
    payload: { n: 1 },
  });
  expect(queued).toEqual({
    isError: false,
    json: { status: 'queued', idempotency_key: expect.any(String), outbox_depth: 1 },
  });

  await adapterOn(db, port); // the same store, the same address
  let deliveries: Json[] = [];
  const deadline = Date.now() + 15_000; // generous: it only bounds a failing test
  while (deliveries.length === 0 && Date.now() < deadline) {
    const r = await tool(qaMcp.client, 'fetch_inbox', { wait_seconds: 2 });
    if (!r.isError) deliveries = r.json.deliveries;
  }
  expect(deliveries).toHaveLength(1);
  expect(deliveries[0].message).toMatchObject({
    sender: 'pm',
    idempotency_key: queued.json.idempotency_key,
    payload: { n: 1 },
  });
});

it('stops at start on a bad AGW_SIDECAR_URL, naming it, with exit status 2 and nothing on stdout', async () => {
  const bad = await runCli(['mcp'], { AGW_SIDECAR_URL: 'localhost:7070' });
  expect(bad.code).toBe(2);
  expect(bad.stdout).toBe('');
  expect(bad.stderr).toMatch(/^agent-gateway mcp: AGW_SIDECAR_URL: must be an http/);
  const typo = await runCli(['mcp'], { AGW_SIDECAR_ULR: 'http://127.0.0.1:7070' });
  expect(typo.code).toBe(2);
  expect(typo.stderr).toContain('did you mean AGW_SIDECAR_URL?');
});

it('answers a request whose params do not fit its method with -32602, never -32603 (internal)', async () => {
  // no sidecar is asked: the refusal comes first (port 9 is discard, nothing listens)
  const child = spawn(process.execPath, [CLI, 'mcp'], {
    env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: 'http://127.0.0.1:9' },
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  pids.push(child.pid!);
  const lines = createInterface({ input: child.stdout });
  const next = () =>
    new Promise<Json>((resolve) => lines.once('line', (l) => resolve(JSON.parse(l))));
  // the SDK answered both -32603: its handler wrapper parses params and calls a failure internal
  for (const frame of [
    { jsonrpc: '2.0', id: 'a', method: 'initialize', params: {} },
    { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 5 } },
  ]) {
    const answer = next();
    child.stdin.write(`${JSON.stringify(frame)}\n`);
    expect(await answer).toEqual({
      jsonrpc: '2.0',
      id: frame.id,
      error: { code: -32602, message: `${frame.method}: invalid params` },
    });
  }
  child.stdin.end();
});
