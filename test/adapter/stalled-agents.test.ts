/**
 * Stalled agents, through the real program: an agent that does not poll while a delivery waits
 * for it raises `alert/stalled` to the alerts_to agent and a CRIT journald entry (reason
 * `stalled`), once per stall, and again only after it polled and stalled anew. AGW_STALL_S=1
 * makes a stall a matter of a second; every assertion waits for an event (an alert in the
 * orchestrator's inbox, an entry in a real journald), never for a duration.
 *
 * "Not twice": qa's message is sent after engineering's alert arrived, so qa's alert comes at
 * least one stall time (four checks) later; had engineering been alerted again meanwhile, that
 * alert would be the next one in the orchestrator's channel.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EMERGENCY_MESSAGE_ID } from '../../src/journald/emergency.js';
import { type ChildAdapter, spawnAdapter } from '../helpers/cli.js';
import { call, type Json, pollAs, sendAs } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { tempDir, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-stalls-');
let journal: TestJournal;
let adapter: ChildAdapter;
beforeAll(async () => {
  journal = await startJournal();
  adapter = await spawnAdapter(['--topology', writeTopology(dir), '--db', join(dir, 'a.db')], {
    AGW_STALL_S: '1',
    AGW_JOURNAL_SOCKET: journal.socket,
  });
});
afterAll(async () => {
  adapter?.child.kill('SIGKILL');
  await adapter?.exited;
  await journal?.destroy();
  cleanup();
});

/**
 * The next message in the orchestrator's inbox (it keeps polling), acked at once. The 15 s only
 * bounds a failing run: with AGW_STALL_S=1 an alert comes within 1.25 s of the stall.
 */
async function nextAlert(): Promise<Json> {
  for (const deadline = Date.now() + 15_000; ; ) {
    if (Date.now() > deadline) throw new Error("no alert in the orchestrator's inbox within 15 s");
    const [d] = await pollAs(adapter.url, 'orchestrator', { wait: 5, max: 1 });
    if (d === undefined) continue;
    const ack = await call(adapter.url, 'POST', '/v1/acks', {
      agent: 'orchestrator',
      body: { delivery_ids: [d.delivery_id] },
    });
    expect(ack.status).toBe(200);
    return d.message;
  }
}

/** /metrics samples of `name` by agent label. */
async function byAgent(name: string): Promise<Record<string, number>> {
  const text = (await call(adapter.url, 'GET', '/metrics')).body as string;
  const out: Record<string, number> = {};
  for (const m of text.matchAll(new RegExp(`^${name}\\{agent="([^"]+)"\\} (\\S+)$`, 'gm')))
    out[m[1]!] = Number(m[2]);
  return out;
}

it('alerts a stalled agent once per stall, to alerts_to and as a CRIT entry, and again after it polled and stalled anew', {
  timeout: 60_000,
}, async () => {
  // engineering never polls: one delivery waits for it
  await sendAs(adapter.url, 'pm', '@engineering', 'task/request', {
    task_id: 'T-1',
    description: 'build it',
  });
  const first = await nextAlert();
  expect(first).toMatchObject({
    sender: 'adapter',
    channel: '@orchestrator',
    kind: 'alert/stalled',
    priority: 'critical',
    payload: { reason: 'stalled', recipient: 'engineering', pending: 1, last_poll: null },
  });
  expect(Object.keys(first.payload).sort()).toEqual([
    'last_poll',
    'pending',
    'reason',
    'recipient',
  ]);
  const crit = await journal.next(`MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`, 'AGW_REASON=stalled');
  expect(crit).toMatchObject({
    PRIORITY: '2',
    SYSLOG_IDENTIFIER: 'agent-gateway',
    AGW_AGENT_ID: 'adapter',
    AGW_RECIPIENT: 'engineering',
    AGW_PENDING: '1',
    AGW_LAST_POLL: 'none since the adapter started',
  });

  // qa stalls next; engineering, still stalled, is not alerted again meanwhile
  await sendAs(adapter.url, 'pm', '@qa', 'status');
  const second = await nextAlert();
  expect(second.payload).toEqual({
    reason: 'stalled',
    recipient: 'qa',
    pending: 1,
    last_poll: null,
  });
  const metrics = {
    stalled: await byAgent('agw_agent_stalled'),
    age: await byAgent('agw_agent_oldest_pending_age_seconds'),
    lastPoll: await byAgent('agw_agent_last_poll_timestamp_seconds'),
  };
  expect(metrics.stalled).toMatchObject({ engineering: 1, qa: 1, pm: 0, orchestrator: 0 });
  expect(metrics.age.qa).toBeGreaterThanOrEqual(1);
  expect(metrics.age.engineering).toBeGreaterThan(metrics.age.qa!);
  expect(metrics.age.pm).toBe(0);
  expect(metrics.lastPoll).toMatchObject({ engineering: 0, qa: 0 });
  expect(metrics.lastPoll.orchestrator).toBeGreaterThan(0);

  // engineering polls (its stall is over), does its task, and then stalls on a new message
  const polledAt = Date.now();
  const [task] = await pollAs(adapter.url, 'engineering');
  expect(task.message.payload).toEqual({ task_id: 'T-1', description: 'build it' });
  expect((await byAgent('agw_agent_stalled')).engineering).toBe(0);
  await call(adapter.url, 'POST', '/v1/acks', {
    agent: 'engineering',
    body: { delivery_ids: [task.delivery_id] },
  });
  await sendAs(adapter.url, 'pm', '@engineering', 'task/request', {
    task_id: 'T-2',
    description: 'build it again',
  });
  const third = await nextAlert();
  expect(third.payload).toMatchObject({ reason: 'stalled', recipient: 'engineering', pending: 1 });
  expect(Date.parse(third.payload.last_poll)).toBeGreaterThanOrEqual(polledAt - 1);
  expect((await byAgent('agw_agent_last_poll_timestamp_seconds')).engineering).toBe(
    Date.parse(third.payload.last_poll) / 1000,
  );
});
