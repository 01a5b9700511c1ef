import { it } from 'vitest';
import { openPgStore } from '../../src/store/postgres/pg-store.js';
import { testDatabase } from '../helpers/pg.js';
import { draft } from './conformance/harness.js';
it('time', async () => {
  const db = await testDatabase();
  let t = performance.now();
  const s = await openPgStore(db.url, { delivery: { alertsTo: 'orchestrator' }, storage: { maxBytes: 2 ** 40, senderShare: 1, reserveBytes: 0 } });
  console.log('open', performance.now() - t);
  await s.ensureChannels(['@qa', '@orchestrator']);
  if (process.env.DROPIDX) { const pg = (await import('pg')).default; const c = new pg.Client({ connectionString: db.url }); await c.connect(); await c.query('DROP INDEX messages_text'); await c.end(); }
  for (let i = 0; i < 6; i++) {
    t = performance.now();
    await s.commit([{ op: 'append', drafts: [draft({ channel: '@qa', at: 1e12 + i, payloadJson: JSON.stringify({ text: 'x'.repeat(16384) }) })] }]);
    console.log('append', performance.now() - t);
  }
  t = performance.now();
  await s.storageUse();
  console.log('use', performance.now() - t);
  await s.close(); await db.drop();
}, 60000);
