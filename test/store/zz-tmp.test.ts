import { it } from 'vitest';
import { openPgStore } from '../../src/store/postgres/pg-store.js';
import { testDatabase } from '../helpers/pg.js';
import { Harness, draft, BASE_DELIVERY, T0, DAY } from './conformance/harness.js';
it('time', async () => {
  let t = performance.now();
  const lap = (w: string) => { console.log(w, Math.round(performance.now() - t)); t = performance.now(); };
  const db = await testDatabase();
  lap('createdb');
  const s = await openPgStore(db.url, { delivery: BASE_DELIVERY, storage: { maxBytes: 2 ** 40, senderShare: 1, reserveBytes: 0 } });
  lap('open');
  const used = (await s.storageUse()).usedBytes;
  lap('use');
  await s.close(); await db.drop();
  lap('drop');
  const db2 = await testDatabase();
  const s2 = await openPgStore(db2.url, { delivery: BASE_DELIVERY, storage: { maxBytes: used + 256 * 1024, senderShare: 1, reserveBytes: 0 } });
  await s2.ensureChannels(['@orchestrator', '@qa', '@pm']);
  if (process.env.DROPIDX) { const pg = (await import('pg')).default; const c = new pg.Client({ connectionString: db2.url }); await c.connect(); await c.query(process.env.DROPIDX); await c.end(); }
  lap('open2');
  const h = new Harness(s2);
  let n = 0;
  for (let i = 0; i < 200; i++) {
    const [o] = await h.append(draft({ channel: '@qa', sender: 'pm', at: T0 + i, payloadJson: JSON.stringify({ text: 'x'.repeat(16 * 1024) }) }));
    if (o?.status !== 201) break;
    n++;
  }
  lap(`fill ${n}`);
  await h.run([{ op: 'append', drafts: [draft({ channel: '@qa', at: T0 + 500 })] }, { op: 'sweep', now: T0 + 31_000 }]);
  lap('sweep');
  const got = await h.lease('qa', 500, T0 + 1000);
  lap('lease');
  await h.ack('qa', got.map((d) => d.delivery_id));
  lap('ack');
  await h.one({ op: 'prune', before: T0 + DAY, keep: [], limit: 1000 });
  lap('prune');
  await s2.close(); await db2.drop();
  lap('drop');
}, 60000);
