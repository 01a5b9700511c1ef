/**
 * Object.prototype's names as the sender's strings (kind "constructor" was once a 500): as a kind,
 * a priority, a channel or agent, a payload key. Each is an ordinary string. Kind "constructor" is
 * a short kind like any other, stored and delivered; a priority or a `to` that names nothing is a
 * 4xx naming its field; a channel and an agent named so in the topology work as any other. Never a
 * 500: on SQLite and on PostgreSQL, alone and in a batch (where kind "constructor" used to fail
 * every item with it), at the sidecar and through MCP `send_message`.
 */
import { randomUUID } from 'node:crypto';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs } from '../helpers/http.js';
import { connectClient, tool } from '../helpers/mcp.js';
import { testDatabase } from '../helpers/pg.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { sha256Hex, tokenOf, topologyObject } from '../helpers/topology.js';

/** Every name Object.prototype has: constructor, __proto__, toString, __defineGetter__, ... */
const PROTO_NAMES = Object.getOwnPropertyNames(Object.prototype);
/** The ones a kind may be spelled as (lowercase, starting with a letter): "constructor". */
const PROTO_KINDS = PROTO_NAMES.filter((n) => /^[a-z][a-z0-9_.-]*$/.test(n));

/** The test topology with an agent "valueOf" and a channel "constructor" of pm, qa and valueOf. */
function protoTopology() {
  const topology = topologyObject();
  topology.agents.push({ id: 'valueOf', token_sha256: sha256Hex(tokenOf('valueOf')) });
  topology.channels.push({ name: 'constructor', members: ['pm', 'qa', 'valueOf'] });
  return topology;
}

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

const STORES = {
  SQLite: async (): Promise<TestAdapter> => {
    const t = await startTestAdapter({}, { topology: protoTopology() });
    stops.push(t.stop);
    return t;
  },
  PostgreSQL: async (): Promise<TestAdapter> => {
    const db = await testDatabase();
    stops.push(() => db.drop());
    const t = await startTestAdapter({ db: db.url }, { topology: protoTopology() });
    stops.push(t.stop);
    return t;
  },
};

const envelope = (fields: object) => ({
  idempotency_key: randomUUID(),
  to: '@qa',
  kind: 'status',
  payload: {},
  ...fields,
});

describe.each(Object.entries(STORES))('on %s', (_, start) => {
  it('stores and delivers kind "constructor" as any other kind; the other names are a 400 naming kind', async () => {
    expect(PROTO_KINDS).toEqual(['constructor']);
    const t = await start();
    for (const kind of PROTO_NAMES) {
      const r = await call(t.url, 'POST', '/v1/messages', {
        agent: 'pm',
        body: envelope({ kind }),
      });
      if (PROTO_KINDS.includes(kind)) expect(r.status, JSON.stringify(r.body)).toBe(201);
      else
        expect([r.status, r.body.error, r.body.field], kind).toEqual([
          400,
          'invalid_envelope',
          'kind',
        ]);
    }
    const [d] = await pollAs(t.url, 'qa');
    expect(d.message).toMatchObject({ kind: 'constructor', priority: 'normal' });
  });

  it('answers each name as a priority with a 400 naming priority, and as a `to` with a 4xx naming to', async () => {
    const t = await start();
    for (const name of PROTO_NAMES) {
      const p = await call(t.url, 'POST', '/v1/messages', {
        agent: 'pm',
        body: envelope({ priority: name }),
      });
      expect([p.status, p.body.error, p.body.field], name).toEqual([
        400,
        'invalid_envelope',
        'priority',
      ]);
      for (const to of [name, `@${name}`]) {
        const r = await call(t.url, 'POST', '/v1/messages', {
          agent: 'pm',
          body: envelope({ to }),
        });
        if (to === 'constructor' || to === '@valueOf') {
          expect(r.status, to).toBe(201); // the topology's own
          continue;
        }
        expect(r.status, `${to}: ${JSON.stringify(r.body)}`).toBeGreaterThanOrEqual(400);
        expect(r.status, to).toBeLessThan(500);
        expect(r.body.field, to).toBe('to');
      }
    }
    // the channel and the agent named so work as any other
    const got = await pollAs(t.url, 'valueOf', { max: 100 });
    const count = (channel: string) =>
      got.filter((d: Json) => d.message.channel === channel).length;
    expect([count('@valueOf'), count('constructor'), got.length]).toEqual([1, 1, 2]);
    const replay = await call(t.url, 'GET', '/v1/channels/constructor/messages', { agent: 'qa' });
    expect(replay.body.messages).toHaveLength(1);
    for (const name of ['toString', '__proto__', 'hasOwnProperty']) {
      const r = await call(t.url, 'GET', `/v1/channels/${name}/messages`, { agent: 'qa' });
      expect([r.status, r.body.error], name).toEqual([404, 'unknown_channel']);
    }
  });

  it('answers each item of a batch on its own: kind "constructor" is stored with the others', async () => {
    const t = await start();
    const messages = [
      envelope({ payload: { n: 1 } }),
      envelope({ kind: 'constructor', payload: { n: 2, constructor: 1 } }),
      envelope({ priority: 'toString' }),
      envelope({ to: '@hasOwnProperty' }),
      envelope({ kind: 'constructor', to: 'constructor', payload: { n: 3 } }),
    ];
    const r = await call(t.url, 'POST', '/v1/messages/batch', { agent: 'pm', body: { messages } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.results.map((x: Json) => [x.status, x.error ?? x.channel])).toEqual([
      [201, '@qa'],
      [201, '@qa'],
      [400, 'invalid_envelope'],
      [404, 'unknown_agent'],
      [201, 'constructor'],
    ]);
    const got = await pollAs(t.url, 'qa');
    expect(got.map((d: Json) => [d.message.kind, d.message.payload.n])).toEqual([
      ['status', 1],
      ['constructor', 2],
      ['constructor', 3],
    ]);
  });
});

it('through a sidecar and its MCP send_message: kind "constructor" is delivered, a priority "toString" is refused naming it', async () => {
  const t = await STORES.SQLite();
  const pm = await startTestSidecar('pm', t.url);
  stops.push(pm.stop);
  const posted = await call(pm.url, 'POST', '/v1/messages', {
    body: { to: '@qa', kind: 'constructor', payload: {} },
  });
  expect([posted.status, posted.body.status]).toEqual([201, 'delivered']);
  const bad = await call(pm.url, 'POST', '/v1/messages', {
    body: { to: '@qa', kind: 'status', priority: 'toString', payload: {} },
  });
  expect([bad.status, bad.body.error, bad.body.field]).toEqual([
    400,
    'invalid_envelope',
    'priority',
  ]);

  const { client } = await connectClient(
    new StreamableHTTPClientTransport(new URL(`${pm.url}/mcp`)),
  );
  stops.push(() => client.close());
  const sent = await tool(client, 'send_message', { to: '@qa', kind: 'constructor', payload: {} });
  expect(sent).toMatchObject({ isError: false, json: { status: 'delivered' } });
  const priority = await tool(client, 'send_message', {
    to: '@qa',
    kind: 'status',
    priority: 'valueOf',
    payload: {},
  });
  expect(priority).toMatchObject({
    isError: true,
    json: { error: 'invalid_envelope', field: 'priority' },
  });
  const to = await tool(client, 'send_message', { to: 'toString', kind: 'status', payload: {} });
  expect(to).toMatchObject({ isError: true, json: { error: 'unknown_channel', field: 'to' } });
  expect((await pollAs(t.url, 'qa')).map((d: Json) => d.message.kind)).toEqual([
    'constructor',
    'constructor',
  ]);
  // nothing refused was queued
  expect(pm.sidecar.service.status()).toMatchObject({ outbox: { depth: 0, dead_letters: 0 } });
});
