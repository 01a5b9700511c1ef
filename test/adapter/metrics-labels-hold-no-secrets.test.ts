/**
 * The adapter's /metrics needs no token (docs/reference/adapter-api.md, "GET /healthz, GET /health,
 * GET /metrics": probes and Prometheus reach it outside mTLS), so what it shows must be harmless to
 * whoever reaches the adapter's port: after real traffic (sends, a duplicate, refusals, a batch,
 * polls, acks, a nack with a note, a dead letter, a bad token), no label value and no line of the
 * scrape holds a message id, idempotency key, payload text, kind or recipient refused, nack note or
 * token; every label is of a closed set (agent ids of the topology, write outcomes and error codes,
 * dead-letter reasons, histogram buckets, the build's versions, and the Node names of prom-client's
 * process metrics: GC kinds, heap spaces, resource types).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ERRORS } from '../../src/protocol/errors.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, pollAs } from '../helpers/http.js';
import { AGENTS, tokenOf } from '../helpers/topology.js';

let a: TestAdapter;
beforeAll(async () => {
  a = await startTestAdapter();
});
afterAll(() => a?.stop());

/** Every `name{labels} value` sample's labels, as [metric, label, value]. */
function labelsOf(text: string): [string, string, string][] {
  const out: [string, string, string][] = [];
  for (const m of text.matchAll(/^(\w+)\{(.*)\} \S+$/gm))
    for (const l of m[2]!.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) out.push([m[1]!, l[1]!, l[2]!]);
  return out;
}

it('after traffic, no label value or line of /metrics holds a message id, key, payload, note or token', async () => {
  const secret = `payload-${randomUUID()}`; // payload text nobody but the recipient should read
  const secrets: string[] = [secret, ...AGENTS.map(tokenOf)];
  const send = async (agent: string, body: object) => {
    const r = await call(a.url, 'POST', '/v1/messages', { agent, body });
    return r;
  };
  // sends to an agent and a channel, one critical; a duplicate; refusals of several kinds
  for (const [to, priority] of [
    ['@qa', 'normal'],
    ['product', 'normal'],
    ['@qa', 'critical'],
  ] as const) {
    const key = `key-${randomUUID()}`;
    const r = await send('pm', {
      idempotency_key: key,
      to,
      kind: 'status',
      priority,
      payload: { text: secret },
    });
    expect(r.status).toBe(201);
    secrets.push(key, r.body.message_id);
    expect(
      (
        await send('pm', {
          idempotency_key: key,
          to,
          kind: 'status',
          priority,
          payload: { text: secret },
        })
      ).status,
    ).toBe(200);
  }
  const conflictKey = secrets[AGENTS.length + 1]!;
  expect(
    (
      await send('pm', {
        idempotency_key: conflictKey,
        to: '@qa',
        kind: 'status',
        payload: { text: `${secret}-other` },
      })
    ).status,
  ).toBe(409);
  const badKind = `Not A Kind ${randomUUID()}`;
  secrets.push(badKind);
  expect(
    (
      await send('pm', {
        idempotency_key: randomUUID(),
        to: '@qa',
        kind: badKind,
        payload: { text: secret },
      })
    ).status,
  ).toBe(400);
  expect(
    (
      await send('pm', {
        idempotency_key: randomUUID(),
        to: 'platform',
        kind: 'status',
        payload: { text: secret },
      })
    ).status,
  ).toBe(403);
  const unknown = `nobody-${randomUUID()}`;
  secrets.push(unknown);
  expect(
    (
      await send('pm', {
        idempotency_key: randomUUID(),
        to: `@${unknown}`,
        kind: 'status',
        payload: { text: secret },
      })
    ).status,
  ).toBe(404);
  const batchKey = `batch-${randomUUID()}`;
  secrets.push(batchKey);
  const batch = await call(a.url, 'POST', '/v1/messages/batch', {
    agent: 'engineering',
    body: {
      messages: [
        { idempotency_key: batchKey, to: '@qa', kind: 'status', payload: { text: secret } },
      ],
    },
  });
  expect(batch.status).toBe(200);
  secrets.push(...batch.body.results.map((r: { message_id: string }) => r.message_id));
  // a bad token
  const badToken = `token-${randomUUID()}`;
  secrets.push(badToken);
  const unauthorized = await call(a.url, 'GET', '/v1/inbox', {
    headers: { authorization: `Bearer ${badToken}` },
  });
  expect(unauthorized.status).toBe(401);
  // qa takes its deliveries: acks one, extends one, rejects one with a note (a dead letter).
  // (Delivery ids are small integers, no secret, and bound to find in any text: not listed.)
  const deliveries = await pollAs(a.url, 'qa', { max: 10 });
  expect(deliveries.length).toBeGreaterThanOrEqual(3);
  const note = `note-${randomUUID()}`;
  secrets.push(note);
  const [first, second, third] = deliveries;
  expect(
    (
      await call(a.url, 'POST', '/v1/acks', {
        agent: 'qa',
        body: { delivery_ids: [first.delivery_id] },
      })
    ).status,
  ).toBe(200);
  expect(
    (
      await call(a.url, 'POST', '/v1/leases', {
        agent: 'qa',
        body: { delivery_ids: [second.delivery_id], extend_ms: 60_000 },
      })
    ).status,
  ).toBe(200);
  expect(
    (
      await call(a.url, 'POST', '/v1/nacks', {
        agent: 'qa',
        body: { delivery_ids: [third.delivery_id], retry: false, reason: note },
      })
    ).status,
  ).toBe(200);

  const scrape = await call(a.url, 'GET', '/metrics'); // no token
  expect(scrape.status).toBe(200);
  const text = scrape.body as string;
  // the traffic is there: this is a scrape after it, not of an idle adapter
  expect(text).toMatch(/^agw_dead_letters_total\{reason="rejected"\} 1$/m);
  expect(text).toMatch(/^agw_messages_total\{outcome="duplicate"\} 3$/m);
  for (const s of secrets) expect(text, s).not.toContain(s);

  const labels = labelsOf(text);
  expect(labels.length).toBeGreaterThan(0);
  const outcomes = new Set<string>(['created', 'duplicate', ...Object.keys(ERRORS)]);
  const deadLetterReasons = new Set([
    'lease_expired',
    'nacked',
    'rejected',
    'evicted',
    'queue_full',
    'integrity',
    'expired',
  ]);
  const agents = new Set<string>(AGENTS);
  // agw_build_info's and prom-client's process and Node metrics': versions, and Node's own names
  const processLabels: Record<string, RegExp> = {
    version: /^v?\d+\.\d+\.\d+(-[\w.]+)?$/,
    node: /^v\d+\.\d+\.\d+$/,
    major: /^\d+$/,
    minor: /^\d+$/,
    patch: /^\d+$/,
    kind: /^(major|minor|incremental|weakcb)$/,
    space: /^[a-z_]+$/,
    type: /^[A-Za-z]+$/,
  };
  for (const [metric, label, value] of labels) {
    const where = `${metric}{${label}="${value}"}`;
    for (const s of secrets) expect(value, where).not.toContain(s);
    if (label === 'agent') expect(agents.has(value), where).toBe(true);
    else if (label === 'outcome') expect(outcomes.has(value), where).toBe(true);
    else if (label === 'reason') expect(deadLetterReasons.has(value), where).toBe(true);
    else if (label === 'le') expect(value, where).toMatch(/^(\+Inf|\d+(\.\d+)?(e-?\d+)?)$/);
    else if (Object.hasOwn(processLabels, label))
      expect(value, where).toMatch(processLabels[label]!);
    else expect.unreachable(`a label nobody checked: ${where}`);
  }
});
