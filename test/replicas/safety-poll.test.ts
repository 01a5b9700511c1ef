/**
 * The safety poll alone: an adapter whose store never hears the other replicas (as behind
 * PgBouncer in transaction mode, where NOTIFY does not pass, or after notifications were lost in
 * a failover) still answers a parked long poll with a message committed through another
 * replica, because every parked poll looks again each safetyPollMs. And the control: with the
 * safety poll off too, the same poll waits out its time empty, so the first check can fail.
 * Two in-process adapters on one real PostgreSQL database; the deaf store is the real PgStore
 * with only its watch() left unconnected.
 *
 * The safety poll asks the store which parked agents have a delivery ready (readyAmong, one read)
 * and wakes only their polls: a parked poll with nothing for it does not lease again at each
 * safety poll (with 1,000 parked polls on three replicas, that was ~330 leases a second per
 * replica, and the sends to those agents waited behind their locks).
 */
import { afterEach, expect, it } from 'vitest';
import type { Store, StoreOp } from '../../src/store/store.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { pollAs, sendAs } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';
import { until, untilParked } from '../helpers/wait.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/** What the deaf store was asked: leases per agent, and the safety poll's readyAmong reads. */
const asked = { leases: new Map<string, number>(), readyAmong: 0 };

/** The real store, its methods bound to it, but deaf to other adapters (and, if asked, with no safety poll). */
function deaf(store: Store, safetyPoll = true): Store {
  asked.leases.clear();
  asked.readyAmong = 0;
  return new Proxy(store, {
    get(target, key) {
      if (key === 'watch') return () => {};
      if (key === 'commit')
        return (ops: readonly StoreOp[]) => {
          for (const op of ops)
            if (op.op === 'lease')
              asked.leases.set(op.agent, (asked.leases.get(op.agent) ?? 0) + 1);
          return target.commit(ops);
        };
      if (key === 'readyAmong')
        return (agents: readonly string[], now: number) => {
          asked.readyAmong++;
          return target.readyAmong!(agents, now);
        };
      if (key === 'safetyPollMs' && !safetyPoll) return undefined;
      const v = Reflect.get(target, key, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

async function pair(safetyPoll: boolean): Promise<{ a: TestAdapter; b: TestAdapter }> {
  const db = await testDatabase();
  stops.push(() => db.drop());
  const a = await startTestAdapter({ db: db.url }, { wrapStore: (s) => deaf(s, safetyPoll) });
  stops.push(() => a.stop());
  const b = await startTestAdapter({ db: db.url });
  stops.push(() => b.stop());
  expect(a.store.safetyPollMs).toBe(1000);
  return { a, b };
}

it('answers a poll parked on a replica that hears nothing, by the safety poll', {
  timeout: 60_000,
}, async () => {
  const { a, b } = await pair(true);
  const poll = pollAs(a.url, 'qa', { wait: 30 });
  await untilParked(a.url, 'qa'); // its first lease found nothing
  const id = await sendAs(b.url, 'pm', '@qa');
  const got = await poll;
  expect(got.map((d) => d.message.message_id)).toEqual([id]);
});

it('without the safety poll, the same poll waits out its time empty', {
  timeout: 60_000,
}, async () => {
  const { a, b } = await pair(false);
  const poll = pollAs(a.url, 'qa', { wait: 3 });
  await untilParked(a.url, 'qa');
  const id = await sendAs(b.url, 'pm', '@qa');
  expect(await poll).toEqual([]);
  // the message is there for the next poll: nothing was lost, only not announced
  expect((await pollAs(a.url, 'qa')).map((d) => d.message.message_id)).toEqual([id]);
});

it('wakes only the parked polls whose agents have a delivery ready', {
  timeout: 60_000,
}, async () => {
  const { a, b } = await pair(true);
  const qa = pollAs(a.url, 'qa', { wait: 30 });
  const research = pollAs(a.url, 'research', { wait: 30 });
  await untilParked(a.url, 'qa');
  await untilParked(a.url, 'research');
  const id = await sendAs(b.url, 'pm', '@qa');
  expect((await qa).map((d) => d.message.message_id)).toEqual([id]);
  // two more safety polls after the one that found qa's message
  const after = asked.readyAmong;
  await until(() => asked.readyAmong >= after + 2, 'two more safety polls');
  // research's poll leased once, when it came, and was never woken: it is still parked
  expect(asked.leases.get('research')).toBe(1);
  const id2 = await sendAs(b.url, 'pm', '@research');
  expect((await research).map((d) => d.message.message_id)).toEqual([id2]);
});
