/**
 * Storage bounds through the real adapter and a real SQLite file: past the store's size bound,
 * or a sender past its share of it, new messages are refused with 503 `storage_full` and
 * Retry-After, /health stays 200, alerts_to is told, nothing acknowledged is lost, and once
 * retention has pruned what was done with, sends are taken again. The clock is passed in, so
 * retention's 30 days are a step of it.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ADAPTER_SETTINGS,
  AdapterSettingsSchema,
  storeOptions,
} from '../../src/adapter/settings.js';
import { compileTopology } from '../../src/adapter/topology.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, type Json, pollAs } from '../helpers/http.js';
import { sha256Hex, topologyObject } from '../helpers/topology.js';

const DAY_MS = 24 * 3600 * 1000;
/** 100 KiB of payload: a 1 MiB store takes a handful. */
const payload = { text: 'x'.repeat(100 * 1024) };

let t: TestAdapter | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const send = (agent: string, body: Json = payload) =>
  call(t!.url, 'POST', '/v1/messages', {
    agent,
    body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: body },
  });

/** Sends as `agent` until one is refused; the ids acknowledged and the refusal. */
async function fill(agent: string) {
  const acked: string[] = [];
  for (let i = 0; i < 100; i++) {
    const r = await send(agent);
    if (r.status !== 201) return { acked, refused: r };
    acked.push(r.body.message_id as string);
  }
  throw new Error('100 messages of 100 KiB and no refusal: the bound does not hold');
}

/** qa takes and acks everything waiting for it; the message ids, in order. */
async function drainQa(): Promise<string[]> {
  const ids: string[] = [];
  for (;;) {
    const got = await pollAs(t!.url, 'qa', { max: 100 });
    if (got.length === 0) return ids;
    ids.push(...got.map((d) => d.message.message_id as string));
    const ack = await call(t!.url, 'POST', '/v1/acks', {
      agent: 'qa',
      body: { delivery_ids: got.map((d) => d.delivery_id) },
    });
    expect(ack.status).toBe(200);
  }
}

/** Every message of @qa, read back by replay. */
async function replayQa(): Promise<string[]> {
  const r = await call(t!.url, 'GET', '/v1/channels/@qa/messages?limit=1000', { agent: 'qa' });
  expect(r.status).toBe(200);
  return (r.body.messages as Json[]).map((m) => m.message_id as string);
}

describe('storage bounds', () => {
  it('refuses new messages past the store bound with storage_full and Retry-After, /health stays 200, and takes them again once retention frees space', {
    timeout: 30_000,
  }, async () => {
    let clock = Date.UTC(2031, 0, 1);
    t = await startTestAdapter(
      { maxStoreBytes: String(1024 * 1024), senderSharePercent: '100', minFreeBytes: '0' },
      { now: () => clock },
    );
    const { acked, refused } = await fill('pm');
    expect(acked.length).toBeGreaterThanOrEqual(3);
    expect(refused.status).toBe(503);
    expect(refused.body.error).toBe('storage_full');
    expect(refused.body.message).toContain('AGW_MAX_STORE_BYTES');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    // another sender is refused as well: the store is full for everyone
    expect((await send('engineering')).body.error).toBe('storage_full');
    // the bound is not an outage: /health stays as it is, reads and acks work
    expect((await call(t.url, 'GET', '/health')).status).toBe(200);
    // nothing acknowledged is lost; nothing refused was stored
    expect(await replayQa()).toEqual(acked);
    expect(await drainQa()).toEqual(acked);
    // alerts_to is told who was refused
    const [alert] = await pollAs(t.url, 'orchestrator', { max: 1 });
    expect(alert.message).toMatchObject({
      kind: 'alert/storage',
      payload: { reason: 'storage_full', recipient: 'pm' },
    });

    // retention frees what was acked; the same store takes new messages again
    clock += 31 * DAY_MS;
    expect(await t.adapter.retention.run()).toBeGreaterThanOrEqual(acked.length);
    const again = await send('pm');
    expect(again.status).toBe(201);
    expect(again.body.channel_sequence_id).toBe(acked.length + 1);
  });

  it('refuses a sender past its share of the store while the others still send', {
    timeout: 30_000,
  }, async () => {
    t = await startTestAdapter({
      maxStoreBytes: String(2 * 1024 * 1024),
      senderSharePercent: '25',
      minFreeBytes: '0',
    });
    const { acked, refused } = await fill('pm');
    expect(acked.length).toBeGreaterThanOrEqual(2);
    expect(refused.status).toBe(503);
    expect(refused.body.error).toBe('storage_full');
    expect(refused.body.message).toContain("pm's stored messages");
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    // the store is far from its bound: engineering is not held back by pm's share
    const other = await send('engineering');
    expect(other.status).toBe(201);
    expect((await call(t.url, 'GET', '/health')).status).toBe(200);
    expect(await replayQa()).toEqual([...acked, other.body.message_id]);
  });

  it("by default gives each sender twice an equal part of the store (a third of it for the seed's 6 agents): two agents no longer fill it", {
    timeout: 30_000,
  }, async () => {
    t = await startTestAdapter({ maxStoreBytes: String(3 * 1024 * 1024), minFreeBytes: '0' });
    for (const agent of ['pm', 'engineering']) {
      const { acked, refused } = await fill(agent);
      expect(acked.length).toBeGreaterThanOrEqual(2);
      expect(refused.body.error).toBe('storage_full');
      expect(refused.body.message).toContain(`${agent}'s stored messages`);
      expect(refused.body.message).toContain('share of 1.0 MiB');
    }
    // a third agent still has room
    expect((await send('research')).status).toBe(201);
  });

  it('scales the default share with the number of agents: 50% for 2, 33% for 6, 10% for 20, at least 1%; a number set wins', () => {
    const defaults = Object.fromEntries(
      Object.entries(ADAPTER_SETTINGS).flatMap(([key, spec]) =>
        'default' in spec ? [[key, spec.default]] : [],
      ),
    );
    const shareOf = (agents: number, percent?: string) => {
      const base = topologyObject();
      const topology = compileTopology({
        ...base,
        agents: Array.from({ length: agents }, (_, i) => ({
          id: i === 0 ? 'orchestrator' : `a${i}`,
          token_sha256: sha256Hex(`t${i}`),
        })),
        channels: [],
      });
      const settings = AdapterSettingsSchema.parse({
        ...defaults,
        topology: 'x.json',
        ...(percent === undefined ? {} : { senderSharePercent: percent }),
      });
      return storeOptions(settings, topology).storage.senderShare;
    };
    expect(ADAPTER_SETTINGS.senderSharePercent.default).toBe('auto');
    expect(shareOf(2)).toBe(0.5);
    expect(shareOf(6)).toBeCloseTo(1 / 3);
    expect(shareOf(20)).toBeCloseTo(0.1);
    expect(shareOf(500)).toBe(0.01);
    expect(shareOf(6, '50')).toBe(0.5);
  });

  it('prunes the kept kinds too once they are older than AGW_RETENTION_KEEP_DAYS, and never before it', {
    timeout: 30_000,
  }, async () => {
    let clock = Date.UTC(2031, 0, 1);
    t = await startTestAdapter({ retentionKeepDays: '60' }, { now: () => clock });
    const task = await call(t.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: {
        idempotency_key: randomUUID(),
        to: '@qa',
        kind: 'task/request',
        payload: { task_id: 'T-1', description: 'kept' },
      },
    });
    expect(task.status).toBe(201);
    expect((await send('pm', { text: 'status' })).status).toBe(201);
    expect(await drainQa()).toHaveLength(2);
    clock += 31 * DAY_MS;
    expect(await t.adapter.retention.run()).toBe(1); // the status; the task/request is kept
    expect(await replayQa()).toEqual([task.body.message_id]);
    clock += 30 * DAY_MS;
    expect(await t.adapter.retention.run()).toBe(1); // 61 days: past AGW_RETENTION_KEEP_DAYS
    expect(await replayQa()).toEqual([]);
  });

  it("refuses new messages when the volume's free space is below the reserve", async () => {
    t = await startTestAdapter({ minFreeBytes: String(2 ** 50) });
    const r = await send('pm', { text: 'short' });
    expect(r.status).toBe(503);
    expect(r.body.error).toBe('storage_full');
    expect(r.body.message).toContain('AGW_MIN_FREE_BYTES');
    expect((await call(t.url, 'GET', '/health')).status).toBe(200);
  });
});
