/**
 * The journey's causes and sentences (src/store/rules/journey.ts, docs/design/journey.md): each
 * cause of the contract's table from a copy as a store reads it, the sentence naming the agent
 * and the times, and head-of-line blocking told as the copy that holds the lane.
 */
import { expect, it } from 'vitest';
import { type CopyView, causeOf, when } from '../../src/store/rules/journey.js';

const NOW = Date.parse('2026-12-05T12:07:07Z');
const at = (hms: string) => Date.parse(`2026-12-05T${hms}Z`);

const copy = (c: Partial<CopyView>): CopyView => ({
  agent: 'qa',
  state: 'pending',
  attempts: 0,
  maxAttempts: 4,
  availableAt: at('12:00:00'),
  leaseExpiresAt: null,
  lastPoll: null,
  ...c,
});

it('tells a time of day with its distance from now', () => {
  expect(when(at('12:01:07'), NOW)).toBe('12:01:07 (6 min ago)');
  expect(when(at('12:07:37'), NOW)).toBe('12:07:37 (in 30 s)');
  expect(when(NOW, NOW)).toBe('12:07:07 (now)');
});

it('a ready copy waits for a poll: since when, and how many wait', () => {
  const never = causeOf(copy({ waiting: 3 }), null, NOW);
  expect(never).toEqual({
    cause: 'waiting_for_poll',
    explanation: 'Ready: qa has never polled; 3 messages wait for it.',
    waiting_behind: null,
  });
  const since = causeOf(copy({ lastPoll: at('12:01:07'), waiting: 1 }), null, NOW);
  expect(since.explanation).toBe(
    'Ready: qa has not polled since 12:01:07 (6 min ago); 1 message waits for it.',
  );
});

it('a leased copy: attempt n of max, since when, until when', () => {
  const c = copy({
    state: 'leased',
    attempts: 2,
    leasedAt: at('12:06:07'),
    leaseExpiresAt: at('12:08:07'),
  });
  expect(causeOf(c, null, NOW)).toMatchObject({
    cause: 'leased',
    explanation:
      'Leased to qa since 12:06:07 (1 min ago), attempt 2 of 4; the lease ends at 12:08:07 (in 1 min).',
  });
});

it('a lease that has ended is told as what the sweep makes of it', () => {
  const ended = { state: 'leased' as const, leaseExpiresAt: at('12:07:00') };
  expect(causeOf(copy({ ...ended, attempts: 2 }), null, NOW).cause).toBe('retry_backoff');
  expect(causeOf(copy({ ...ended, attempts: 4 }), null, NOW).cause).toBe('dead_letter');
});

it('a copy waiting for its retry says how the last attempt ended and when the next is due', () => {
  const nacked = copy({
    attempts: 1,
    availableAt: at('12:07:47'),
    lastFailure: { nacked: true, reason: 'busy' },
  });
  expect(causeOf(nacked, null, NOW).explanation).toBe(
    'Attempt 1 was nacked by qa ("busy"); attempt 2 of 4 is due at 12:07:47 (in 40 s).',
  );
  const expired = copy({
    attempts: 2,
    availableAt: at('12:07:47'),
    lastFailure: { nacked: false, reason: null },
  });
  expect(causeOf(expired, null, NOW)).toMatchObject({
    cause: 'retry_backoff',
    explanation: 'The lease of attempt 2 expired; attempt 3 of 4 is due at 12:07:47 (in 40 s).',
  });
});

it('head-of-line: the copy behind an earlier one of its channel names it and why it holds', () => {
  const head = copy({
    state: 'leased',
    attempts: 2,
    leasedAt: at('12:00:03'),
    leaseExpiresAt: at('12:10:03'),
  });
  const r = causeOf(
    copy({ lastPoll: at('12:07:00') }),
    { message_id: 'm-41', channel_sequence_id: 41, kind: 'task/request', sender: 'pm', copy: head },
    NOW,
  );
  expect(r).toEqual({
    cause: 'waiting_behind',
    explanation:
      'Behind #41 (task/request from pm), leased to qa since 12:00:03 (7 min ago), attempt 2 of 4.',
    waiting_behind: { message_id: 'm-41', channel_sequence_id: 41, cause: 'leased' },
  });
  // a copy with a cause of its own (leased, acked, ...) is told by it, whatever holds the lane
  const leased = copy({ state: 'leased', attempts: 1, leaseExpiresAt: at('12:09:00') });
  const blocker = {
    message_id: 'm-41',
    channel_sequence_id: 41,
    kind: 'k',
    sender: 'pm',
    copy: head,
  };
  expect(causeOf(leased, blocker, NOW).cause).toBe('leased');
});

it('finished copies: acked, and dead letters with their reason in words and the agent note', () => {
  expect(
    causeOf(copy({ state: 'acked', attempts: 1, finishedAt: at('12:01:07') }), null, NOW),
  ).toMatchObject({ cause: 'acked', explanation: 'qa acked it at 12:01:07 (6 min ago).' });
  const rejected = copy({
    state: 'dead_letter',
    attempts: 1,
    reason: 'rejected',
    note: 'no T-9',
    finishedAt: at('12:03:07'),
  });
  expect(causeOf(rejected, null, NOW).explanation).toBe(
    'Dead-lettered for qa at 12:03:07 (4 min ago): qa rejected it ("no T-9").',
  );
  for (const reason of ['lease_expired', 'nacked', 'evicted', 'queue_full', 'integrity']) {
    const r = causeOf(copy({ state: 'dead_letter', reason }), null, NOW);
    expect(r.cause).toBe('dead_letter');
    expect(r.explanation).not.toContain('reason ');
  }
});

it('paused and scheduled come before the lane', () => {
  const paused = copy({ paused: { by: 'operator:ana', since: at('12:02:07') } });
  expect(causeOf(paused, null, NOW).explanation).toBe(
    'Deliveries to qa are paused by operator:ana since 12:02:07 (5 min ago).',
  );
  const scheduled = copy({ deliverAt: at('13:07:07') });
  expect(causeOf(scheduled, null, NOW)).toMatchObject({
    cause: 'scheduled',
    explanation: 'Scheduled for 13:07:07 (in 1 h).',
  });
});
