// Send latency with many messages already stored, and restart-to-ready time. For each size
// (default 0, 100K, 1M) a database is seeded in-process through the store itself (~1 KiB
// payloads, spread over the seed's channels, already delivered: no pending deliveries), then
// the adapter is started on it: restart-to-ready is spawn to its ready line, when /health turns
// 200 (WAL recovery, migrations, the first sweep); then acked sends at 16 in flight, the first
// of them while PRAGMA quick_check still runs in its worker (ready does not wait for it).
//
//   node bench/store/stored.mjs [--sizes 0,100000,1000000] [--seconds 5]
import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { SqliteStore } from '../../dist/store/sqlite/sqlite-store.js';
import { AGENTS, benchDir, closedLoop, round, startAdapter, tokenOf, uuidv7 } from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '0,100000,1000000' },
    seconds: { type: 'string', default: '5' },
  },
});
const seconds = Number(values.seconds);
const text = 'x'.repeat(1000);
const channels = ['all-agents', 'product', ...AGENTS.map((a) => `@${a}`)];

function seed(file, n) {
  // seeding speed only (the adapter opens FULL); bounds above what a million ~1 KiB messages of
  // one sender take, search index counted (the defaults would refuse pm's share at ~2 GiB)
  const store = new SqliteStore(file, {
    sync: 'normal',
    storage: { maxBytes: 64 * 1024 ** 3, senderShare: 1, reserveBytes: 0 },
  });
  store.ensureChannels(channels);
  const payloadJson = JSON.stringify({ text });
  const t0 = Date.now() - 7 * 24 * 3600 * 1000;
  for (let done = 0; done < n; ) {
    const k = Math.min(20_000, n - done);
    store.commit(
      Array.from({ length: k }, (_, i) => {
        const key = uuidv7();
        return {
          op: 'append',
          drafts: [
            {
              sender: 'pm',
              idempotencyKey: key,
              fingerprint: createHash('sha256').update(key).digest(),
              channel: channels[(done + i) % channels.length],
              kind: 'status',
              priority: 'normal',
              replyTo: null,
              payloadJson,
              receivedAt: t0 + done + i,
              recipients: [],
            },
          ],
        };
      }),
    );
    done += k;
  }
  store.close();
}

const headers = { authorization: `Bearer ${tokenOf('pm')}`, 'content-type': 'application/json' };
const makeRequest = () => ({
  method: 'POST',
  path: '/v1/messages',
  headers,
  body: JSON.stringify({ idempotency_key: uuidv7(), to: '@qa', kind: 'status', payload: { text } }),
});

for (const n of values.sizes.split(',').map(Number)) {
  const { dir, topology, cleanup } = benchDir();
  const db = join(dir, 'adapter.db');
  const s0 = performance.now();
  seed(db, n);
  const seedSeconds = (performance.now() - s0) / 1000;
  const dbMib = round(statSync(db).size / 2 ** 20, 1);
  const t0 = performance.now();
  const adapter = await startAdapter(dir, topology, [
    '--db',
    db,
    '--queue-capacity',
    '1000000',
    // the seeded messages are pm's: room for the measured ones beside them
    '--max-store-bytes',
    String(64 * 1024 ** 3),
    '--sender-share-percent',
    '100',
  ]);
  const readyMs = performance.now() - t0;
  const r = await closedLoop(adapter.url, {
    inflight: 16,
    seconds,
    makeRequest,
    check: (s) => s === 201,
  });
  await adapter.stop();
  console.log(
    JSON.stringify({
      bench: 'stored',
      stored: n,
      db_mib: dbMib,
      seed_s: round(seedSeconds, 1),
      restart_to_ready_ms: Math.round(readyMs),
      inflight: 16,
      ...r,
    }),
  );
  cleanup();
}
