/**
 * What counts as a stall, with the clock passed in and each check run by hand (stalls.ts): the
 * stall time runs from the later of the last poll and the moment the oldest pending delivery was
 * ready; a parked poll, an ack, a nack or a lease extension is polling; a write that fails is
 * tried again at the next check. The program's own timer and its alert's way to alerts_to and
 * journald are stalled-agents.test.ts's.
 */
import { pino } from 'pino';
import { beforeEach, expect, it } from 'vitest';
import type { GroupCommit } from '../../src/adapter/group-commit.js';
import { checkIntervalMs, type StalledPayload, StallWatch } from '../../src/adapter/stalls.js';
import type { StoreOp } from '../../src/store/store.js';

const T0 = Date.UTC(2031, 0, 1);
const S = 1000;
const STALL = 120 * S;

let now: number;
/** Each agent's queue: its depth and when its oldest pending delivery was ready. */
let queues: Map<string, { all: number; readyAt?: number }>;
let parked: Set<string>;
let sent: StalledPayload[];
let failNext: boolean;
let watch: StallWatch;

beforeEach(() => {
  now = T0;
  queues = new Map();
  parked = new Set();
  sent = [];
  failNext = false;
  const commits = {
    run: async (op: StoreOp) => {
      if (op.op !== 'append') throw new Error(`unexpected ${op.op}`);
      if (failNext) {
        failNext = false;
        throw new Error('storage_error');
      }
      const [d] = op.drafts;
      expect(d).toMatchObject({
        sender: 'adapter',
        channel: '@orchestrator',
        kind: 'alert/stalled',
        priority: 'critical',
        recipients: ['orchestrator'],
      });
      sent.push(JSON.parse(d!.payloadJson));
      return [{ status: 201, assignment: { message_id: `m${sent.length}` } }];
    },
  } as unknown as GroupCommit;
  watch = new StallWatch({
    store: {
      depth: async (a) => ({ all: queues.get(a)?.all ?? 0, critical: 0 }),
      oldestPendingAt: async (a) => queues.get(a)?.readyAt,
    },
    commits,
    now: () => now,
    logger: pino({ level: 'silent' }),
    alertsTo: 'orchestrator',
    agents: ['orchestrator', 'pm', 'qa'],
    stallMs: STALL,
    polling: (a) => parked.has(a),
  });
});

/** Moves the clock to T0 + ms and runs one check; answers the recipients alerted by it. */
async function checkAt(ms: number): Promise<string[]> {
  now = T0 + ms;
  const before = sent.length;
  await watch.check().catch(() => {});
  return sent.slice(before).map((p) => p.recipient);
}

it('counts an idle agent stalled only AGW_STALL_S after a message arrived, not at once', async () => {
  // qa has not polled since the start (T0); its first message arrives an hour later
  queues.set('qa', { all: 1, readyAt: T0 + 3600 * S });
  expect(await checkAt(3600 * S)).toEqual([]);
  expect(await checkAt(3600 * S + STALL - 1)).toEqual([]);
  expect(await checkAt(3600 * S + STALL)).toEqual(['qa']);
  expect(sent).toEqual([{ reason: 'stalled', recipient: 'qa', pending: 1, last_poll: null }]);
  // once per stall
  expect(await checkAt(3600 * S + 10 * STALL)).toEqual([]);
  expect(watch.stalled).toEqual(new Set(['qa']));
});

it('counts from the last poll when that came after the message, and names it', async () => {
  queues.set('pm', { all: 2, readyAt: T0 });
  now = T0 + 50 * S;
  watch.active('pm'); // an ack, say: it is at work
  expect(await checkAt(50 * S + STALL - 1)).toEqual([]);
  expect(await checkAt(50 * S + STALL)).toEqual(['pm']);
  expect(sent[0]).toEqual({
    reason: 'stalled',
    recipient: 'pm',
    pending: 2,
    last_poll: new Date(T0 + 50 * S).toISOString(),
  });
});

it('never counts an agent with a parked poll, nor one whose queue is empty or all leased', async () => {
  queues.set('pm', { all: 1, readyAt: T0 });
  parked.add('pm');
  queues.set('qa', { all: 3 }); // leased, none pending
  expect(await checkAt(10 * STALL)).toEqual([]);
  expect(watch.lastPollAt('pm')).toBe(T0 + 10 * STALL);
  expect(watch.lastPollAt('qa')).toBeUndefined();
});

it('alerts again only after the agent polled and stalled anew', async () => {
  queues.set('qa', { all: 1, readyAt: T0 });
  expect(await checkAt(STALL)).toEqual(['qa']);
  expect(await checkAt(2 * STALL)).toEqual([]);
  now = T0 + 2 * STALL;
  watch.active('qa'); // it polled, took the message; a new one waits
  expect(watch.stalled.has('qa')).toBe(false);
  queues.set('qa', { all: 1, readyAt: T0 + 2 * STALL });
  expect(await checkAt(3 * STALL - 1)).toEqual([]);
  expect(await checkAt(3 * STALL)).toEqual(['qa']);
});

it('tries a failed alert again at the next check', async () => {
  queues.set('qa', { all: 1, readyAt: T0 });
  failNext = true;
  expect(await checkAt(STALL)).toEqual([]);
  expect(watch.stalled.has('qa')).toBe(false);
  expect(await checkAt(STALL + checkIntervalMs(STALL))).toEqual(['qa']);
});

it('checks every quarter of the stall time, from 250 ms to 30 s', () => {
  expect(checkIntervalMs(1000)).toBe(250);
  expect(checkIntervalMs(20_000)).toBe(5000);
  expect(checkIntervalMs(120_000)).toBe(30_000);
  expect(checkIntervalMs(3_600_000)).toBe(30_000);
});
