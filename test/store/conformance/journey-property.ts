/**
 * The journey's property, for any store: for random sequences of operations (sends to a direct
 * and a group channel, leases, acks, nacks with and without retry, extensions, sweeps as the
 * clock moves, redrives of dead letters, evictions from a small queue), each copy's last journey
 * event always agrees with its state (docs/design/journey.md): a leased copy's is `leased` or
 * `lease_extended`, an acked one's `acked`, a dead letter's `dead_lettered` or `evicted`, a
 * pending one's none (never handed out), `nacked`, `lease_expired` or `redriven`; and a copy a
 * redrive made begins with `redriven`, no other does. Run on SQLite
 * by journey-events.property.test.ts and on PostgreSQL by pg-journey-events.property.test.ts.
 */
import fc from 'fast-check';
import { expect } from 'vitest';
import type { Delivery } from '../../../src/protocol/wire.js';
import type { SqliteStoreOptions } from '../../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../../src/store/store.js';
import { draft } from './harness.js';

const SEED = 20261205;
const T0 = Date.UTC(2031, 0, 1);
const AGENTS = ['qa', 'engineering'] as const;

type Step =
  | { op: 'send'; channel: '@qa' | 'product'; critical: boolean }
  | { op: 'lease'; agent: number; max: number }
  | { op: 'ack'; pick: number }
  | { op: 'nack'; pick: number; retry: boolean }
  | { op: 'extend'; pick: number }
  | { op: 'tick'; ms: number }
  | { op: 'redrive'; pick: number };

/** Weighted so that copies often reach every state, dead letters and their redrives included. */
const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant('send' as const),
      channel: fc.constantFrom('@qa' as const, 'product' as const),
      critical: fc.boolean(),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant('lease' as const),
      agent: fc.nat(1),
      max: fc.integer({ min: 1, max: 3 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('ack' as const), pick: fc.nat() }) },
  {
    weight: 3,
    arbitrary: fc.record({ op: fc.constant('nack' as const), pick: fc.nat(), retry: fc.boolean() }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('extend' as const), pick: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('tick' as const),
      ms: fc.integer({ min: 1, max: 40_000 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('redrive' as const), pick: fc.nat() }) },
);

const AGREES: Record<string, readonly (string | undefined)[]> = {
  pending: [undefined, 'nacked', 'lease_expired', 'redriven'],
  leased: ['leased', 'lease_extended'],
  acked: ['acked'],
  dead_letter: ['dead_lettered', 'evicted'],
};

async function run(store: Store, steps: readonly Step[]): Promise<void> {
  let now = T0;
  const sent: string[] = [];
  const held: { agent: string; id: number }[] = [];
  const redriven = new Set<number>(); // the copies redrives made
  const pick = <T>(xs: readonly T[], n: number) =>
    xs.length === 0 ? undefined : xs[n % xs.length];
  for (const s of steps) {
    now += 1;
    if (s.op === 'send') {
      const { results } = await store.commit([
        {
          op: 'append',
          drafts: [
            draft({
              channel: s.channel,
              priority: s.critical ? 'critical' : 'normal',
              at: now,
              to: s.channel === '@qa' ? ['qa'] : [...AGENTS],
            }),
          ],
        },
      ]);
      const r = results[0]!;
      if ('ok' in r) {
        const [o] = r.ok as { status: number; assignment: { message_id: string } }[];
        if (o!.status === 201) sent.push(o!.assignment.message_id);
      }
    } else if (s.op === 'lease') {
      const agent = AGENTS[s.agent]!;
      const { results } = await store.commit([{ op: 'lease', agent, max: s.max, now }]);
      for (const j of (results[0] as { ok: string[] }).ok)
        held.push({ agent, id: (JSON.parse(j) as Delivery).delivery_id });
    } else if (s.op === 'ack' || s.op === 'nack' || s.op === 'extend') {
      const h = pick(held, s.pick);
      if (h === undefined) continue;
      if (s.op !== 'extend') held.splice(held.indexOf(h), 1); // done with, as an agent would be
      const ids = [h.id];
      const op =
        s.op === 'ack'
          ? ({ op: 'ack', agent: h.agent, ids, now } as const)
          : s.op === 'nack'
            ? ({ op: 'nack', agent: h.agent, ids, now, retry: s.retry, reason: 'r' } as const)
            : ({ op: 'extend', agent: h.agent, ids, extendMs: 20_000, now } as const);
      await store.commit([op]); // a refusal (not leased any more) is an answer, not a change
    } else if (s.op === 'tick') {
      now += s.ms;
      await store.commit([{ op: 'sweep', now }]);
    } else {
      const dead = (await store.deadLetters(0, 1000)).map((j) => JSON.parse(j) as { id: number });
      const d = pick(dead, s.pick);
      if (d === undefined) continue;
      const { results } = await store.commit([{ op: 'replay_dead_letter', id: d.id, now }]);
      const r = (results[0] as { ok?: { delivery_id: number; replayed: boolean } }).ok;
      if (r?.replayed) redriven.add(r.delivery_id);
    }
  }
  for (const id of sent) {
    const j = (await store.journey(id))!;
    for (const c of j.copies) {
      const last = j.events.findLast((e) => e.delivery === c.delivery)?.event;
      expect(AGREES[c.state], `${id} ${c.recipient}: ${c.state} after ${last}`).toContain(last);
      // a copy a redrive made starts with `redriven`; any other with the message's `queued`
      const first = j.events.find((e) => e.delivery === c.delivery)?.event;
      if (redriven.has(c.delivery)) expect(first, `${id} ${c.recipient}`).toBe('redriven');
      else expect(first, `${id} ${c.recipient}`).not.toBe('redriven');
    }
  }
}

/** The store options every run opens with: a queue of 3, one retry, a fixed jitter. */
export const JOURNEY_PROPERTY_OPTIONS: SqliteStoreOptions = {
  sync: 'normal',
  delivery: {
    alertsTo: 'orchestrator',
    capacity: 3,
    leaseMs: 10_000,
    maxRetries: 1,
    retryBaseMs: 1000,
    random: () => 0.5,
  },
};

/**
 * Checks the property `numRuns` times; `open` gives each run a fresh store (opened with
 * JOURNEY_PROPERTY_OPTIONS) and the way to close and remove it.
 */
export async function checkJourneyProperty(
  open: () => Promise<{ store: Store; close: () => Promise<void> }>,
  numRuns: number,
): Promise<void> {
  await fc.assert(
    fc.asyncProperty(
      fc.array(step, { minLength: 10, maxLength: 80, size: 'max' }),
      async (steps) => {
        const { store, close } = await open();
        try {
          await store.ensureChannels(['@qa', '@engineering', '@orchestrator', 'product']);
          await run(store, steps);
        } finally {
          await close();
        }
      },
    ),
    { numRuns, seed: SEED },
  );
}
