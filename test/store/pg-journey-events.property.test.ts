/**
 * The journey's property (conformance/journey-property.ts) on a real PostgreSQL store, a fresh
 * database for each run: fewer runs than on SQLite, since each creates and drops a database.
 */
import { it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { testDatabase } from '../helpers/pg.js';
import { checkJourneyProperty, JOURNEY_PROPERTY_OPTIONS } from './conformance/journey-property.js';

it(
  'keeps every copy’s last event in agreement with its state, for random operations',
  {
    timeout: 300_000,
  },
  () =>
    checkJourneyProperty(async () => {
      const db = await testDatabase();
      const store = await openStore(db.url, JOURNEY_PROPERTY_OPTIONS);
      return {
        store,
        close: async () => {
          await store.close();
          await db.drop();
        },
      };
    }, 40),
);
