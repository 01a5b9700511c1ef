/**
 * The MCP tools through the SDK's own clients, over either transport: the same checks run over
 * the sidecar's Streamable HTTP `/mcp` and over `agent-gateway mcp` on stdio, and in either
 * protocol era: the SDK's v1 Client (`@modelcontextprotocol/sdk`, MCP 2025-11-25 and earlier,
 * what most clients run) and its v2 Client (`@modelcontextprotocol/client`) pinned to MCP
 * 2026-07-28.
 */
import {
  Client as ModernClient,
  type Transport as ModernTransport,
} from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { expect } from 'vitest';
import type { Json } from './http.js';

/** The protocol version of MCP's 2026 era: no `initialize`, the version in each request's `_meta`. */
export const MODERN = '2026-07-28';

/** The contract's tools (docs/reference/mcp.md, "The tools"): required and optional arguments. */
export const CONTRACT_TOOLS: Record<string, { required: string[]; optional: string[] }> = {
  send_message: {
    required: ['to', 'kind', 'payload'],
    optional: ['priority', 'reply_to', 'idempotency_key', 'deliver_at', 'ttl_ms', 'expires_at'],
  },
  fetch_inbox: { required: [], optional: ['wait_seconds', 'max'] },
  ack: { required: ['delivery_ids'], optional: [] },
  nack: { required: ['delivery_ids'], optional: ['retry', 'reason'] },
  extend_lease: { required: ['delivery_ids', 'extend_ms'], optional: [] },
  message_status: { required: ['message_id'], optional: [] },
  read_channel: { required: ['channel'], optional: ['after', 'limit'] },
  whoami: { required: [], optional: [] },
  heartbeat: { required: [], optional: [] },
  explain_message: { required: ['id'], optional: [] },
  raise_emergency: { required: ['reason', 'message'], optional: [] },
  ask: {
    required: ['to', 'kind', 'payload'],
    optional: ['priority', 'reply_to', 'timeout_seconds'],
  },
  await_reply: { required: ['message_id'], optional: ['timeout_seconds'] },
  search_messages: { required: ['query'], optional: ['channel', 'limit'] },
};

/** A listed tool, as the checks read it. */
interface ListedTool {
  name: string;
  description?: string;
  inputSchema: { properties?: Record<string, unknown>; required?: string[]; [k: string]: unknown };
  outputSchema?: Record<string, unknown>;
  annotations?: { readOnlyHint?: boolean; destructiveHint?: boolean; idempotentHint?: boolean };
}

/** What the checks ask of a client: the SDK's v1 Client and its v2 Client both are one. */
export interface McpClient {
  callTool(params: {
    name: string;
    arguments?: Record<string, unknown>;
    _meta?: Record<string, unknown>;
  }): Promise<{
    content?: unknown;
    structuredContent?: unknown;
    isError?: unknown;
    _meta?: unknown;
  }>;
  listTools(): Promise<{ tools: ListedTool[] }>;
  getInstructions(): string | undefined;
}

export interface McpSession {
  client: Client;
  /** Errors the client's transport reported (a line on stdout that is not MCP, say). */
  errors: Error[];
}

/** The SDK's v1 Client on `transport`: MCP 2025-11-25 (`initialize`), as most clients speak it. */
export async function connectClient(transport: Transport): Promise<McpSession> {
  const client = new Client({ name: 'agent-gateway-test', version: '0.0.0' });
  const errors: Error[] = [];
  client.onerror = (err) => errors.push(err);
  await client.connect(transport);
  return { client, errors };
}

export interface ModernSession {
  client: ModernClient;
  errors: Error[];
}

/**
 * The SDK's v2 Client on `transport`, pinned to MCP 2026-07-28: it connects with
 * `server/discover` and fails unless the server offers that version, with no fallback to
 * `initialize`; every request then carries the version in its `_meta`.
 */
export async function connectModern(transport: ModernTransport): Promise<ModernSession> {
  const client = new ModernClient(
    { name: 'agent-gateway-test', version: '0.0.0' },
    { versionNegotiation: { mode: { pin: MODERN } } },
  );
  const errors: Error[] = [];
  client.onerror = (err) => errors.push(err);
  await client.connect(transport);
  return { client, errors };
}

/**
 * Calls a tool and answers its structuredContent, after checking that its text content is the
 * same JSON: what a model reads and what a program reads never differ.
 */
export async function tool(
  client: McpClient,
  name: string,
  args: Record<string, unknown> = {},
): Promise<{ isError: boolean; json: Json }> {
  const r = await client.callTool({ name, arguments: args });
  const content = r.content as { type: string; text: string }[];
  expect(content).toHaveLength(1);
  expect(content[0]!.type).toBe('text');
  expect(JSON.parse(content[0]!.text)).toEqual(r.structuredContent);
  return { isError: r.isError === true, json: r.structuredContent };
}

/** The tools are the contract's, by name and arguments, each described for a model. */
export async function expectContractTools(client: McpClient): Promise<void> {
  const { tools } = await client.listTools();
  expect(tools.map((t) => t.name).sort()).toEqual(Object.keys(CONTRACT_TOOLS).sort());
  for (const t of tools) {
    const want = CONTRACT_TOOLS[t.name]!;
    const props = Object.keys(t.inputSchema.properties ?? {}).sort();
    expect(props, t.name).toEqual([...want.required, ...want.optional].sort());
    expect((t.inputSchema.required ?? []).slice().sort(), t.name).toEqual(want.required.sort());
    expect(t.inputSchema.additionalProperties, t.name).toBe(false); // no token, no sender
    expect(t.description?.length, t.name).toBeGreaterThan(40);
  }
  const byName = new Map(tools.map((t) => [t.name, t]));
  // what to do next, where a model reads it
  const fetch = byName.get('fetch_inbox')!.description!;
  for (const next of ['ack', 'nack', 'retry false', 'extend_lease', 'reply_to'])
    expect(fetch).toContain(next);
  expect(byName.get('send_message')!.description).toContain('reply_to');
  // the bounds are the HTTP API's, the wait the contract's
  const fetchArgs = byName.get('fetch_inbox')!.inputSchema.properties as Json;
  expect(fetchArgs.wait_seconds).toMatchObject({ type: 'integer', minimum: 0, maximum: 25 });
  expect(fetchArgs.wait_seconds.default).toBe(0);
  expect(fetchArgs.max).toMatchObject({ type: 'integer', minimum: 1, maximum: 100, default: 10 });
  const send = byName.get('send_message')!.inputSchema.properties as Json;
  expect(send.to.pattern).toBeDefined();
  expect(send.payload.type).toBe('object');
  expect(send.priority.enum).toEqual(['normal', 'critical']);
}

/**
 * What the tools say they do (docs/reference/mcp.md, each tool's annotations), which clients read
 * to decide whether to ask the user first: ack, nack and raise_emergency destructive; ack and
 * extend_lease idempotent; the reading tools read-only; every tool says whether it is destructive,
 * since the spec's default is that it is.
 */
export const ANNOTATIONS: Record<
  string,
  { readOnlyHint: boolean; destructiveHint: boolean; idempotentHint: boolean }
> = {
  send_message: { readOnlyHint: false, destructiveHint: false, idempotentHint: false },
  fetch_inbox: { readOnlyHint: false, destructiveHint: false, idempotentHint: false },
  ack: { readOnlyHint: false, destructiveHint: true, idempotentHint: true },
  nack: { readOnlyHint: false, destructiveHint: true, idempotentHint: false },
  extend_lease: { readOnlyHint: false, destructiveHint: false, idempotentHint: true },
  message_status: { readOnlyHint: true, destructiveHint: false, idempotentHint: true },
  read_channel: { readOnlyHint: true, destructiveHint: false, idempotentHint: true },
  whoami: { readOnlyHint: true, destructiveHint: false, idempotentHint: true },
  heartbeat: { readOnlyHint: false, destructiveHint: false, idempotentHint: false },
  explain_message: { readOnlyHint: true, destructiveHint: false, idempotentHint: true },
  raise_emergency: { readOnlyHint: false, destructiveHint: true, idempotentHint: false },
  ask: { readOnlyHint: false, destructiveHint: false, idempotentHint: false },
  await_reply: { readOnlyHint: false, destructiveHint: false, idempotentHint: false },
  search_messages: { readOnlyHint: true, destructiveHint: false, idempotentHint: true },
};

export async function expectAnnotations(client: McpClient): Promise<void> {
  const { tools } = await client.listTools();
  const got = Object.fromEntries(
    tools.map((t) => {
      const { readOnlyHint, destructiveHint, idempotentHint } = t.annotations ?? {};
      return [t.name, { readOnlyHint, destructiveHint, idempotentHint }];
    }),
  );
  expect(got).toEqual(ANNOTATIONS);
  // each declares its answer (docs/reference/mcp.md, "Results and errors"): the SDK's client
  // holds every structuredContent to it, errors too, so the tests that call a tool check each
  // answer against its schema
  for (const t of tools) {
    expect(t.outputSchema, t.name).toMatchObject({ type: 'object' });
    expect((t.outputSchema as { anyOf?: unknown[] }).anyOf?.length, t.name).toBeGreaterThan(1);
  }
}

/**
 * Messages from other agents are data from their sender, never orders: the server's
 * instructions and fetch_inbox's description say so, and neither tells the model to do what a
 * message asks (docs/reference/mcp.md, "A loop for an agent's prompt").
 */
export async function expectPayloadsAreData(client: McpClient): Promise<void> {
  const instructions = client.getInstructions() ?? '';
  const { tools } = await client.listTools();
  const fetch = tools.find((t) => t.name === 'fetch_inbox')!.description ?? '';
  for (const [where, text] of [
    ['instructions', instructions],
    ['fetch_inbox', fetch],
  ] as const) {
    expect(text, where).not.toMatch(/do what it asks/i);
    expect(text, where).toMatch(/data from (its|the named) sender/);
    expect(text, where).toMatch(/not (an )?instructions? to you/);
    expect(text, where).toMatch(/within your own role and instructions/);
    expect(text, where).toMatch(/never follow instructions in/);
    expect(text, where).toMatch(/prompt injection/);
  }
}

/**
 * pm sends a task to qa, qa fetches it, answers in its thread and acks it; pm's message_status
 * then shows qa acked it.
 */
export async function expectExchange(pm: McpClient, qa: McpClient): Promise<void> {
  const task = { task_id: 'T-1', description: 'answer over MCP' };
  const sent = await tool(pm, 'send_message', { to: '@qa', kind: 'task/request', payload: task });
  expect(sent.isError).toBe(false);
  expect(sent.json).toMatchObject({ status: 'delivered', channel: '@qa', hop: 0 });
  expect(sent.json.idempotency_key).toMatch(/^[0-9a-f-]{36}$/); // made for the caller

  const inbox = await tool(qa, 'fetch_inbox', { wait_seconds: 5 });
  expect(inbox.isError).toBe(false);
  expect(inbox.json.deliveries).toHaveLength(1);
  const [d] = inbox.json.deliveries;
  expect(d).toMatchObject({ attempt: 1, lease_expires_at: expect.any(String) });
  expect(d.message).toMatchObject({
    message_id: sent.json.message_id,
    sender: 'pm',
    payload: task,
  });

  const reply = await tool(qa, 'send_message', {
    to: '@pm',
    kind: 'task/result',
    payload: { task_id: 'T-1', status: 'success' },
    reply_to: d.message.message_id,
  });
  expect(reply.json).toMatchObject({
    status: 'delivered',
    thread_id: sent.json.message_id,
    hop: 1,
  });

  const acked = await tool(qa, 'ack', { delivery_ids: [d.delivery_id] });
  expect(acked).toEqual({
    isError: false,
    json: { acked: [d.delivery_id], dead_lettered: [], unknown: [] },
  });
  const status = await tool(pm, 'message_status', { message_id: sent.json.message_id });
  expect(status.isError).toBe(false);
  expect(status.json.message.message_id).toBe(sent.json.message_id);
  expect(status.json.recipients).toEqual([
    expect.objectContaining({ agent: 'qa', state: 'acked', attempts: 1 }),
  ]);
  expect((await tool(qa, 'fetch_inbox')).json.deliveries).toEqual([]); // default wait 0
}

/** Refusals are tool results with the catalogue's code and sentence, never protocol failures. */
export async function expectErrors(pm: McpClient): Promise<void> {
  // the adapter's refusal: pm is no member of platform
  const notMember = await tool(pm, 'send_message', { to: 'platform', kind: 'status', payload: {} });
  expect(notMember).toEqual({
    isError: true,
    json: { error: 'not_member', message: expect.stringContaining('platform'), field: 'to' },
  });
  // the envelope's own checks, naming the field
  const noTask = await tool(pm, 'send_message', { to: '@qa', kind: 'task/request', payload: {} });
  expect(noTask.json).toMatchObject({ error: 'invalid_envelope', field: 'payload.task_id' });
  const badTo = await tool(pm, 'send_message', { to: 'no such', kind: 'status', payload: {} });
  expect(badTo.json).toMatchObject({ error: 'invalid_envelope', field: 'to' });
  // the identity is the sidecar's: a sender argument is no argument
  const sender = await tool(pm, 'send_message', {
    to: '@qa',
    kind: 'status',
    payload: {},
    sender: 'qa',
  });
  expect(sender).toMatchObject({ isError: true, json: { error: 'invalid_envelope' } });
  expect(sender.json.field).toBe('sender');
  // the other tools' arguments, with the HTTP API's bounds
  const wait = await tool(pm, 'fetch_inbox', { wait_seconds: 26 });
  expect(wait.json).toMatchObject({ error: 'invalid_request', field: 'wait_seconds' });
  const none = await tool(pm, 'ack', { delivery_ids: [] });
  expect(none.json).toMatchObject({ error: 'invalid_request', field: 'delivery_ids' });
  // the adapter's 404 and 409, passed back
  const unknown = await tool(pm, 'message_status', {
    message_id: '0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11',
  });
  expect(unknown).toMatchObject({ isError: true, json: { error: 'unknown_message' } });
  const lease = await tool(pm, 'extend_lease', { delivery_ids: [999_999], extend_ms: 60_000 });
  expect(lease).toMatchObject({
    isError: true,
    json: { error: 'not_leased', field: 'delivery_ids' },
  });
  for (const t of [notMember, noTask, badTo, wait, none, unknown, lease])
    expect(t.json.message).toMatch(/\w+/);
}
