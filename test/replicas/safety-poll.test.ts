/**
 * The safety poll alone: an adapter whose store never hears the other replicas (as behind
 * PgBouncer in transaction mode, where NOTIFY does not pass, or after notifications were lost in
 * a failover) still answers a parked long poll with a message committed through another
 * replica, because every parked poll looks again each safetyPollMs. And the control: with the
 * safety poll off too, the same poll waits out its time empty, so the first check can fail.
 * Two in-process adapters on one real PostgreSQL database; the deaf store is the real PgStore
 * with only its watch() left unconnected.
 */
import { afterEach, expect, it } from 'vitest';
import type { Store } from '../../src/store/store.js';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { pollAs, sendAs } from '../helpers/http.js';
import { testDatabase } from '../helpers/pg.js';
import { untilParked } from '../helpers/wait.js';

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/** The real store, its methods bound to it, but deaf to other adapters (and, if asked, with no safety poll). */
function deaf(store: Store, safetyPoll = true): Store {
  return new Proxy(store, {
    get(target, key) {
      if (key === 'watch') return () => {};
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
