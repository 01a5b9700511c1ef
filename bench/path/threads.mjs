// The thread budgets' cost on the send path: acknowledged sends at 16 in flight (~1 KiB
// payloads, synchronous=FULL) as plain messages that start no thread, against replies in long
// threads, in the same run and adapter. A reply names the previous message of its thread (pm and
// qa answering each other in their direct channels), so each thread is a chain of sends one
// after the other: 16 threads keep 16 in flight. Before a reply would pass a budget (hop 8 with
// the default AGW_HOP_BUDGET, or the 16th message of the thread), the orchestrator continues the
// thread, as an operator would, and the chain goes on from its message: 1 send in 9 is a
// continuation. One JSON line per measurement on stdout.
//
//   node bench/path/threads.mjs [--seconds 5] [--inflight 16] [--sync full]
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import {
  benchDir,
  closedLoop,
  closedLoopFn,
  histogram,
  round,
  startAdapter,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    inflight: { type: 'string', default: '16' },
    sync: { type: 'string', default: 'full' },
  },
});
const seconds = Number(values.seconds);
const inflight = Number(values.inflight);
/** The default budgets (docs/reference/configuration.md), which the adapter below runs with. */
const HOP_BUDGET = 8;
const THREAD_BUDGET = 16;
const text = 'x'.repeat(1000);
const headersOf = (agent) => ({
  authorization: `Bearer ${tokenOf(agent)}`,
  'content-type': 'application/json',
});
const body = (to, extra = {}) =>
  JSON.stringify({ idempotency_key: uuidv7(), to, kind: 'status', payload: { text }, ...extra });
const emit = (o) => console.log(JSON.stringify({ bench: 'threads', sync: values.sync, ...o }));

const { dir, topology, cleanup } = benchDir();
// no per-sender rate (lib.mjs turns it off where the CLI has it): this measures the budgets
const adapter = await startAdapter(dir, topology, [
  '--sync',
  values.sync,
  '--queue-capacity',
  '1000000',
]);

/** Runs one closed loop and reports it with the shape of its commits. */
async function measure(kind, loop) {
  const before = await histogram(adapter.url, 'agw_commit_seconds');
  const beforeSize = await histogram(adapter.url, 'agw_commit_messages');
  const r = await loop();
  const after = await histogram(adapter.url, 'agw_commit_seconds');
  const afterSize = await histogram(adapter.url, 'agw_commit_messages');
  const commits = after.count - before.count;
  emit({
    kind,
    inflight,
    ...r,
    messages_per_commit: round((afterSize.sum - beforeSize.sum) / commits, 1),
    commit_ms_avg: round(((after.sum - before.sum) / commits) * 1000, 3),
  });
}

try {
  // plain sends: each starts a thread of its own
  await measure('plain', () =>
    closedLoop(adapter.url, {
      inflight,
      seconds,
      makeRequest: () => ({
        method: 'POST',
        path: '/v1/messages',
        headers: headersOf('pm'),
        body: body('@qa'),
      }),
      check: (status) => status === 201,
    }),
  );

  // replies: `inflight` threads, each a chain; a send takes an idle one and answers its last
  const pool = new Pool(adapter.url, { connections: inflight, pipelining: 1 });
  const post = async (agent, json) => {
    const res = await pool.request({
      method: 'POST',
      path: '/v1/messages',
      headers: headersOf(agent),
      body: json,
    });
    const answer = await res.body.json();
    if (res.statusCode !== 201) throw new Error(`${res.statusCode} ${JSON.stringify(answer)}`);
    return answer;
  };
  const idle = [];
  for (let i = 0; i < inflight; i++) {
    const root = await post('pm', body('@qa'));
    // `count`: messages of agents in the thread since its last continuation, the root included
    idle.push({ last: root, from: 'pm', count: 1 });
  }
  const stats = { replies: 0, continuations: 0 };
  try {
    await measure('replies', () =>
      closedLoopFn({
        inflight,
        seconds,
        send: async () => {
          const chain = idle.pop();
          try {
            const full = chain.last.hop >= HOP_BUDGET || chain.count >= THREAD_BUDGET;
            const next = chain.from === 'pm' ? 'qa' : 'pm';
            // the orchestrator continues before a budget refuses, writing to the agent that
            // answers next (so that it received what it answers); else that agent answers
            const agent = full ? 'orchestrator' : next;
            const to = full ? `@${next}` : `@${chain.from}`;
            chain.last = await post(agent, body(to, { reply_to: chain.last.message_id }));
            if (full) {
              stats.continuations++;
              chain.count = 1;
            } else {
              stats.replies++;
              chain.count++;
              chain.from = agent;
            }
          } finally {
            idle.push(chain);
          }
        },
      }),
    );
  } finally {
    await pool.close();
  }
  emit({ kind: 'replies-made', ...stats });
} finally {
  await adapter.stop();
  cleanup();
}
