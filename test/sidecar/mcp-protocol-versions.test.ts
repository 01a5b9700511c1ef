/**
 * MCP protocol versions (docs/reference/mcp.md, "Protocol versions"): the server speaks what its
 * SDK does (1.x: 2025-11-25 and earlier; MCP 2026-07-28, which has no `initialize`, is only in
 * the SDK's v2 packages). A client of 2026-07-28 is refused with the versions spoken named, and
 * in a shape a client of both eras falls back on (never 2026-07-28's own -32022):
 * - over the sidecar's /mcp: a `MCP-Protocol-Version` header naming another version is the
 *   SDK's 400 (-32000), a 2026-07-28 request without it (its version in `_meta`) a 400 too;
 * - over `agent-gateway mcp` (stdio): `server/discover`, that era's first call, is "method not
 *   found" (-32601), any other such request -32600;
 * - an `initialize` asking for 2026-07-28 is answered with the newest version spoken, as MCP's
 *   negotiation has it, and a client of a version spoken works as ever.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  LATEST_PROTOCOL_VERSION,
  SUPPORTED_PROTOCOL_VERSIONS,
} from '@modelcontextprotocol/sdk/types.js';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { CLI } from '../helpers/cli.js';
import type { Json } from '../helpers/http.js';
import { connectClient, tool } from '../helpers/mcp.js';
import { startTestSidecar } from '../helpers/sidecar.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

const MODERN = '2026-07-28';
const meta = {
  'io.modelcontextprotocol/protocolVersion': MODERN,
  'io.modelcontextprotocol/clientInfo': { name: 'pinned', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': {},
};

/** The message names every version spoken, and the one asked for where it was said. */
function expectNamesVersions(message: string) {
  for (const v of SUPPORTED_PROTOCOL_VERSIONS) expect(message).toContain(v);
  expect(message).toContain(MODERN);
}

it('refuses a 2026-07-28 client at /mcp naming the versions it speaks, and serves the others', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await startTestSidecar('pm', adapter.url);
  stops.push(pm.stop);
  const post = async (body: Json, headers: Record<string, string> = {}) => {
    const res = await fetch(`${pm.url}/mcp`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        ...headers,
      },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Json };
  };
  // as a 2026-07-28 client sends them: the version in the header and in _meta
  const modern = { 'mcp-protocol-version': MODERN, 'mcp-method': 'server/discover' };
  for (const method of ['server/discover', 'tools/list', 'tools/call']) {
    const r = await post(
      { jsonrpc: '2.0', id: 1, method, params: { _meta: meta, name: 'whoami', arguments: {} } },
      { ...modern, 'mcp-method': method },
    );
    expect(r.status, method).toBe(400);
    expect(r.body.error.code, method).toBe(-32000); // not -32022: a dual-era client falls back
    expectNamesVersions(r.body.error.message);
  }
  // without the header, the version in _meta alone
  const bare = await post({
    jsonrpc: '2.0',
    id: 'b',
    method: 'tools/list',
    params: { _meta: meta },
  });
  expect(bare).toMatchObject({ status: 400, body: { id: 'b', error: { code: -32600 } } });
  expectNamesVersions(bare.body.error.message);
  const discover = await post({ jsonrpc: '2.0', id: 'd', method: 'server/discover', params: {} });
  expect(discover).toMatchObject({ status: 400, body: { id: 'd', error: { code: -32601 } } });
  for (const v of SUPPORTED_PROTOCOL_VERSIONS) expect(discover.body.error.message).toContain(v);

  // initialize asking for it gets the newest spoken; a version spoken in _meta is no refusal
  const init = await post({
    jsonrpc: '2.0',
    id: 2,
    method: 'initialize',
    params: { protocolVersion: MODERN, capabilities: {}, clientInfo: { name: 'x', version: '1' } },
  });
  expect(init.body.result.protocolVersion).toBe(LATEST_PROTOCOL_VERSION);
  const spoken = await post(
    {
      jsonrpc: '2.0',
      id: 3,
      method: 'tools/list',
      params: { _meta: { 'io.modelcontextprotocol/protocolVersion': LATEST_PROTOCOL_VERSION } },
    },
    { 'mcp-protocol-version': LATEST_PROTOCOL_VERSION },
  );
  expect(spoken.status).toBe(200);
  expect(spoken.body.result.tools.length).toBeGreaterThan(10);
  const { client } = await connectClient(
    new StreamableHTTPClientTransport(new URL(`${pm.url}/mcp`)),
  );
  stops.push(() => client.close());
  expect((await tool(client, 'whoami')).json.agent).toBe('pm');
});

it('refuses a 2026-07-28 client on stdio naming the versions it speaks', async () => {
  // no sidecar is asked: the refusal comes first (port 9 is discard, nothing listens)
  const child = spawn(process.execPath, [CLI, 'mcp'], {
    env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: 'http://127.0.0.1:9' },
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
  // the era's probe: "method not found", which a client of both eras falls back on
  const discover = await ask({
    jsonrpc: '2.0',
    id: 1,
    method: 'server/discover',
    params: { _meta: meta },
  });
  expect(discover).toMatchObject({ id: 1, error: { code: -32601 } });
  expectNamesVersions(discover.error.message);
  const list = await ask({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: meta } });
  expect(list).toMatchObject({ id: 2, error: { code: -32600 } });
  expectNamesVersions(list.error.message);
  // then the handshake of a version spoken works on the same stdio
  const init = await ask({
    jsonrpc: '2.0',
    id: 3,
    method: 'initialize',
    params: {
      protocolVersion: LATEST_PROTOCOL_VERSION,
      capabilities: {},
      clientInfo: { name: 'x', version: '1' },
    },
  });
  expect(init.result.protocolVersion).toBe(LATEST_PROTOCOL_VERSION);
  child.stdin.end();
});
