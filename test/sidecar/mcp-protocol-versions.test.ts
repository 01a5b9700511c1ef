/**
 * MCP protocol versions (docs/reference/mcp.md, "Protocol versions"): the server speaks MCP
 * 2026-07-28 (no `initialize`: `server/discover`, and the version in each request's `_meta`) and
 * the 2025 era (2025-11-25, 2025-06-18, 2025-03-26: `initialize`), on the SDK's v2 server, over
 * the sidecar's `/mcp` and over `agent-gateway mcp` (stdio). Real sidecars and a real adapter on
 * loopback, the built CLI as a child process:
 * - the SDK's v2 Client pinned to 2026-07-28 (no fallback to `initialize`: it fails unless the
 *   server offers that version) lists the contract's tools and calls them, a task sent, fetched,
 *   answered and acked, refusals as tool results, the resources read, trace context through
 *   `_meta`; over /mcp and over stdio;
 * - raw JSON-RPC of 2026-07-28, the `_meta` envelope on each request as that era's clients send
 *   it: `server/discover` offers 2026-07-28, `tools/list` and `tools/call` answer, with that
 *   era's result fields; `initialize`, which that era removed, is "method not found" (-32601,
 *   HTTP 404), not judged by its params; a version neither era has is that era's
 *   UnsupportedProtocolVersion (-32022) naming 2026-07-28;
 * - the v2 Client's other modes: `auto` (probe with `server/discover`, else `initialize`) picks
 *   2026-07-28, its default (`initialize` alone) 2025-11-25, over both doors;
 * - the 2025 era as before: the SDK's v1 Client (2025-11-25), `initialize` at 2025-06-18 and
 *   2025-03-26 answered with the version asked and their tools served, `initialize` asking for
 *   2026-07-28 answered with 2025-11-25 (MCP's negotiation), a missing resource -32002 as that
 *   era has it (2026-07-28's is -32602).
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import {
  Client as ModernClient,
  ProtocolError,
  StreamableHTTPClientTransport,
} from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { StdioClientTransport as V1StdioTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as V1HttpTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { CLI } from '../helpers/cli.js';
import type { Json } from '../helpers/http.js';
import {
  CONTRACT_TOOLS,
  connectClient,
  connectModern,
  expectAnnotations,
  expectContractTools,
  expectErrors,
  expectExchange,
  expectPayloadsAreData,
  MODERN,
  type ModernSession,
  tool,
} from '../helpers/mcp.js';
import { startTestSidecar } from '../helpers/sidecar.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/** The 2025 era's versions, newest first; `initialize` asking for another gets the first. */
const ERA_2025 = ['2025-11-25', '2025-06-18', '2025-03-26'];

/** The `_meta` envelope a 2026-07-28 client puts on each request. */
const envelope = (version = MODERN) => ({
  'io.modelcontextprotocol/protocolVersion': version,
  'io.modelcontextprotocol/clientInfo': { name: 'pinned', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': {},
});

async function stack() {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await startTestSidecar('pm', adapter.url);
  stops.push(pm.stop);
  const qa = await startTestSidecar('qa', adapter.url);
  stops.push(qa.stop);
  return { pm, qa };
}

async function modernOverHttp(sidecarUrl: string): Promise<ModernSession> {
  const session = await connectModern(
    new StreamableHTTPClientTransport(new URL(`${sidecarUrl}/mcp`)),
  );
  stops.push(() => session.client.close());
  return session;
}

/** `agent-gateway mcp` for the sidecar at `url`, started by the v2 SDK's stdio transport. */
async function modernOverStdio(url: string): Promise<ModernSession> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, 'mcp'],
    env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: url },
    stderr: 'ignore',
  });
  const session = await connectModern(transport);
  stops.push(() => session.client.close());
  return session;
}

/**
 * The checks a 2026-07-28 client makes of either door: it is that era's, the contract's tools
 * and their answers, a task exchanged, refusals, resources (2026-07-28's -32602 for one missing),
 * and a send's trace context through `_meta` both ways.
 */
async function expectModern(pm: ModernSession, qa: ModernSession): Promise<void> {
  for (const { client } of [pm, qa]) {
    expect(client.getNegotiatedProtocolVersion()).toBe(MODERN);
    expect(client.getProtocolEra()).toBe('modern');
    expect(client.getServerVersion()?.name).toBe('agent-gateway');
    expect(client.getDiscoverResult()?.supportedVersions).toContain(MODERN);
  }
  await expectContractTools(pm.client);
  await expectAnnotations(pm.client);
  await expectPayloadsAreData(pm.client);
  await expectExchange(pm.client, qa.client);
  await expectErrors(pm.client);

  const { resources } = await qa.client.listResources();
  expect(resources.map((r) => r.uri)).toContain('agw://channels/product');
  const { contents } = await qa.client.readResource({ uri: 'agw://channels/product' });
  expect(JSON.parse((contents[0] as { text: string }).text)).toMatchObject({
    name: 'product',
    members: expect.arrayContaining(['pm', 'qa']),
  });
  const missing = await qa.client
    .readResource({ uri: 'agw://channels/platform' })
    .catch((e: unknown) => e);
  expect(missing).toBeInstanceOf(ProtocolError);
  expect((missing as ProtocolError).code).toBe(-32602);
  expect((missing as ProtocolError).message).toMatch(/not found/i);

  // a send's context in, the message's context out
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  const sent = await pm.client.callTool({
    name: 'send_message',
    arguments: { to: '@qa', kind: 'status', payload: { traced: true } },
    _meta: { traceparent },
  });
  expect(sent.isError).not.toBe(true);
  expect(sent._meta?.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
  expect([...pm.errors, ...qa.errors]).toEqual([]);
}

it('speaks 2026-07-28 at /mcp to the v2 client pinned to it', { timeout: 30_000 }, async () => {
  const { pm, qa } = await stack();
  const modern = await modernOverHttp(pm.url);
  await expectModern(modern, await modernOverHttp(qa.url));
  // a body past what /mcp takes is a tool error in this era too (mcp-payload-too-large.test.ts)
  const big = await tool(modern.client, 'send_message', {
    to: '@qa',
    kind: 'status',
    payload: { p: 'x'.repeat(300 * 1024) },
  });
  expect(big).toMatchObject({ isError: true, json: { error: 'payload_too_large' } });
});

it('speaks 2026-07-28 over agent-gateway mcp (stdio) to the v2 client pinned to it', {
  timeout: 60_000,
}, async () => {
  const { pm, qa } = await stack();
  await expectModern(await modernOverStdio(pm.url), await modernOverStdio(qa.url));
});

it("negotiates with the v2 client's other modes: auto picks 2026-07-28, its default 2025-11-25", {
  timeout: 60_000,
}, async () => {
  const { pm } = await stack();
  const doors = {
    http: () => new StreamableHTTPClientTransport(new URL(`${pm.url}/mcp`)),
    stdio: () =>
      new StdioClientTransport({
        command: process.execPath,
        args: [CLI, 'mcp'],
        env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: pm.url },
        stderr: 'ignore',
      }),
  };
  for (const [door, transport] of Object.entries(doors)) {
    for (const [mode, version] of [
      ['auto', MODERN],
      ['legacy', ERA_2025[0]],
    ] as const) {
      const client = new ModernClient(
        { name: 'agent-gateway-test', version: '0.0.0' },
        { versionNegotiation: { mode } },
      );
      await client.connect(transport());
      stops.push(() => client.close());
      expect(client.getNegotiatedProtocolVersion(), `${door} ${mode}`).toBe(version);
      expect((await tool(client, 'whoami')).json.agent, `${door} ${mode}`).toBe('pm');
    }
  }
});

/** A raw POST to /mcp. */
async function post(url: string, body: Json, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Json };
}

/** A request of 2026-07-28 as its clients POST it: the envelope, and the era's headers. */
function modernPost(url: string, id: number, method: string, params: Json = {}, version = MODERN) {
  const name = params.name ?? params.uri;
  return post(
    url,
    { jsonrpc: '2.0', id, method, params: { ...params, _meta: envelope(version) } },
    {
      'mcp-protocol-version': version,
      'mcp-method': method,
      ...(name === undefined ? {} : { 'mcp-name': name }),
    },
  );
}

it('answers raw 2026-07-28 JSON-RPC at /mcp: server/discover, tools/list, tools/call', {
  timeout: 30_000,
}, async () => {
  const { pm } = await stack();
  const discover = await modernPost(pm.url, 1, 'server/discover');
  expect(discover.status).toBe(200);
  expect(discover.body.result).toMatchObject({
    supportedVersions: [MODERN],
    capabilities: { tools: {}, resources: {} },
    instructions: expect.stringContaining('fetch_inbox'),
    resultType: 'complete',
  });
  const list = await modernPost(pm.url, 2, 'tools/list');
  expect(list.status).toBe(200);
  expect(list.body.result.tools.map((t: Json) => t.name).sort()).toEqual(
    Object.keys(CONTRACT_TOOLS).sort(),
  );
  expect(list.body.result.resultType).toBe('complete');
  const call = await modernPost(pm.url, 3, 'tools/call', { name: 'whoami', arguments: {} });
  expect(call.status).toBe(200);
  expect(call.body.result).toMatchObject({
    content: [{ type: 'text' }],
    structuredContent: { agent: 'pm' },
    resultType: 'complete',
  });
  expect(call.body.result.isError).toBeUndefined();
  // initialize is no method of 2026-07-28: not found (HTTP 404), never judged by its params
  const init = await modernPost(pm.url, 5, 'initialize');
  expect(init).toMatchObject({ status: 404, body: { id: 5, error: { code: -32601 } } });
  // a version neither era has: 2026-07-28's refusal, naming what is spoken
  const other = await modernPost(pm.url, 4, 'tools/list', {}, '2099-01-01');
  expect(other.body).toMatchObject({ id: 4, error: { code: -32022 } });
  expect(JSON.stringify(other.body.error)).toContain(MODERN);
});

it('answers raw 2026-07-28 JSON-RPC on stdio: server/discover, tools/list, tools/call', {
  timeout: 30_000,
}, async () => {
  const { pm } = await stack();
  const child = spawn(process.execPath, [CLI, 'mcp'], {
    env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: pm.url },
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  stops.push(() => {
    child.kill('SIGKILL');
  });
  const lines = createInterface({ input: child.stdout });
  const ask = (id: number, method: string, params: Json = {}) => {
    const answer = new Promise<Json>((resolve) =>
      lines.once('line', (l) => resolve(JSON.parse(l))),
    );
    const frame = { jsonrpc: '2.0', id, method, params: { ...params, _meta: envelope() } };
    child.stdin.write(`${JSON.stringify(frame)}\n`);
    return answer;
  };
  const discover = await ask(1, 'server/discover');
  expect(discover.result).toMatchObject({ supportedVersions: [MODERN], resultType: 'complete' });
  const list = await ask(2, 'tools/list');
  expect(list.result.tools.map((t: Json) => t.name).sort()).toEqual(
    Object.keys(CONTRACT_TOOLS).sort(),
  );
  const call = await ask(3, 'tools/call', { name: 'whoami', arguments: {} });
  expect(call.result).toMatchObject({
    structuredContent: { agent: 'pm' },
    resultType: 'complete',
  });
  expect((await ask(4, 'initialize')).error).toMatchObject({ code: -32601 });
  child.stdin.end();
});

it('serves the 2025 era at /mcp as before: the v1 client, initialize at each version, -32002', {
  timeout: 30_000,
}, async () => {
  const { pm } = await stack();
  const { client } = await connectClient(new V1HttpTransport(new URL(`${pm.url}/mcp`)));
  stops.push(() => client.close());
  expect((await tool(client, 'whoami')).json.agent).toBe('pm');
  const err = await client.readResource({ uri: 'agw://channels/platform' }).catch((e) => e);
  expect(err).toBeInstanceOf(McpError);
  expect((err as McpError).code).toBe(-32002); // that era's code for a missing resource

  for (const version of ERA_2025) {
    const init = await post(pm.url, {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: {
        protocolVersion: version,
        capabilities: {},
        clientInfo: { name: 'x', version: '1' },
      },
    });
    expect(init.status, version).toBe(200);
    expect(init.body.result, version).toMatchObject({
      protocolVersion: version,
      serverInfo: { name: 'agent-gateway' },
    });
    expect(init.body.result.resultType, version).toBeUndefined(); // 2026-07-28's only
    const list = await post(
      pm.url,
      { jsonrpc: '2.0', id: 2, method: 'tools/list' },
      { 'mcp-protocol-version': version },
    );
    expect(list.status, version).toBe(200);
    expect(list.body.result.tools, version).toHaveLength(Object.keys(CONTRACT_TOOLS).length);
    const read = await post(
      pm.url,
      { jsonrpc: '2.0', id: 3, method: 'resources/read', params: { uri: 'agw://nope' } },
      { 'mcp-protocol-version': version },
    );
    expect(read.body.error, version).toMatchObject({ code: -32002, data: { uri: 'agw://nope' } });
  }
  // initialize asking for 2026-07-28 (which has none): the newest of the era it is in
  const init = await post(pm.url, {
    jsonrpc: '2.0',
    id: 4,
    method: 'initialize',
    params: { protocolVersion: MODERN, capabilities: {}, clientInfo: { name: 'x', version: '1' } },
  });
  expect(init.body.result.protocolVersion).toBe(ERA_2025[0]);
});

it('serves the 2025 era on stdio as before: the v1 client, initialize at each version, -32002', {
  timeout: 60_000,
}, async () => {
  const { pm } = await stack();
  const transport = new V1StdioTransport({
    command: process.execPath,
    args: [CLI, 'mcp'],
    env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: pm.url },
    stderr: 'ignore',
  });
  const { client, errors } = await connectClient(transport);
  stops.push(() => client.close());
  expect((await tool(client, 'whoami')).json.agent).toBe('pm');
  const err = await client.readResource({ uri: 'agw://channels/platform' }).catch((e) => e);
  expect((err as McpError).code).toBe(-32002);
  expect(errors).toEqual([]);

  for (const version of [...ERA_2025, MODERN]) {
    const child = spawn(process.execPath, [CLI, 'mcp'], {
      env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: pm.url },
      stdio: ['pipe', 'pipe', 'ignore'],
    });
    stops.push(() => {
      child.kill('SIGKILL');
    });
    const lines = createInterface({ input: child.stdout });
    const ask = (frame: Json) => {
      const answer = new Promise<Json>((resolve) =>
        lines.once('line', (l) => resolve(JSON.parse(l))),
      );
      child.stdin.write(`${JSON.stringify(frame)}\n`);
      return answer;
    };
    const init = await ask({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: {
        protocolVersion: version,
        capabilities: {},
        clientInfo: { name: 'x', version: '1' },
      },
    });
    // asked for 2026-07-28, which has no initialize: the newest of the 2025 era
    expect(init.result.protocolVersion, version).toBe(version === MODERN ? ERA_2025[0] : version);
    child.stdin.write(
      `${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })}\n`,
    );
    const call = await ask({
      jsonrpc: '2.0',
      id: 2,
      method: 'tools/call',
      params: { name: 'whoami', arguments: {} },
    });
    expect(call.result, version).toMatchObject({ structuredContent: { agent: 'pm' } });
    expect(call.result.resultType, version).toBeUndefined();
    const read = await ask({
      jsonrpc: '2.0',
      id: 3,
      method: 'resources/read',
      params: { uri: 'agw://nope' },
    });
    expect(read.error, version).toMatchObject({ code: -32002, data: { uri: 'agw://nope' } });
    child.stdin.end();
  }
});
