/**
 * A poll the agent gives up (its socket closes before the answer) is given up upstream too: the
 * sidecar aborts its own poll to the adapter, the adapter's parked poll ends without leasing, and a
 * message sent after it waits, pending with 0 attempts, for the agent's next poll
 * (docs/reference/sidecar.md, "A poll the agent gives up"; each abandoned poll once burned an
 * attempt, and after four the message was dead-lettered unseen). Also for the MCP tool fetch_inbox
 * (its /mcp request closed, in either MCP era, or its call cancelled through `agent-gateway mcp`),
 * and an abandoned poll is no failure to the sidecar's breaker. A real adapter and a real sidecar
 * on loopback; the adapter's `agw_agent_parked_polls` says when its poll is parked and when it
 * has ended, and a proxy between sidecar and adapter how it ended (closed by the sidecar, or
 * answered).
 */
import { type ClientRequest, request } from 'node:http';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { CLI } from '../helpers/cli.js';
import { call, type Json, recordingProxy, sendAs } from '../helpers/http.js';
import { connectClient } from '../helpers/mcp.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { parkedPolls } from '../helpers/wait.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

type Stack = Awaited<ReturnType<typeof stack>>;

/** An adapter, and qa's sidecar in front of it through a proxy that sees how each call ends. */
async function stack() {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const proxy = await recordingProxy(adapter.url);
  stops.push(proxy.close);
  const qa = await startTestSidecar('qa', proxy.url);
  stops.push(qa.stop);
  return { adapter, proxy, qa };
}

/** Scrapes until qa has `n` polls parked at the adapter (each turn a scrape: no guessed sleep). */
async function untilParked(adapterUrl: string, n: number): Promise<void> {
  while ((await parkedPolls(adapterUrl, 'qa')) !== n) await new Promise((r) => setImmediate(r));
}

/** A request the test will give up: its socket destroyed before any answer. */
function abandoned(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): ClientRequest {
  const req = request(`${url}${path}`, { method, headers });
  req.on('error', () => {}); // the socket we destroy
  req.on('response', (res) => {
    throw new Error(`answered ${res.statusCode} before it was given up`);
  });
  req.end(body);
  return req;
}

/**
 * Gives a poll up once it is parked at the adapter, and waits until the adapter's has ended:
 * because the sidecar closed it before an answer, not because its 10 s wait ran out (which
 * would end it without the fix too, answered 200).
 */
async function abandon(s: Stack, req: ClientRequest | (() => void)): Promise<void> {
  const before = s.proxy.ended.length;
  await untilParked(s.adapter.url, 1);
  if (typeof req === 'function') req();
  else req.destroy();
  await untilParked(s.adapter.url, 0);
  const polls = s.proxy.ended.slice(before).filter((e) => / \/v1\/inbox/.test(e));
  expect(polls).toEqual([
    expect.stringMatching(/^(GET|POST) \/v1\/inbox\?wait=10&max=\d+ -> closed$/),
  ]);
}

/** A message from pm to qa, sent after qa gave its poll up, waits for qa untouched. */
async function expectStillPending(adapterUrl: string, qaUrl: string): Promise<void> {
  const id = await sendAs(adapterUrl, 'pm', '@qa', 'status', { n: 1 });
  const status = await call(adapterUrl, 'GET', `/v1/messages/${id}`, { agent: 'pm' });
  expect(status.body.recipients).toEqual([
    expect.objectContaining({ agent: 'qa', state: 'pending', attempts: 0 }),
  ]);
  // the next poll hands it over, as its first attempt
  const next = await call(qaUrl, 'GET', '/v1/inbox?wait=5');
  expect(next.status).toBe(200);
  expect(next.body.deliveries.map((d: Json) => [d.message.message_id, d.attempt])).toEqual([
    [id, 1],
  ]);
}

it('a poll the agent gives up is given up at the adapter: the next message waits with 0 attempts', async () => {
  const s = await stack();
  await abandon(s, abandoned(s.qa.url, 'GET', '/v1/inbox?wait=10'));
  await expectStillPending(s.adapter.url, s.qa.url);
}, 30_000);

it('a poll carrying acks (POST /v1/inbox) that the agent gives up is given up at the adapter too', async () => {
  const s = await stack();
  await sendAs(s.adapter.url, 'pm', '@qa', 'status', { n: 0 });
  const [d0] = (await call(s.qa.url, 'GET', '/v1/inbox?wait=5')).body.deliveries as Json[];
  const headers = { 'content-type': 'application/json' };
  const acks = JSON.stringify({ delivery_ids: [d0.delivery_id] });
  await abandon(s, abandoned(s.qa.url, 'POST', '/v1/inbox?wait=10', headers, acks));
  await expectStillPending(s.adapter.url, s.qa.url);
}, 30_000);

it('an MCP fetch_inbox whose HTTP request is given up is given up at the adapter too', async () => {
  const s = await stack();
  const rpc = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'fetch_inbox', arguments: { wait_seconds: 10 } },
  });
  const headers = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
  };
  await abandon(s, abandoned(s.qa.url, 'POST', '/mcp', headers, rpc));
  await expectStillPending(s.adapter.url, s.qa.url);
}, 30_000);

it('an MCP 2026-07-28 fetch_inbox whose HTTP request is given up is given up at the adapter too', async () => {
  const s = await stack();
  // that era's request: the version in `_meta` and in the headers (the SDK's createMcpHandler)
  const rpc = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: {
      name: 'fetch_inbox',
      arguments: { wait_seconds: 10 },
      _meta: {
        'io.modelcontextprotocol/protocolVersion': '2026-07-28',
        'io.modelcontextprotocol/clientInfo': { name: 'pinned', version: '1.0.0' },
        'io.modelcontextprotocol/clientCapabilities': {},
      },
    },
  });
  const headers = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': 'tools/call',
    'mcp-name': 'fetch_inbox',
  };
  await abandon(s, abandoned(s.qa.url, 'POST', '/mcp', headers, rpc));
  await expectStillPending(s.adapter.url, s.qa.url);
}, 30_000);

it('abandoned polls are no failures to the breaker: it stays closed', async () => {
  const s = await stack();
  // more than the breaker's volume threshold (5): were they failures, it would open
  for (let i = 0; i < 6; i++) {
    await abandon(s, abandoned(s.qa.url, 'GET', '/v1/inbox?wait=10'));
  }
  const status = await call(s.qa.url, 'GET', '/v1/status');
  expect(status.body.breaker.state).toBe('closed');
  expect(status.body.last_error).toBeNull();
  await expectStillPending(s.adapter.url, s.qa.url);
}, 30_000);

it('a fetch_inbox cancelled through agent-gateway mcp (stdio) is given up at the adapter too', async () => {
  const s = await stack();
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, 'mcp'],
    env: { PATH: process.env.PATH ?? '', AGW_SIDECAR_URL: s.qa.url },
    stderr: 'pipe',
  });
  const { client } = await connectClient(transport);
  const pid = transport.pid!;
  stops.push(async () => {
    await client.close();
    try {
      process.kill(pid, 'SIGKILL');
    } catch {} // gone with the client's close
  });
  // the client gives the call up: the SDK sends notifications/cancelled for it
  const cancel = new AbortController();
  const fetching = client.callTool(
    { name: 'fetch_inbox', arguments: { wait_seconds: 10 } },
    undefined,
    { signal: cancel.signal },
  );
  fetching.catch(() => {});
  await abandon(s, () => cancel.abort());
  await expect(fetching).rejects.toThrow();
  await expectStillPending(s.adapter.url, s.qa.url);
}, 30_000);
