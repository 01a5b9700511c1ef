// Acknowledged sends per second and ack latency at 1, 16 and 64 in flight, ~1 KiB payloads,
// over HTTP with an undici Pool: the bare HTTP floor, then the adapter with synchronous=FULL and
// NORMAL. One JSON line per measurement on stdout, with the server's CPU per acked send (cpu_us).
//
//   node bench/path/send.mjs [--seconds 5] [--inflight 1,16,64] [--to @qa] [--keys v7|v4]
//                       [--floor yes|no] [--log-floor yes|no] [--sync full,normal]
//
// The log floor (bench/lib/log-floor.mjs): the same sends to a server whose write path is one
// fdatasync'ed append per group, with its indexes in memory: the floor of the design step the
// adapter's profile points to.
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import {
  benchDir,
  closedLoop,
  cpuMeter,
  histogram,
  round,
  startAdapter,
  startProcess,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    inflight: { type: 'string', default: '1,16,64' },
    to: { type: 'string', default: '@qa' },
    // v7: time-ordered keys, what the sidecar and client make; v4: random keys, the worst case
    // for the (sender, key) index, one B-tree page written per message
    keys: { type: 'string', default: 'v7' },
    floor: { type: 'string', default: 'yes' },
    'log-floor': { type: 'string', default: 'yes' },
    sync: { type: 'string', default: 'full,normal' },
  },
});
const seconds = Number(values.seconds);
const levels = values.inflight.split(',').map(Number);
const text = 'x'.repeat(1000);
const headers = { authorization: `Bearer ${tokenOf('pm')}`, 'content-type': 'application/json' };
const makeRequest = () => ({
  method: 'POST',
  path: '/v1/messages',
  headers,
  body: JSON.stringify({
    idempotency_key: newKey(),
    to: values.to,
    kind: 'status',
    payload: { text },
  }),
});
const newKey = values.keys === 'v4' ? randomUUID : uuidv7;
const created = (status) => status === 201;
const emit = (o) =>
  console.log(JSON.stringify({ bench: 'send', to: values.to, keys: values.keys, ...o }));

if (values.floor === 'yes') {
  const floor = await startProcess(
    [new URL('../lib/floor-server.mjs', import.meta.url).pathname],
    {},
    (e) => e.msg === 'floor ready',
  );
  for (const inflight of levels) {
    const meter = cpuMeter({ 'http-floor': [floor.pid] });
    const r = await closedLoop(floor.url, {
      inflight,
      seconds,
      makeRequest,
      check: created,
      meter,
    });
    emit({ target: 'http-floor', inflight, ...r });
  }
  await floor.stop();
}

for (const mode of values['log-floor'] === 'yes' ? ['sync', 'async'] : []) {
  const { dir, cleanup } = benchDir();
  const log = await startProcess(
    [new URL('../lib/log-floor.mjs', import.meta.url).pathname, `${dir}/log`, mode],
    {},
    (e) => e.msg === 'log floor ready',
  );
  for (const inflight of levels) {
    const meter = cpuMeter({ 'log-floor': [log.pid] });
    const r = await closedLoop(log.url, { inflight, seconds, makeRequest, check: created, meter });
    emit({ target: `log-floor-${mode}`, inflight, ...r });
  }
  await log.stop();
  cleanup();
}

for (const sync of values.sync.split(',')) {
  const { dir, topology, cleanup } = benchDir();
  // a bound above what a run can pile up: this measures the write path, not eviction
  const adapter = await startAdapter(dir, topology, [
    '--sync',
    sync,
    '--queue-capacity',
    '1000000',
  ]);
  for (const inflight of levels) {
    const before = await histogram(adapter.url, 'agw_commit_seconds');
    const beforeSize = await histogram(adapter.url, 'agw_commit_messages');
    // server CPU per acked send (utime + stime, lib.mjs cpuMeter), as the peers' rows have it
    const meter = cpuMeter({ adapter: [adapter.pid] });
    const r = await closedLoop(adapter.url, {
      inflight,
      seconds,
      makeRequest,
      check: created,
      meter,
    });
    const after = await histogram(adapter.url, 'agw_commit_seconds');
    const afterSize = await histogram(adapter.url, 'agw_commit_messages');
    const commits = after.count - before.count;
    emit({
      target: 'adapter',
      sync,
      inflight,
      ...r,
      // measured part and warm-up together: the shape of the commits, not a rate
      messages_per_commit: round((afterSize.sum - beforeSize.sum) / commits, 1),
      commit_ms_avg: round(((after.sum - before.sum) / commits) * 1000, 3),
      commit_share_of_wall: round((after.sum - before.sum) / (r.seconds + 1), 3),
    });
  }
  await adapter.stop();
  cleanup();
}
