/**
 * The journey's property (conformance/journey-property.ts) on a real SQLite store, a fresh file
 * in a temp folder for each run.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { checkJourneyProperty, JOURNEY_PROPERTY_OPTIONS } from './conformance/journey-property.js';

it(
  'keeps every copy’s last event in agreement with its state, for random operations',
  {
    timeout: 120_000,
  },
  () =>
    checkJourneyProperty(async () => {
      const dir = mkdtempSync(join(tmpdir(), 'agw-journey-'));
      const store = await openStore(join(dir, 'adapter.db'), JOURNEY_PROPERTY_OPTIONS);
      return {
        store,
        close: async () => {
          await store.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    }, 150),
);
