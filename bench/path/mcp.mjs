// What a tool call adds over plain HTTP to the sidecar: send_message and fetch_inbox, each as N
// sequential calls (one at a time, as an agent makes them) by three routes to the same sidecars:
//
// - `http`: the sidecar's HTTP API (POST /v1/messages, GET /v1/inbox), an undici Pool;
// - `mcp-http`: the SDK's Client over Streamable HTTP to the sidecar's POST /mcp;
// - `mcp-http-raw`: JSON-RPC POSTs to /mcp without the SDK's client: the sidecar's part of it;
// - `mcp-stdio`: the SDK's Client over stdio to `agent-gateway mcp`, which calls the HTTP API;
// each in MCP's 2025 era (the SDK's v1 Client, `@modelcontextprotocol/sdk`: 2025-11-25, what
// most clients speak), and again in 2026-07-28 (`-2026`: the SDK's v2 Client pinned to it, and
// raw POSTs with that era's `_meta` envelope and headers).
//
// pm's sidecar takes the sends (to @qa); qa's serves the fetches, each taking one delivery
// (max 1), which is then acked over plain HTTP outside the timing (a leased one would hold the
// channel's next). One JSON line per route and tool: p50 and p99 of the calls, and what the route
// adds to plain HTTP at each.
//
//   node bench/path/mcp.mjs [--calls 500] [--warmup 50]
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernHttpTransport,
} from '@modelcontextprotocol/client';
import { StdioClientTransport as ModernStdioTransport } from '@modelcontextprotocol/client/stdio';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Pool } from 'undici';
import {
  benchDir,
  CLI,
  latencySummary,
  round,
  startAdapter,
  startProcess,
  tokenOf,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    calls: { type: 'string', default: '500' },
    warmup: { type: 'string', default: '50' },
  },
});
const calls = Number(values.calls);
const warmup = Number(values.warmup);

const { dir, topology, cleanup } = benchDir();
const adapter = await startAdapter(dir, topology, ['--queue-capacity', '1000000']);
const sidecarOf = (agent) =>
  startProcess(
    [CLI, 'sidecar', '--listen', '127.0.0.1:0'],
    {
      AGW_ADAPTER_URL: adapter.url,
      AGW_AGENT_ID: agent,
      AGW_AGENT_TOKEN: tokenOf(agent),
      AGW_OUTBOX: join(dir, `${agent}-outbox.db`),
      AGW_LOG_LEVEL: 'info',
    },
    (e) => e.msg?.includes('listening on'),
  );
const [pm, qa] = await Promise.all([sidecarOf('pm'), sidecarOf('qa')]);
const json = { 'content-type': 'application/json' };

/** Plain HTTP to a sidecar: one keep-alive connection, as an agent's client keeps. */
function httpRoute(url) {
  const pool = new Pool(url, { connections: 1, keepAliveTimeout: 60_000 });
  const request = async (opts) => {
    const res = await pool.request(opts);
    const text = await res.body.text();
    if (res.statusCode >= 300) throw new Error(`${opts.path}: ${res.statusCode} ${text}`);
    return JSON.parse(text);
  };
  return {
    send: (n) =>
      request({
        method: 'POST',
        path: '/v1/messages',
        headers: json,
        body: JSON.stringify({ to: '@qa', kind: 'status', payload: { n } }),
      }),
    fetch: async () =>
      (await request({ method: 'GET', path: '/v1/inbox?wait=0&max=1' })).deliveries,
    ack: (ids) =>
      request({
        method: 'POST',
        path: '/v1/acks',
        headers: json,
        body: JSON.stringify({ delivery_ids: ids }),
      }),
    close: () => pool.close(),
  };
}

/**
 * The SDK's Client over a transport: the tools' structuredContent, a tool error thrown. The v1
 * Client (MCP 2025-11-25), or with `modern` the v2 one pinned to 2026-07-28.
 */
async function mcpRoute(transport, modern = false) {
  const client = modern
    ? new ModernClient(
        { name: 'agw-bench', version: '0' },
        { versionNegotiation: { mode: { pin: MODERN } } },
      )
    : new Client({ name: 'agw-bench', version: '0' });
  await client.connect(transport);
  const call = async (name, args) => {
    const r = await client.callTool({ name, arguments: args });
    if (r.isError) throw new Error(`${name}: ${r.content[0].text}`);
    return r.structuredContent;
  };
  return {
    send: (n) => call('send_message', { to: '@qa', kind: 'status', payload: { n } }),
    fetch: async () => (await call('fetch_inbox', { max: 1 })).deliveries,
    close: () => client.close(),
  };
}

const MODERN = '2026-07-28';

/**
 * JSON-RPC tools/call POSTs to /mcp without the SDK's client (an undici Pool, as `http`): what
 * the sidecar's MCP handling adds, apart from what the SDK's HTTP client adds. With `modern`, as
 * a client of 2026-07-28 sends them: the version in `_meta` and in the headers.
 */
function rawMcpRoute(url, modern = false) {
  const pool = new Pool(url, { connections: 1, keepAliveTimeout: 60_000 });
  const meta = {
    'io.modelcontextprotocol/protocolVersion': MODERN,
    'io.modelcontextprotocol/clientInfo': { name: 'agw-bench', version: '0' },
    'io.modelcontextprotocol/clientCapabilities': {},
  };
  let id = 0;
  const call = async (name, args) => {
    const res = await pool.request({
      method: 'POST',
      path: '/mcp',
      headers: {
        ...json,
        accept: 'application/json, text/event-stream',
        ...(modern
          ? { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': name }
          : {}),
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: ++id,
        method: 'tools/call',
        params: { name, arguments: args, ...(modern ? { _meta: meta } : {}) },
      }),
    });
    const { result, error } = JSON.parse(await res.body.text());
    if (error !== undefined || result.isError)
      throw new Error(`${name}: ${JSON.stringify(error ?? result)}`);
    return result.structuredContent;
  };
  return {
    send: (n) => call('send_message', { to: '@qa', kind: 'status', payload: { n } }),
    fetch: async () => (await call('fetch_inbox', { max: 1 })).deliveries,
    close: () => pool.close(),
  };
}

const stdio = (url, Transport = StdioClientTransport) =>
  new Transport({
    command: process.execPath,
    args: [CLI, 'mcp'],
    env: { PATH: process.env.PATH, AGW_SIDECAR_URL: url },
  });
const mcpHttp = (url, Transport = StreamableHTTPClientTransport) =>
  new Transport(new URL(`${url}/mcp`));
const routes = {
  http: { pm: httpRoute(pm.url), qa: httpRoute(qa.url) },
  'mcp-http': { pm: await mcpRoute(mcpHttp(pm.url)), qa: await mcpRoute(mcpHttp(qa.url)) },
  'mcp-http-raw': { pm: rawMcpRoute(pm.url), qa: rawMcpRoute(qa.url) },
  'mcp-stdio': { pm: await mcpRoute(stdio(pm.url)), qa: await mcpRoute(stdio(qa.url)) },
  'mcp-http-2026': {
    pm: await mcpRoute(mcpHttp(pm.url, ModernHttpTransport), true),
    qa: await mcpRoute(mcpHttp(qa.url, ModernHttpTransport), true),
  },
  'mcp-http-raw-2026': { pm: rawMcpRoute(pm.url, true), qa: rawMcpRoute(qa.url, true) },
  'mcp-stdio-2026': {
    pm: await mcpRoute(stdio(pm.url, ModernStdioTransport), true),
    qa: await mcpRoute(stdio(qa.url, ModernStdioTransport), true),
  },
};
const acker = httpRoute(qa.url);

/** `calls` timed calls of `fn` after `warmup` untimed ones, one at a time; `after` untimed. */
async function measure(fn, after = async () => {}) {
  const latencies = [];
  for (let i = 0; i < warmup + calls; i++) {
    const t0 = performance.now();
    const out = await fn(i);
    const ms = performance.now() - t0;
    if (i >= warmup) latencies.push(ms);
    await after(out);
  }
  return latencySummary(latencies);
}

const results = {};
try {
  for (const [name, route] of Object.entries(routes)) {
    results[name] = { send_message: await measure((i) => route.pm.send(i)) };
  }
  // every route's sends wait in qa's inbox (warmup + calls each): each fetch takes one, acked after
  for (const [name, route] of Object.entries(routes)) {
    results[name].fetch_inbox = await measure(
      async () => {
        const deliveries = await route.qa.fetch();
        if (deliveries.length !== 1) throw new Error(`${name}: fetched ${deliveries.length}`);
        return deliveries;
      },
      (deliveries) => acker.ack(deliveries.map((d) => d.delivery_id)),
    );
  }
  for (const [name, byTool] of Object.entries(results)) {
    for (const [tool, s] of Object.entries(byTool)) {
      const plain = results.http[tool];
      console.log(
        JSON.stringify({
          bench: 'mcp',
          route: name,
          tool,
          calls,
          p50_ms: s.p50_ms,
          p99_ms: s.p99_ms,
          added_p50_ms: round(s.p50_ms - plain.p50_ms, 3),
          added_p99_ms: round(s.p99_ms - plain.p99_ms, 3),
        }),
      );
    }
  }
} finally {
  for (const route of Object.values(routes))
    await Promise.all([route.pm.close(), route.qa.close()]);
  await acker.close();
  await Promise.all([pm.stop(), qa.stop()]);
  await adapter.stop();
  cleanup();
}
