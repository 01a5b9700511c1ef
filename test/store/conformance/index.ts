/**
 * The storage conformance suite: the promises of the Store interface (src/store/store.ts),
 * checked through that interface alone, so that every store runs the same cases. A store's
 * test file calls storeConformance with a factory that opens a fresh, empty store per test.
 * The cases are split by area, a file each.
 *
 * The clock is passed in (every operation takes `now`, every draft its receipt time), so nothing
 * sleeps and no timer is faked. Every commit and every read is awaited, although SQLite's answer
 * at once: another store's are promises.
 */
import { deliveriesConformance } from './deliveries.js';
import { opener, type StoreFactory } from './harness.js';
import { journeyConformance } from './journey.js';
import { messagesConformance } from './messages.js';
import { operationsConformance } from './operations.js';
import { operatorsConformance } from './operators.js';
import { queuesConformance } from './queues.js';
import { repliesConformance } from './replies.js';
import { timeConformance } from './time.js';

export type { OpenedStore, StoreFactory } from './harness.js';

export function storeConformance(name: string, factory: StoreFactory): void {
  const open = opener(factory);
  messagesConformance(name, open);
  queuesConformance(name, open);
  deliveriesConformance(name, open);
  operationsConformance(name, open);
  journeyConformance(name, open);
  operatorsConformance(name, open);
  repliesConformance(name, open);
  timeConformance(name, open);
}
