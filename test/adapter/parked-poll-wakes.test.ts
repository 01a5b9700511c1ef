/**
 * A wake told while a poll's lease is on its way back, before the poll parks, is not lost
 * (issue 36: copies handed over 1-22 s late to polls that missed the wake of the commit that
 * gave them the copy). The DeliveryService under test runs on a real GroupCommit; its store is a
 * stand-in that answers the poll's first lease with nothing and, in that very commit, tells a
 * wake from another replica (a NOTIFY that arrives as the lease's answer is on its way), as a
 * PostgreSQL replica's announcement or a commit between the read and the park would.
 */
import { pino } from 'pino';
import { afterEach, expect, it } from 'vitest';
import { DeliveryService } from '../../src/adapter/delivery.js';
import { GroupCommit } from '../../src/adapter/group-commit.js';
import type { Committed, ForeignEffects, Store, StoreOp } from '../../src/store/store.js';

let service: DeliveryService | undefined;
afterEach(() => {
  service?.stop();
  service = undefined;
});

const NOTHING: Committed['effects'] = { alerts: [], woken: new Set(), timingChanged: false };

it('leases again when the agent is woken between its lease and its park, instead of parking past the wake', async () => {
  let tell: ((fx: ForeignEffects) => void) | undefined;
  const leases: number[] = [];
  const delivery = JSON.stringify({ delivery_id: 1, attempt: 1, message: { message_id: 'm1' } });
  const store = {
    async commit(ops: readonly StoreOp[]): Promise<Committed> {
      const results = ops.map((op) => {
        if (op.op !== 'lease') return { ok: undefined };
        leases.push(op.now);
        if (leases.length === 1) {
          // the copy was committed elsewhere after this lease read the queue: its wake comes now
          tell?.({ woken: new Set(['qa']), timingChanged: false });
          return { ok: [] };
        }
        return { ok: [delivery] };
      });
      return { results, effects: NOTHING } as Committed;
    },
    watch(listener: (fx: ForeignEffects) => void) {
      tell = listener;
    },
    async nextDue() {
      return undefined;
    },
  } as unknown as Store;
  const commits = new GroupCommit(store);
  service = new DeliveryService({
    store,
    commits,
    now: () => Date.now(),
    logger: pino({ level: 'silent' }),
  });
  // a 60 s wait: parked past the wake, the poll would answer nothing for a minute (and the test
  // time out); woken, it leases again at once and answers the copy
  const got = await service.inbox('qa', 60, 10, new Promise(() => undefined));
  expect(got).toEqual([delivery]);
  expect(leases).toHaveLength(2);
});
