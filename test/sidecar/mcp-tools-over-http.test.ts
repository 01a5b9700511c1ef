/**
 * The sidecar's `POST /mcp` (Streamable HTTP) with the SDK's own Client and transport, against
 * real sidecars and a real adapter on loopback: the contract's tools, a task sent, fetched,
 * answered and acked, refusals as tool results, a send queued while the adapter is down, and
 * the sidecar's request checks on /mcp.
 */
import { request } from 'node:http';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import type { Json } from '../helpers/http.js';
import {
  connectClient,
  expectAnnotations,
  expectContractTools,
  expectErrors,
  expectExchange,
  expectPayloadsAreData,
  type McpSession,
  tool,
} from '../helpers/mcp.js';
import { startTestSidecar } from '../helpers/sidecar.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

async function mcpOf(sidecarUrl: string): Promise<McpSession> {
  const session = await connectClient(
    new StreamableHTTPClientTransport(new URL(`${sidecarUrl}/mcp`)),
  );
  stops.push(() => session.client.close());
  return session;
}

async function sidecars(adapterUrl: string) {
  const pm = await startTestSidecar('pm', adapterUrl);
  stops.push(pm.stop);
  const qa = await startTestSidecar('qa', adapterUrl);
  stops.push(qa.stop);
  return { pm, qa };
}

it('offers the contract tools; a task is sent, fetched, answered and acked, and its sender sees it acked', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const { pm, qa } = await sidecars(adapter.url);
  const pmMcp = await mcpOf(pm.url);
  const qaMcp = await mcpOf(qa.url);
  await expectContractTools(pmMcp.client);
  await expectAnnotations(pmMcp.client);
  await expectPayloadsAreData(pmMcp.client);
  await expectExchange(pmMcp.client, qaMcp.client);
  // the tools without arguments, and the emergency one, answer as their endpoints do
  const me = await tool(qaMcp.client, 'whoami');
  expect(me.json).toMatchObject({ agent: 'qa', alerts_to: 'orchestrator' });
  const beat = await tool(pmMcp.client, 'heartbeat');
  expect(beat.json).toEqual({ pending: 1, critical_pending: 0 }); // qa's answer, not yet fetched
  const replay = await tool(pmMcp.client, 'read_channel', { channel: '@pm' });
  expect(replay.json.messages.map((m: Json) => m.sender)).toEqual(['qa']);
  const sos = await tool(pmMcp.client, 'raise_emergency', { reason: 'manual', message: 'help' });
  expect(sos).toEqual({ isError: false, json: { status: 'written' } });
  expect([...pmMcp.errors, ...qaMcp.errors]).toEqual([]);
});

it("answers refusals as tool results carrying the adapter's or the envelope's code", async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const { pm } = await sidecars(adapter.url);
  const { client } = await mcpOf(pm.url);
  await expectErrors(client);
  // nothing refused was stored or queued
  expect(pm.sidecar.service.status()).toMatchObject({ outbox: { depth: 0, dead_letters: 0 } });
});

it('with the adapter down, send_message answers queued, and the message arrives once it is back', async () => {
  const adapter = await startTestAdapter();
  const { pm, qa } = await sidecars(adapter.url);
  const pmMcp = await mcpOf(pm.url);
  const qaMcp = await mcpOf(qa.url);
  const port = new URL(adapter.url).port;
  await adapter.stop();

  const queued = await tool(pmMcp.client, 'send_message', {
    to: '@qa',
    kind: 'status',
    payload: { n: 1 },
  });
  expect(queued).toEqual({
    isError: false,
    json: { status: 'queued', idempotency_key: expect.any(String), outbox_depth: 1 },
  });
  // while it is away the inbox is a refusal with a reason and a time to come back
  const away = await tool(qaMcp.client, 'fetch_inbox');
  expect(away.isError).toBe(true);
  expect(away.json).toMatchObject({
    error: 'adapter_unreachable',
    retry_after_s: expect.any(Number),
  });

  const back = await startTestAdapter({ listen: `127.0.0.1:${port}` });
  stops.push(back.stop);
  let deliveries: Json[] = [];
  const deadline = Date.now() + 10_000; // generous: it only bounds a failing test
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
  expect(pm.sidecar.service.status()).toMatchObject({ outbox: { depth: 0 } });
});

/** A raw request to the sidecar, with the headers a browser or a rebound name would send. */
function raw(url: string, method: string, path: string, headers: Record<string, string>) {
  const body =
    method === 'POST'
      ? JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: {
            protocolVersion: '2025-06-18',
            capabilities: {},
            clientInfo: { name: 'raw', version: '0' },
          },
        })
      : '';
  return new Promise<{ status: number; body: Json }>((resolve, reject) => {
    const req = request(url + path, { method, headers }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => {
        text += d;
      });
      res.on('end', () => {
        let parsed: Json = text;
        try {
          parsed = JSON.parse(text);
        } catch {}
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

it("takes /mcp only as the sidecar's other endpoints: loopback Host, no other site, JSON posts", async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await startTestSidecar('pm', adapter.url);
  stops.push(pm.stop);
  const port = new URL(pm.url).port;
  const mcp = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    host: `localhost:${port}`,
  };
  // what an MCP client sends is taken
  const ok = await raw(pm.url, 'POST', '/mcp', mcp);
  expect(ok.status).toBe(200);
  expect(ok.body.result.serverInfo.name).toBe('agent-gateway');
  // a rebound name, a browser's Origin, a form post: refused before the MCP handler
  const rebound = await raw(pm.url, 'POST', '/mcp', { ...mcp, host: `evil.example:${port}` });
  expect([rebound.status, rebound.body.error]).toEqual([403, 'bad_host']);
  const browser = await raw(pm.url, 'POST', '/mcp', { ...mcp, origin: 'http://evil.example' });
  expect([browser.status, browser.body.error]).toEqual([403, 'cross_origin']);
  // its own origin is not a browser's cross-origin request (docs/reference/sidecar.md, "Who may
  // call it"): taken
  const local = await raw(pm.url, 'POST', '/mcp', { ...mcp, origin: `http://localhost:${port}` });
  expect(local.status).toBe(200);
  const site = await raw(pm.url, 'POST', '/mcp', { ...mcp, 'sec-fetch-site': 'cross-site' });
  expect([site.status, site.body.error]).toEqual([403, 'cross_origin']);
  const form = await raw(pm.url, 'POST', '/mcp', { ...mcp, 'content-type': 'text/plain' });
  expect([form.status, form.body.error]).toEqual([415, 'not_json']);
  // stateless: no session stream to open or end
  for (const method of ['GET', 'DELETE']) {
    const r = await raw(pm.url, method, '/mcp', mcp);
    expect(r.status, method).toBe(405);
  }
});

it('answers a request whose params do not fit its method with -32602, never -32603 (internal)', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await startTestSidecar('pm', adapter.url);
  stops.push(pm.stop);
  const frame = async (body: unknown) => {
    const res = await fetch(`${pm.url}/mcp`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Json };
  };
  // the SDK answered both -32603: its handler wrapper parses params and calls a failure internal
  const init = { jsonrpc: '2.0', id: 'a', method: 'initialize', params: {} };
  const call = { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 5 } };
  for (const body of [init, call]) {
    const r = await frame(body);
    expect(r, JSON.stringify(body)).toMatchObject({
      status: 200,
      body: { id: body.id, error: { code: -32602, message: `${body.method}: invalid params` } },
    });
  }
  // in a batch, every request is answered and none is run
  const ping = { jsonrpc: '2.0', id: 3, method: 'ping' };
  const batch = await frame([ping, call]);
  expect(batch.body.map((a: Json) => [a.id, a.error.code])).toEqual([
    [3, -32602],
    [2, -32602],
  ]);
  // a good request and an unknown method are the SDK's, as before
  expect((await frame(ping)).body).toMatchObject({ id: 3, result: {} });
  const unknown = await frame({ jsonrpc: '2.0', id: 4, method: 'constructor' });
  expect(unknown.body.error.code).toBe(-32601);
});
