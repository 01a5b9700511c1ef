/**
 * A poll whose client has gone leases nothing, also when its connection closes in the very turn
 * its lease was queued (the poll had just arrived, or was just woken), before the group commit
 * took it: the lease is left out of the group (GroupCommit.run's `abandoned`), so the message
 * stays pending with 0 attempts instead of being handed to nobody. The poll runs on the
 * adapter's own store and delivery code, its `closed` already settled as the adapter's route
 * settles it on the response's 'close'.
 */
import { pino } from 'pino';
import { afterEach, expect, it } from 'vitest';
import { DeliveryService } from '../../src/adapter/delivery.js';
import { GroupCommit } from '../../src/adapter/group-commit.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { call, pollAs, sendAs } from '../helpers/http.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

it('a poll whose connection closed before its lease was committed leases nothing', async () => {
  const a = await startTestAdapter();
  stops.push(a.stop);
  const id = await sendAs(a.url, 'pm', '@qa', 'status', { n: 1 });
  const commits = new GroupCommit(a.store);
  const delivery = new DeliveryService({
    store: a.store,
    commits,
    now: Date.now,
    logger: pino({ level: 'silent' }),
  });
  stops.push(() => delivery.stop());
  // the client closed in the turn its poll arrived: its first lease is still queued
  expect(await delivery.inbox('qa', 0, 10, Promise.resolve())).toEqual([]);
  const status = await call(a.url, 'GET', `/v1/messages/${id}`, { agent: 'pm' });
  expect(status.body.recipients).toEqual([
    expect.objectContaining({ agent: 'qa', state: 'pending', attempts: 0 }),
  ]);
  // a poll that stays hands it over as its first attempt
  const [d] = await pollAs(a.url, 'qa');
  expect([d.message.message_id, d.attempt]).toEqual([id, 1]);
});
