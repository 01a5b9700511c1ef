/**
 * What an agent discovers and finds over the sidecar's `/mcp` (docs/reference/mcp.md,
 * "Resources" and `search_messages`), with the SDK's own Client against real sidecars and a
 * real adapter on loopback:
 * - resources/list lists `agw://channels` and one `agw://channels/{name}` per channel of the
 *   agent's, resources/read answers them as GET /v1/me says, and a channel not its own is
 *   MCP's "resource not found" (-32002);
 * - search_messages finds, newest first, the messages the agent may read (its channels and its
 *   direct messages) holding every word of the query, never another agent's direct messages;
 *   a channel it may not read is the adapter's refusal as a tool error; a search past its scan
 *   bound says it is not complete.
 */
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import type { Json } from '../helpers/http.js';
import { connectClient, type McpSession, tool } from '../helpers/mcp.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { CHANNELS } from '../helpers/topology.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

async function mcpFor(agent: string, adapterUrl: string): Promise<McpSession> {
  const s = await startTestSidecar(agent, adapterUrl);
  stops.push(s.stop);
  const session = await connectClient(new StreamableHTTPClientTransport(new URL(`${s.url}/mcp`)));
  stops.push(() => session.client.close());
  return session;
}

it("lists and reads the agent's channels and their members as resources", async () => {
  const adapter = await startTestAdapter();
  let stopped = false;
  stops.push(() => (stopped ? undefined : adapter.stop()));
  const { client, errors } = await mcpFor('qa', adapter.url);
  expect(client.getServerCapabilities()?.resources).toBeDefined();

  const mine = Object.entries(CHANNELS).filter(([, members]) => members.includes('qa'));
  const { resources } = await client.listResources();
  expect(resources.map((r) => r.uri).sort()).toEqual(
    ['agw://channels', ...mine.map(([name]) => `agw://channels/${name}`)].sort(),
  );
  for (const r of resources) {
    expect(r).toMatchObject({ mimeType: 'application/json', name: expect.any(String) });
    expect(r.description?.length, r.uri).toBeGreaterThan(10);
  }
  const { resourceTemplates } = await client.listResourceTemplates();
  expect(resourceTemplates).toEqual([
    expect.objectContaining({ uriTemplate: 'agw://channels/{name}', mimeType: 'application/json' }),
  ]);

  const read = async (uri: string) => {
    const { contents } = await client.readResource({ uri });
    expect(contents).toHaveLength(1);
    expect(contents[0]).toMatchObject({ uri, mimeType: 'application/json' });
    return JSON.parse((contents[0] as { text: string }).text) as Json;
  };
  // what whoami (GET /v1/me) says, with each channel's own resource
  const me = (await tool(client, 'whoami')).json;
  const all = await read('agw://channels');
  expect(all).toEqual({
    agent: 'qa',
    channels: me.channels.map((c: Json) => ({ ...c, uri: `agw://channels/${c.name}` })),
  });
  expect(all.channels.map((c: Json) => [c.name, c.members])).toEqual(
    mine.map(([name, members]) => [name, [...members]]),
  );
  expect(await read('agw://channels/product')).toEqual({
    name: 'product',
    members: [...CHANNELS.product!],
    uri: 'agw://channels/product',
  });

  // another's channel, or no channel at all, is no resource of qa's
  for (const uri of ['agw://channels/platform', 'agw://channels/nope', 'file:///etc/passwd']) {
    const err = await client.readResource({ uri }).catch((e: unknown) => e);
    expect(err, uri).toBeInstanceOf(McpError);
    expect((err as McpError).code, uri).toBe(-32002);
    expect((err as McpError).message, uri).toMatch(/not found/i);
  }
  expect(errors).toEqual([]);

  // with the adapter away, a list is a JSON-RPC error carrying the catalogue's refusal
  await adapter.stop();
  stopped = true;
  const away = await client.listResources().catch((e: unknown) => e);
  expect(away).toBeInstanceOf(McpError);
  expect((away as McpError).code).toBe(-32000);
  const data = (away as McpError).data as Json;
  expect((away as McpError).message).toContain(`${data.error}: `);
  expect(data).toMatchObject({ error: expect.any(String), message: expect.any(String) });
  expect(data.retry_after_s).toBeGreaterThan(0);
});

it('searches what the agent may read, newest first, every word required', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await mcpFor('pm', adapter.url);
  const qa = await mcpFor('qa', adapter.url);
  const send = async (c: McpSession, to: string, payload: Json) => {
    const r = await tool(c.client, 'send_message', { to, kind: 'status', payload });
    expect(r.isError, JSON.stringify(r.json)).toBe(false);
    return r.json.message_id as string;
  };
  const older = await send(pm, 'product', { note: 'Release notes drafted' });
  const nested = await send(pm, 'product', { items: [{ text: 'the RELEASE is near; notes?' }] });
  await send(pm, 'product', { note: 'releases without the other word' }); // no stemming
  const direct = await send(pm, '@qa', { note: 'release notes for qa alone' });
  const elsewhere = await send(pm, '@engineering', { note: 'release notes for engineering' });
  await send(pm, 'all-agents', { note: 'lunch' });

  const found = await tool(qa.client, 'search_messages', { query: 'notes release' });
  expect(found.isError).toBe(false);
  // qa's channels and its direct messages: not engineering's, not a message without a word
  expect(found.json.messages.map((m: Json) => m.message_id)).toEqual([direct, nested, older]);
  expect(found.json).toMatchObject({ complete: true, scanned: 5 });
  expect(found.json.channels.sort()).toEqual(['@qa', 'all-agents', 'product']);
  expect(found.json.messages[0]).toMatchObject({ sender: 'pm', kind: 'status', channel: '@qa' });
  expect(found.json.messages.map((m: Json) => m.message_id)).not.toContain(elsewhere);

  // one channel, and a limit: the newest first
  const one = await tool(qa.client, 'search_messages', {
    query: 'RELEASE',
    channel: 'product',
    limit: 1,
  });
  expect(one.json.messages.map((m: Json) => m.message_id)).toEqual([nested]);
  expect(one.json).toMatchObject({ channels: ['product'], complete: true });
  // the kind is searched too
  const kind = await tool(qa.client, 'search_messages', { query: 'status', channel: '@qa' });
  expect(kind.json.messages.map((m: Json) => m.message_id)).toEqual([direct]);

  // refusals are tool results with the catalogue's code: the adapter's for a channel qa may
  // not read, the arguments' own for the rest
  const notMine = await tool(qa.client, 'search_messages', { query: 'x', channel: 'platform' });
  expect(notMine).toMatchObject({ isError: true, json: { error: 'not_member' } });
  const other = await tool(qa.client, 'search_messages', { query: 'x', channel: '@engineering' });
  expect(other.isError).toBe(true);
  expect(other.json.error).toMatch(/^not_/);
  for (const [args, field] of [
    [{}, 'query'],
    [{ query: '' }, 'query'],
    [{ query: '?!' }, 'query'],
    [{ query: 'x', limit: 101 }, 'limit'],
    [{ query: 'x', channel: 'no such' }, 'channel'],
    [{ query: 'x', sender: 'qa' }, 'sender'],
  ] as const) {
    const r = await tool(qa.client, 'search_messages', args);
    expect(r, JSON.stringify(args)).toMatchObject({
      isError: true,
      json: { error: 'invalid_request', field },
    });
  }
  expect([...pm.errors, ...qa.errors]).toEqual([]);
});

it('reads a long channel newest first, and says when it did not reach its start', {
  timeout: 60_000,
}, async () => {
  const adapter = await startTestAdapter({ queueCapacity: '30000' });
  stops.push(adapter.stop);
  const s = await startTestSidecar('pm', adapter.url);
  stops.push(s.stop);
  // 5,500 messages from qa to pm, in batches: past the 5,000 a search reads of one channel
  const total = 5_500;
  for (let i = 1; i <= total; ) {
    const messages = [];
    for (let n = 0; n < 100 && i <= total; n++, i++)
      messages.push({
        to: '@pm',
        kind: 'status',
        payload: { note: i === 1 ? 'needle first' : i === total ? 'needle last' : `hay ${i}` },
        idempotency_key: `k-${i}`,
      });
    const res = await fetch(`${adapter.url}/v1/messages/batch`, {
      method: 'POST',
      headers: { authorization: 'Bearer token-qa', 'content-type': 'application/json' },
      body: JSON.stringify({ messages }),
    });
    expect(res.status, await res.clone().text()).toBeLessThan(300);
  }
  const session = await connectClient(new StreamableHTTPClientTransport(new URL(`${s.url}/mcp`)));
  stops.push(() => session.client.close());
  const r = await tool(session.client, 'search_messages', { query: 'needle', channel: '@pm' });
  expect(r.isError).toBe(false);
  // the newest 5,000: the last needle, not the first
  expect(r.json.messages.map((m: Json) => m.payload.note)).toEqual(['needle last']);
  expect(r.json).toMatchObject({ complete: false, scanned: 5_000 });
  // found its `limit` before the bound: complete, whatever lies further back
  const enough = await tool(session.client, 'search_messages', {
    query: 'needle',
    channel: '@pm',
    limit: 1,
  });
  expect(enough.json).toMatchObject({ complete: true });
  expect(enough.json.scanned).toBeLessThanOrEqual(1000);
});
