/**
 * A bounded fuzz of every POST both programs take, hunting bad input that still gets a 500:
 * valid bodies, bodies mutated from valid ones (a field's value replaced, an Object.prototype
 * name added or renamed into a field, the text cut or a character replaced), any JSON and any
 * text, thrown at the adapter on SQLite and on PostgreSQL, at a sidecar in front of it, and at
 * the sidecar's MCP endpoint (raw JSON-RPC frames, and tool calls through the SDK's client).
 * Whatever arrives, no answer is a 5xx, every refusal carries a documented code, and no MCP tool
 * answers `internal`.
 *
 * Fixed seeds and a fixed number of runs (1,800 requests in all), so that a failure repeats:
 * 20 s on two cores at load 12 (sync=normal: fsyncs are not what is tested). With kind
 * "constructor" a 500 again, each of its four targets fails within its first runs.
 */
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { bodies, expectAnsweredWell, protoName, wrongValue } from '../helpers/bad-input.js';
import { type Json, pollAs, sendAs } from '../helpers/http.js';
import { CONTRACT_TOOLS, connectClient, type McpSession, tool } from '../helpers/mcp.js';
import { testDatabase } from '../helpers/pg.js';
import { startTestSidecar, type TestSidecar } from '../helpers/sidecar.js';
import { tokenOf } from '../helpers/topology.js';

const SEED = 20261204;
const stops: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/** Deliveries 1-8 exist (some leased to qa): ids near them name real rows, most name none. */
const ids = fc.array(fc.oneof(fc.integer({ min: 1, max: 12 }), fc.integer()), {
  minLength: 1,
  maxLength: 4,
});
const envelope = fc.record(
  {
    idempotency_key: fc.uuid(),
    to: fc.constantFrom('@qa', 'product', '@pm', 'platform'),
    kind: fc.constantFrom('status', 'task/request', 'constructor', 'escalation'),
    priority: fc.constantFrom('normal', 'critical'),
    payload: fc.constantFrom({}, { task_id: 'T-1', description: 'fuzz' }, { n: 1 }),
  },
  { requiredKeys: ['idempotency_key', 'to', 'kind'] },
);
const nack = fc.record(
  { delivery_ids: ids, retry: fc.boolean(), reason: fc.string({ maxLength: 20 }) },
  { requiredKeys: ['delivery_ids'] },
);
const lease = fc.record({ delivery_ids: ids, extend_ms: fc.integer({ min: 1, max: 900_000 }) });
const emergency = fc.record(
  {
    reason: fc.constantFrom('manual', 'stuck'),
    message: fc.string({ minLength: 1, maxLength: 40 }),
    fields: fc.dictionary(protoName, fc.string({ maxLength: 8 }), { maxKeys: 3 }),
  },
  { requiredKeys: ['reason', 'message'] },
);

/**
 * Each POST a program takes, with the body it expects. The inbox never waits (wait=0): a fuzz
 * that parks polls measures nothing but time.
 */
const ADAPTER_POSTS: [string, fc.Arbitrary<Record<string, unknown>>][] = [
  ['/v1/messages', envelope],
  [
    '/v1/messages/batch',
    fc.array(envelope, { minLength: 1, maxLength: 4 }).map((m) => ({ messages: m })),
  ],
  ['/v1/acks', ids.map((d) => ({ delivery_ids: d }))],
  ['/v1/inbox?wait=0&max=2', ids.map((d) => ({ delivery_ids: d }))],
  ['/v1/nacks', nack],
  ['/v1/leases', lease],
  ['/v1/heartbeat', fc.constant({})],
];
const SIDECAR_POSTS: [string, fc.Arbitrary<Record<string, unknown>>][] = [
  ...ADAPTER_POSTS.filter(([path]) => path !== '/v1/messages/batch'),
  ['/v1/emergency', emergency],
];

/** A POST of `body` as JSON; the answer's body parsed when it is JSON. */
async function post(url: string, path: string, body: string, headers: Record<string, string>) {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  const text = await res.text();
  let parsed: Json = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: res.status, body: parsed };
}

/** Any POST of `posts`, with a body valid, mutated or random. */
const requests = (posts: typeof ADAPTER_POSTS) =>
  fc.oneof(...posts.map(([path, valid]) => bodies(valid).map((body) => ({ path, body }))));

/** Some deliveries to act on: 8 messages to qa, 4 of them leased to qa. */
async function seed(url: string): Promise<void> {
  for (let i = 0; i < 8; i++) await sendAs(url, 'pm', '@qa');
  await pollAs(url, 'qa', { max: 4 });
}

const STORES = {
  SQLite: () => startTestAdapter({ sync: 'normal' }),
  PostgreSQL: async () => {
    const db = await testDatabase();
    stops.push(() => db.drop());
    return startTestAdapter({ db: db.url, sync: 'normal' });
  },
};

describe.each(Object.entries(STORES))('the adapter on %s', (_, start) => {
  let t: TestAdapter;
  beforeAll(async () => {
    t = await start();
    stops.push(t.stop);
    await seed(t.url);
  });

  it('never answers 5xx to a body of any of its POSTs, as any agent', {
    timeout: 60_000,
  }, async () => {
    await fc.assert(
      fc.asyncProperty(requests(ADAPTER_POSTS), fc.constantFrom('pm', 'qa'), async (r, agent) => {
        const res = await post(t.url, r.path, r.body, {
          authorization: `Bearer ${tokenOf(agent)}`,
        });
        expectAnsweredWell(`${agent} POST ${r.path} ${r.body}`, res);
        if (r.path.endsWith('/batch') && res.status === 200) {
          for (const item of res.body.results)
            expectAnsweredWell(`${r.body} item`, { status: item.status, body: item });
        }
      }),
      { numRuns: 400, seed: SEED },
    );
    // and it is still up and storing
    await sendAs(t.url, 'pm', 'product');
  });
});

describe('a sidecar and its MCP endpoint', () => {
  let pm: TestSidecar;
  let mcp: McpSession;
  beforeAll(async () => {
    const t = await STORES.SQLite();
    stops.push(t.stop);
    await seed(t.url);
    pm = await startTestSidecar('pm', t.url);
    stops.push(pm.stop);
    mcp = await connectClient(new StreamableHTTPClientTransport(new URL(`${pm.url}/mcp`)));
    stops.push(() => mcp.client.close());
  });

  it('never answers 5xx to a body of any of its POSTs', { timeout: 60_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(requests(SIDECAR_POSTS), async (r) => {
        expectAnsweredWell(`POST ${r.path} ${r.body}`, await post(pm.url, r.path, r.body, {}));
      }),
      { numRuns: 400, seed: SEED + 1 },
    );
  });

  /**
   * The arguments each tool takes, valid; `fetch_inbox` never waits, as above, and an ask waits
   * its least (1 s: nobody answers).
   */
  const TOOL_ARGS: Record<string, fc.Arbitrary<Record<string, unknown>>> = {
    send_message: envelope.map(({ idempotency_key: _, ...e }) => ({ payload: {}, ...e })),
    fetch_inbox: fc.record({ wait_seconds: fc.constant(0), max: fc.integer({ min: 1, max: 3 }) }),
    ack: ids.map((d) => ({ delivery_ids: d })),
    nack,
    extend_lease: lease.map((l) => ({ delivery_ids: l.delivery_ids, extend_ms: l.extend_ms })),
    message_status: fc.constant({ message_id: '0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11' }),
    explain_message: fc.record({
      id: fc.oneof(fc.constant('0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11'), protoName),
    }),
    read_channel: fc.record({ channel: fc.oneof(fc.constantFrom('product', '@pm'), protoName) }),
    whoami: fc.constant({}),
    heartbeat: fc.constant({}),
    raise_emergency: emergency.map(({ reason, message }) => ({ reason, message })),
    ask: envelope.map(({ idempotency_key: _, ...e }) => ({
      payload: {},
      ...e,
      timeout_seconds: 1,
    })),
    await_reply: fc.record({
      message_id: fc.oneof(fc.constant('0192f5e4-7c1d-7b3a-9c1e-2f6d1c0e9a11'), protoName),
      timeout_seconds: fc.constant(1),
    }),
    search_messages: fc.record({
      query: fc.oneof(fc.constant('release notes'), protoName),
      channel: fc.oneof(fc.constantFrom('product', '@pm', 'platform'), protoName),
      limit: fc.integer({ min: 1, max: 100 }),
    }),
  };
  /** Waits that a mutation made longer, made their least again. */
  const least = (body: string) =>
    body
      .replace(/"wait_seconds":\s*(\d+)/g, '"wait_seconds":0')
      .replace(/"timeout_seconds":\s*-?\d[\d.eE+-]*/g, '"timeout_seconds":1');

  it('answers raw JSON-RPC frames at /mcp without a 5xx or an internal error', {
    timeout: 60_000,
  }, async () => {
    const call = fc.record({
      jsonrpc: fc.constant('2.0'),
      id: fc.nat(),
      method: fc.oneof(
        fc.constantFrom('tools/call', 'tools/list', 'initialize', 'ping'),
        protoName,
      ),
      params: fc.record({
        name: fc.oneof(fc.constantFrom(...Object.keys(TOOL_ARGS)), protoName),
        arguments: fc.oneof(...Object.values(TOOL_ARGS), fc.dictionary(protoName, wrongValue)),
      }),
    });
    await fc.assert(
      fc.asyncProperty(bodies(call), async (body) => {
        // the inbox never waits, whatever the mutation made of its wait
        const raw = least(body);
        const res = await post(pm.url, '/mcp', raw, {
          accept: 'application/json, text/event-stream',
        });
        const what = `POST /mcp ${raw}`;
        expect(res.status, `${what} -> ${res.status} ${JSON.stringify(res.body)}`).toBeLessThan(
          500,
        );
        const answer = res.body as Json;
        if (typeof answer !== 'object' || answer === null) return;
        // JSON-RPC's own errors: never -32603 (internal); a tool's: never `internal`
        expect(answer.error?.code, `${what} -> ${JSON.stringify(answer)}`).not.toBe(-32603);
        if (answer.result?.isError === true) {
          expectAnsweredWell(what, { status: 400, body: answer.result.structuredContent });
          expect(answer.result.structuredContent.error, what).not.toBe('internal');
        }
      }),
      { numRuns: 300, seed: SEED + 2 },
    );
  });

  it('answers every tool called with mutated arguments with a result, never `internal`', {
    timeout: 60_000,
  }, async () => {
    const calls = fc.oneof(
      ...Object.entries(TOOL_ARGS).map(([name, valid]) =>
        bodies(valid)
          .map((text) => {
            try {
              return JSON.parse(text) as unknown;
            } catch {
              return undefined;
            }
          })
          .filter(
            (a): a is Record<string, unknown> =>
              typeof a === 'object' && a !== null && !Array.isArray(a),
          )
          .map((args) => ({
            name,
            args:
              name === 'fetch_inbox'
                ? { ...args, wait_seconds: 0 }
                : name === 'ask' || name === 'await_reply'
                  ? { ...args, timeout_seconds: 1 }
                  : args,
          })),
      ),
    );
    await fc.assert(
      fc.asyncProperty(calls, async ({ name, args }) => {
        const r = await tool(mcp.client, name, args);
        const what = `${name}(${JSON.stringify(args)}) -> ${JSON.stringify(r.json)}`;
        if (r.isError) {
          expectAnsweredWell(what, { status: 400, body: r.json });
          expect(r.json.error, what).not.toBe('internal');
        }
      }),
      { numRuns: 300, seed: SEED + 3 },
    );
    expect(mcp.errors).toEqual([]);
    // the tools fuzzed are the contract's, every one of them
    expect(Object.keys(TOOL_ARGS).sort()).toEqual(Object.keys(CONTRACT_TOOLS).sort());
  });
});
