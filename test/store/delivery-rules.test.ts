/**
 * The engine-neutral store rules (src/store/rules/), checked directly, white-box: both engines
 * call these, and the conformance suite (conformance.ts) checks the same promises through each
 * engine. No storage here: rows are plain objects.
 */
import { crc32 } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { isGatewayError } from '../../src/protocol/errors.js';
import { alertEvent, foldAlert } from '../../src/store/rules/alert-rows.js';
import { CorruptRows } from '../../src/store/rules/corrupt-rows.js';
import {
  type DeliveryRow,
  deliveryConfig,
  extension,
  ownRows,
  retryAt,
  sortAcks,
  sortNacks,
} from '../../src/store/rules/deliveries.js';
import {
  admission,
  admissionNeedsHoldings,
  fullQueue,
} from '../../src/store/rules/queue-shares.js';
import { storageRefusal } from '../../src/store/rules/storage.js';
import {
  replyHop,
  replyPlacement,
  replyTarget,
  type TargetRow,
} from '../../src/store/rules/thread-rows.js';
import { DeliveryState, type MessageDraft } from '../../src/store/store.js';

const row = (id: number, state: DeliveryState, more: Partial<DeliveryRow> = {}): DeliveryRow => ({
  id,
  message: id,
  recipient: 'qa',
  state,
  attempt: 1,
  priority: 0,
  ...more,
});

describe('acks and nacks', () => {
  const leased = row(1, DeliveryState.leased);
  const dead = row(2, DeliveryState.deadLetter);
  const acked = row(3, DeliveryState.acked);

  it('acks an id given twice once, answering it twice; an acked one is answered and not written', () => {
    const { answer, toAck } = sortAcks([1, 1, 3, 2, 9], [leased, leased, acked, dead, undefined]);
    expect(answer).toEqual({ acked: [1, 1, 3], dead: [2], unknown: [9] });
    expect(toAck.map((r) => r.id)).toEqual([1]);
  });

  it('nacks an id given twice once: the second is ignored, as one no longer leased', () => {
    const { answer, toNack } = sortNacks([1, 1, 3, 9], [leased, leased, acked, undefined]);
    expect(answer).toEqual({ nacked: [1], ignored: [1, 3], unknown: [9] });
    expect(toNack.map((r) => r.id)).toEqual([1]);
  });

  it("treats another agent's delivery as unknown", () => {
    const mine = row(1, DeliveryState.leased);
    const theirs = row(2, DeliveryState.leased, { recipient: 'pm' });
    const found = new Map([
      [1, mine],
      [2, theirs],
    ]);
    expect(ownRows('qa', [1, 2, 3], (id) => found.get(id))).toEqual([mine, undefined, undefined]);
  });

  it('extends only when every id is leased to the agent now, else not_leased naming the first', () => {
    const live = row(1, DeliveryState.leased, { lease_expires_at: 5000 });
    const ok = extension('qa', [1], [live], 1000, 4000);
    expect(ok).toEqual({
      expires: 5000,
      answer: [{ delivery_id: 1, lease_expires_at: new Date(5000).toISOString() }],
    });
    let err: unknown;
    try {
      extension('qa', [1, 2], [live, undefined], 1000, 4000);
    } catch (e) {
      err = e;
    }
    expect(isGatewayError(err) && err.code === 'not_leased' && err.message).toMatch(/delivery 2/);
    // an expired lease is not extended either
    expect(() => extension('qa', [1], [live], 1000, 5000)).toThrow(/delivery 1/);
  });
});

describe('retry schedule', () => {
  const cfg = { maxRetries: 3, retryBaseMs: 1000, random: () => 0.5 };

  it('waits base × 2^(attempt−1) × jitter, then dead-letters after the last retry', () => {
    expect([1, 2, 3].map((a) => retryAt(a, 0, cfg))).toEqual([1000, 2000, 4000]);
    expect(retryAt(4, 0, cfg)).toBe('dead');
  });

  it('keeps the jitter within ±25%', () => {
    expect(retryAt(1, 0, { ...cfg, random: () => 0 })).toBe(750);
    expect(retryAt(1, 0, { ...cfg, random: () => 1 })).toBe(1250);
  });
});

describe('admission', () => {
  const cfg = deliveryConfig({ capacity: 2, criticalCapacity: 4, agents: 2 });

  it('admits below the bound without reading holdings', () => {
    expect(admissionNeedsHoldings({ all: 1, critical: 0 }, 0, 'pm', cfg)).toBe(false);
    expect(admission({ all: 1, critical: 0 }, 0, 'pm', cfg)).toBe('admit');
  });

  it('evicts from the sender holding the most of a full queue; refuses or overruns when none may go', () => {
    const full = { all: 2, critical: 0 };
    expect(admissionNeedsHoldings(full, 0, 'pm', cfg)).toBe(true);
    const holdings = [{ sender: 'dev', open: 2, critical: 0, evictable: 2 }];
    expect(admission(full, 0, 'pm', cfg, holdings)).toEqual({ evictFrom: 'dev' });
    expect(fullQueue(true, 0, false)).toBe('evict');
    expect(fullQueue(false, 0, false)).toBe('refuse');
    expect(fullQueue(false, 1, false)).toBe('overrun');
    expect(fullQueue(false, 1, true)).toBe('take');
  });

  it("refuses a critical copy past its sender's share of the critical bound", () => {
    const depth = { all: 2, critical: 2 };
    expect(admissionNeedsHoldings({ all: 0, critical: 2 }, 1, 'pm', cfg)).toBe(true);
    const holdings = [{ sender: 'pm', open: 2, critical: 2, evictable: 0 }];
    expect(admission(depth, 1, 'pm', cfg, holdings)).toBe('refuse');
  });
});

describe('alert folding', () => {
  it('tells the first at once, then counts the window, listing each message once', () => {
    const T = Date.UTC(2031, 0, 1);
    const first = foldAlert(undefined, alertEvent('qa', 'nacked', 'm1', 1, T), 30_000);
    expect(first.due).toBe(true);
    const held = { ...first.row, last_sent_at: T, count: 0, message_ids: '[]' };
    const a = foldAlert(held, alertEvent('qa', 'nacked', 'm2', 2, T + 1000), 30_000);
    const b = foldAlert(a.row, alertEvent('qa', 'nacked', 'm2', 3, T + 2000), 30_000);
    expect([a.due, b.due]).toEqual([false, false]);
    expect(b.row).toMatchObject({ count: 2, message_ids: '["m2"]', attempts: 3 });
    const late = foldAlert(b.row, alertEvent('qa', 'nacked', '', 1, T + 30_000), 30_000);
    expect([late.due, late.row.count, late.row.message_ids]).toEqual([true, 3, '["m2"]']);
  });
});

describe('replies and budgets', () => {
  const budgets = { hops: 2, messages: 3 };
  const t: TargetRow = {
    id: 7,
    message_id: 'm7',
    channel: 'general',
    sender: 'pm',
    thread_id: 't1',
    hop: 2,
  };
  const draft = (sender: string, more: Partial<MessageDraft> = {}) =>
    ({ sender, channel: 'general', replyTo: null, replyToId: 'm7', ...more }) as MessageDraft;

  it('refuses past the hop budget; alerts_to continues the thread at hop 0, counted as its first', () => {
    expect(replyHop(t, draft('qa'), budgets, 'orchestrator')).toMatchObject({
      reason: 'hop_budget_exceeded',
    });
    const h = replyHop(t, draft('orchestrator'), budgets, 'orchestrator');
    expect(h).toEqual({ hop: 0, continuation: true });
    expect(
      replyPlacement(t, h as { hop: number; continuation: boolean }, 99, budgets, 'o'),
    ).toEqual({ threadId: 't1', hop: 0, replyTo: 'm7', count: 1 });
  });

  it('refuses past the thread budget; a thread with no count holds its root alone', () => {
    const h = { hop: 1, continuation: false };
    expect(replyPlacement(t, h, undefined, budgets, 'o')).toMatchObject({ count: 2 });
    expect(replyPlacement(t, h, 3, budgets, 'o')).toMatchObject({
      reason: 'thread_budget_exceeded',
    });
  });

  it('answers reply_to_not_found for an unseen target and invalid_envelope for two that differ', () => {
    const code = (x: unknown) => (isGatewayError(x) ? x.code : x);
    expect(code(replyTarget(draft('qa'), undefined, undefined))).toBe('reply_to_not_found');
    const other = { ...t, id: 8, message_id: 'm8' };
    expect(code(replyTarget(draft('qa', { replyTo: 8 }), t, other))).toBe('invalid_envelope');
    expect(replyTarget(draft('qa', { replyToId: null }), undefined, undefined)).toBeUndefined();
  });
});

describe('storage bounds', () => {
  const limits = { maxBytes: 1000, senderShare: 0.5, reserveBytes: 100 };

  it('refuses past the size bound, then past the sender share, then into the reserve', () => {
    const code = (x: unknown) => (isGatewayError(x) ? x.code : x);
    expect(code(storageRefusal('pm', 10, 995, 0, limits))).toBe('storage_full');
    expect(storageRefusal('pm', 10, 0, 495, limits)?.message).toMatch(/share/);
    expect(storageRefusal('pm', 10, 0, 0, limits, () => 105)?.message).toMatch(/kept free/);
    expect(storageRefusal('pm', 10, 0, 0, limits, () => 1000)).toBeUndefined();
    // an engine that cannot see its volume leaves the reserve out
    expect(storageRefusal('pm', 10, 0, 0, limits)).toBeUndefined();
  });
});

describe('corrupt rows', () => {
  it('remembers a row failing its checksum once, and reports it only when asked', () => {
    const rows = new CorruptRows();
    const good = { id: 1, body: 'ok', checksum: crc32('ok') };
    const bad = { id: 2, body: 'flipped', checksum: crc32('original') };
    expect(rows.intact(good, true)).toBe(true);
    expect(rows.intact(bad, false)).toBe(false);
    expect([rows.ids, [...rows.unreported]]).toEqual([[2], []]);
    expect(rows.intact({ ...bad, id: 3 }, true)).toBe(false);
    expect(rows.takeUnreported()).toEqual([3]);
    expect(rows.unreported.size).toBe(0);
    rows.restore([3]);
    expect([...rows.unreported]).toEqual([3]);
  });
});
