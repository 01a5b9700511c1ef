/**
 * A request too large for `/mcp` (past MCP_MAX_BODY_BYTES, 272 KiB: a message at the adapter's
 * bound and the JSON-RPC around it) is answered in MCP's terms (docs/reference/mcp.md, "Results
 * and errors"), not with a bare HTTP 413 a client shows as an opaque failure:
 * - a `tools/call` is a tool result, `isError` with `payload_too_large` and the bound, as
 *   `agent-gateway mcp` answers it; nothing is sent;
 * - another request is a JSON-RPC error with its id, naming `payload_too_large`;
 * - one whose id cannot be read from the body's ends is HTTP 413 with a JSON-RPC error body
 *   without an id; one declared past the 16 MiB the endpoint drains is answered unread and its
 *   connection closed; one drained leaves its connection serving the next request.
 * The SDK's own Client against the endpoint over real HTTP and a real sidecar and adapter; then
 * the same through the sidecar's own /mcp, once its route leaves the body to the endpoint.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterEach, describe, expect, it } from 'vitest';
import { isGatewayError } from '../../src/protocol/errors.js';
import { sendError } from '../../src/protocol/http.js';
import { frameOf, MCP_MAX_BODY_BYTES, mcpEndpoint } from '../../src/sidecar/mcp-endpoint.js';
import { startTestAdapter } from '../helpers/adapter.js';
import type { Json } from '../helpers/http.js';
import { connectClient, tool } from '../helpers/mcp.js';
import { closed, destroyOpened, exchange, rawConnect } from '../helpers/raw-http.js';
import { startTestSidecar, type TestSidecar } from '../helpers/sidecar.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  destroyOpened();
  for (const stop of stops.splice(0).reverse()) await stop();
});

const HEADERS = {
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
};
const LIMIT = 278_528;

/** The sidecar's endpoint on a server of its own, reading its own bodies. */
async function endpointOf(s: TestSidecar): Promise<string> {
  const handler = mcpEndpoint(s.sidecar.service);
  const server: Server = createServer((req, res) => {
    // as the sidecar's route table: POST only (stateless, no stream to GET)
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    handler(req, res, undefined).catch((err: unknown) => {
      if (isGatewayError(err)) sendError(res, err);
      else res.destroy(err as Error);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  stops.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
}

async function setup() {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await startTestSidecar('pm', adapter.url);
  stops.push(pm.stop);
  const qa = await startTestSidecar('qa', adapter.url);
  stops.push(qa.stop);
  return { pm, qa };
}

/** A task whose description is `bytes` long. */
const task = (bytes: number) => ({
  to: '@qa',
  kind: 'task/request',
  payload: { task_id: 'T-big', description: 'x'.repeat(bytes) },
});

async function expectToolError(url: string, sidecar: TestSidecar, qa: TestSidecar) {
  const { client, errors } = await connectClient(new StreamableHTTPClientTransport(new URL(url)));
  stops.push(() => client.close());
  await client.listTools(); // the client then holds each result to the tool's outputSchema
  const big = await tool(client, 'send_message', task(300 * 1024));
  expect(big).toEqual({
    isError: true,
    json: {
      error: 'payload_too_large',
      message: expect.stringContaining(`larger than the ${LIMIT} bytes /mcp takes`),
      limit_bytes: LIMIT,
    },
  });
  expect(big.json.message).toMatch(/\(\d{6} bytes\)/); // how large it was
  // nothing was sent: not stored, not queued
  expect(sidecar.sidecar.service.status()).toMatchObject({ outbox: { depth: 0 } });
  const { client: qaClient } = await connectClient(
    new StreamableHTTPClientTransport(new URL(`${qa.url}/mcp`)),
  );
  stops.push(() => qaClient.close());
  expect((await tool(qaClient, 'fetch_inbox')).json.deliveries).toEqual([]);
  // just within the adapter's bound, the same call is a send like any
  const fits = await tool(client, 'send_message', task(250 * 1024));
  expect(fits).toMatchObject({ isError: false, json: { status: 'delivered' } });
  // and a too large one in between did not break the client's connection
  expect((await tool(client, 'send_message', task(400 * 1024))).json.error).toBe(
    'payload_too_large',
  );
  expect((await tool(client, 'whoami')).json.agent).toBe('pm');
  expect(errors).toEqual([]);
}

describe('the endpoint reading its own body', () => {
  it('answers a tools/call too large as a tool error, and sends nothing', {
    timeout: 30_000,
  }, async () => {
    const { pm, qa } = await setup();
    await expectToolError(await endpointOf(pm), pm, qa);
  });

  it('answers other frames too large with the id it finds, or a 413 without one', async () => {
    const { pm } = await setup();
    const url = await endpointOf(pm);
    const post = async (body: string, headers: Record<string, string> = {}) => {
      const res = await fetch(url, { method: 'POST', headers: { ...HEADERS, ...headers }, body });
      return { status: res.status, body: (await res.json()) as Json };
    };
    const pad = 'y'.repeat(300 * 1024);
    // the Python SDK's order: id first
    const py = await post(
      `{"jsonrpc":"2.0","id":"py-1","method":"tools/call","params":{"name":"send_message","arguments":{"to":"@qa","kind":"status","payload":{"p":"${pad}"}}}}`,
    );
    expect(py.status).toBe(200);
    expect(py.body).toMatchObject({
      id: 'py-1',
      result: { isError: true, structuredContent: { error: 'payload_too_large' } },
    });
    // another method: a JSON-RPC error with its id
    const ping = await post(
      `{"method":"ping","params":{"_meta":{"p":"${pad}"}},"jsonrpc":"2.0","id":9}`,
    );
    expect(ping.status).toBe(200);
    expect(ping.body).toMatchObject({
      jsonrpc: '2.0',
      id: 9,
      error: {
        code: -32600,
        message: expect.stringMatching(/^payload_too_large: .*278528/),
        data: { error: 'payload_too_large', limit_bytes: LIMIT },
      },
    });
    // no id to answer (a notification, or one hidden in the middle): the HTTP status says it
    for (const body of [
      `{"jsonrpc":"2.0","method":"notifications/x","params":{"p":"${pad}"}}`,
      `{"jsonrpc":"2.0","method":"tools/call","params":{"p":"${pad}","id":4},"x":{"id":5}}`,
    ]) {
      const r = await post(body);
      expect(r.status).toBe(413);
      expect(r.body).toEqual({
        jsonrpc: '2.0',
        error: {
          code: -32600,
          message: expect.stringContaining('payload_too_large'),
          data: expect.objectContaining({ error: 'payload_too_large' }),
        },
      });
    }
    // at the bound it is read, past it not
    const edge = (n: number) => {
      const head = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"p":"';
      return `${head}${'z'.repeat(n - head.length - 4)}"}}}`;
    };
    expect((await post(edge(LIMIT))).body).toEqual({ jsonrpc: '2.0', id: 1, result: {} });
    expect((await post(edge(LIMIT + 1))).body.error.data.error).toBe('payload_too_large');
  });

  it('drains what it answers, and closes a connection whose body it will not read', async () => {
    const { pm } = await setup();
    const url = await endpointOf(pm);
    const frame = (body: string) =>
      `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const s = await rawConnect(url);
    const big = await exchange(
      s,
      frame(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"p":"${'q'.repeat(1 << 20)}"}}`),
    );
    expect(big.status).toBe(200);
    expect(JSON.parse(big.body).error.data.error).toBe('payload_too_large');
    // the same connection takes the next request
    const next = await exchange(s, frame('{"jsonrpc":"2.0","id":2,"method":"ping"}'));
    expect(JSON.parse(next.body)).toEqual({ jsonrpc: '2.0', id: 2, result: {} });

    // declared past 16 MiB: answered before it is sent, and the connection closed
    const t = await rawConnect(url);
    const answer = new Promise<string>((resolve) => {
      let text = '';
      t.on('data', (d: Buffer) => {
        text += d.toString('latin1');
      });
      t.once('close', () => resolve(text));
    });
    t.write(
      `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: ${32 << 20}\r\n\r\n{"jsonrpc":"2.0","id":3,`,
    );
    await closed(t);
    const text = await answer;
    expect(text).toMatch(/^HTTP\/1\.1 413 /);
    expect(text.toLowerCase()).toContain('connection: close');
    expect(text).toContain(`at least ${32 << 20} bytes`);
  });
});

it('finds a request id and method only among the top-level members at either end', () => {
  expect(MCP_MAX_BODY_BYTES).toBe(LIMIT); // 256 KiB and 16 KiB, as mcp.md says
  expect(frameOf('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"id":1', '')).toEqual({
    id: 7,
    method: 'tools/call',
  });
  expect(
    frameOf('{"method":"tools/call","params":{"a', '"b"}},"jsonrpc":"2.0","id":"k\\"1"}'),
  ).toEqual({
    id: 'k"1',
    method: 'tools/call',
  });
  // a nested id is no id; a member cut at the edge is no member; an id that is no id is none
  expect(frameOf('{"params":{"id":1', 'x":{"id":2}}')).toEqual({});
  expect(frameOf('{"id":12', 'x"}}')).toEqual({});
  expect(frameOf('{"id":null,"method":"ping","params":{', '}')).toEqual({ method: 'ping' });
  expect(frameOf('', '')).toEqual({});
});

it("answers a too large tools/call at the sidecar's own /mcp as a tool error", {
  timeout: 30_000,
}, async () => {
  const { pm, qa } = await setup();
  await expectToolError(`${pm.url}/mcp`, pm, qa);
});
