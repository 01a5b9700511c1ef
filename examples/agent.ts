/**
 * A minimal agent runtime on the typed client: it heartbeats, answers every task/request it
 * receives with a task/result, and raises an emergency if its handler keeps failing.
 *
 * Type-checked with the tests; run it with any TypeScript runner against a sidecar of the local
 * stack (`npm start`): AGENT_SIDECAR=http://127.0.0.1:7073 (qa).
 */
import { GatewayClient, type Message } from 'agent-gateway/client';

const gw = new GatewayClient({ url: process.env.AGENT_SIDECAR ?? 'http://127.0.0.1:7070' });
const controller = new AbortController();
process.once('SIGTERM', () => controller.abort());
process.once('SIGINT', () => controller.abort());

const beat = setInterval(() => {
  gw.heartbeat().then(
    (q) => console.log(`heartbeat: ${q.pending} pending (${q.critical_pending} critical)`),
    (err: unknown) => console.error('heartbeat failed:', (err as Error).message),
  );
}, 10_000);

let failures = 0;
async function handle(m: Message): Promise<void> {
  console.log(`#${m.channel_sequence_id} in ${m.channel} from ${m.sender}: ${m.kind}`);
  if (m.kind !== 'task/request') return;
  // ... do the work; throwing here nacks the delivery and it comes again after a backoff
  await gw.send({
    to: `@${m.sender}`,
    kind: 'task/result',
    payload: { task_id: String(m.payload.task_id), status: 'success' },
    // derived from the request: a retry of this reply is recognised as the same message
    idempotency_key: `result-${m.message_id}`,
  });
}

await gw.receive(handle, {
  signal: controller.signal,
  onError: (err, d) => {
    console.error(
      `delivery ${d.delivery_id} failed (attempt ${d.attempt}):`,
      (err as Error).message,
    );
    if (++failures >= 5) {
      void gw.emergency('manual', `the agent's handler failed ${failures} times in a row`);
      failures = 0;
    }
  },
});
clearInterval(beat);
