/**
 * The MCP tools `ask` and `await_reply` (docs/reference/mcp.md; CONTRACT.md, "Asking and waiting
 * for the answer") through the sidecar's `/mcp`, with the SDK's own Client (which holds every
 * structuredContent to the tool's outputSchema), against a real adapter: a timeout is a result
 * with the recipients' journey summary, not an error; await_reply then finds the answer; and
 * send_message passes the envelope's times on.
 */
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { connectClient, type McpSession, tool } from '../helpers/mcp.js';
import { startTestSidecar } from '../helpers/sidecar.js';

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

it('asks: a timeout is a result with where the message is; await_reply then has the answer, acked as any', {
  timeout: 60_000,
}, async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await mcpFor('pm', adapter.url);
  const qa = await mcpFor('qa', adapter.url);
  const task = { task_id: 'T-3', description: 'ask over MCP' };
  const asked = await tool(pm.client, 'ask', {
    to: '@qa',
    kind: 'task/request',
    payload: task,
    timeout_seconds: 1,
  });
  expect(asked.isError).toBe(false);
  expect(asked.json).toMatchObject({
    status: 'timeout',
    message: { status: 'delivered', channel: '@qa', duplicate: false },
    recipients: [{ agent: 'qa', state: 'pending', cause: 'waiting_for_poll' }],
  });
  const messageId = asked.json.message.message_id as string;

  const inbox = await tool(qa.client, 'fetch_inbox', { wait_seconds: 5 });
  const [d] = inbox.json.deliveries;
  expect(d.message).toMatchObject({ message_id: messageId, payload: task });
  await tool(qa.client, 'send_message', {
    to: '@pm',
    kind: 'task/result',
    payload: { task_id: 'T-3', status: 'success' },
    reply_to: messageId,
  });
  await tool(qa.client, 'ack', { delivery_ids: [d.delivery_id] });

  const waited = await tool(pm.client, 'await_reply', {
    message_id: messageId,
    timeout_seconds: 5,
  });
  expect(waited.isError).toBe(false);
  expect(waited.json).toMatchObject({
    status: 'replied',
    message: { message_id: messageId, duplicate: true },
    reply: {
      state: 'leased',
      attempt: 1,
      message: { sender: 'qa', reply_to: messageId, kind: 'task/result' },
    },
  });
  const acked = await tool(pm.client, 'ack', { delivery_ids: [waited.json.reply.delivery_id] });
  expect(acked.json.acked).toEqual([waited.json.reply.delivery_id]);
  // the answer is not in pm's inbox: the ask had it
  expect((await tool(pm.client, 'fetch_inbox')).json.deliveries).toEqual([]);
  // waited for again, it is answered as it is now
  const again = await tool(pm.client, 'await_reply', { message_id: messageId, timeout_seconds: 1 });
  expect(again.json).toMatchObject({ status: 'replied', reply: { state: 'acked' } });

  // refusals are results with the catalogue's code naming the field
  const bad = await tool(pm.client, 'ask', {
    to: '@qa',
    kind: 'status',
    payload: {},
    timeout_seconds: 51,
  });
  expect(bad).toMatchObject({ isError: true, json: { field: 'timeout_seconds' } });
  const unknown = await tool(pm.client, 'await_reply', { message_id: 'no-such-key' });
  expect(unknown).toMatchObject({ isError: true, json: { error: 'not_found' } });
});

it('send_message passes deliver_at and ttl_ms on to the envelope', {
  timeout: 60_000,
}, async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await mcpFor('pm', adapter.url);
  const at = new Date(Date.now() + 3_600_000).toISOString();
  const scheduled = await tool(pm.client, 'send_message', {
    to: '@qa',
    kind: 'status',
    payload: {},
    deliver_at: at,
  });
  expect(scheduled).toMatchObject({
    isError: false,
    json: { status: 'delivered', channel_sequence_id: null, scheduled_for: at },
  });
  const expiring = await tool(pm.client, 'send_message', {
    to: '@qa',
    kind: 'status',
    payload: {},
    ttl_ms: 60_000,
  });
  expect(expiring.json.expires_at).toEqual(expect.any(String));
});
