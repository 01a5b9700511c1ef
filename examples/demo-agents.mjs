// The demo's agents, for `npm start` (examples/local-stack.mjs): a small runtime per agent of the
// topology, on the typed client, that acts as an agent does, so that the adapter's stall watch
// (alert/stalled after AGW_STALL_S without a poll while a message waits) has nothing to say that
// the demo did not cause:
// - each long-polls its inbox through its sidecar and acks what it gets (the client's receive
//   loop), printing one line per message;
// - it answers a task/request with a task/result, and a direct message from another agent (an
//   ask, say) with a status, each as a reply (`reply_to`), never answering a reply: the demo's
//   agents do not talk among themselves;
// - the alerts_to agent (orchestrator) prints every alert it takes, payload included: the alerts
//   the stack raises show up here.
// Agents named in `handsOn` are yours to drive by hand, as the README's quick start does with
// qa's inbox: their runtime only heartbeats, and takes over (polls, acks, answers) what has been
// waiting for half of AGW_STALL_S, saying so, so that a message left there does not stall them
// either. A runtime whose sidecar is gone stops polling, and the adapter alerts as it should.
import { setTimeout as sleep } from 'node:timers/promises';
import { GatewayClient } from 'agent-gateway/client';

/**
 * Starts a runtime for each agent of `sidecars` (agent id → its sidecar's URL); `signal` stops
 * them. Resolves once every runtime has stopped.
 *
 * @param {{
 *   sidecars: Map<string, string>,
 *   handsOn: ReadonlySet<string>,
 *   alertsTo: string,
 *   stallS: number,
 *   say: (line: string) => void,
 *   signal: AbortSignal,
 * }} o
 */
export function startDemoAgents(o) {
  const runs = [...o.sidecars].map(([id, url]) => {
    const gw = new GatewayClient({ url });
    const handle = handlerFor(id, gw, o);
    return o.handsOn.has(id) ? standBy(id, gw, handle, o) : receive(id, gw, handle, o);
  });
  return Promise.all(runs).then(() => undefined);
}

/** What an agent of the demo does with one message. */
function handlerFor(id, gw, o) {
  return async (m) => {
    if (id === o.alertsTo && m.kind.startsWith('alert/')) {
      o.say(`demo: ${id} got ${m.kind} from ${m.sender}: ${JSON.stringify(m.payload)}`);
      return;
    }
    o.say(`demo: ${id} got #${m.channel_sequence_id} in ${m.channel}: ${m.kind} from ${m.sender}`);
    const answer = answerTo(id, m);
    if (answer === undefined) return;
    try {
      // the key is derived from what it answers: a repeat of the message answers it once
      await gw.send({ ...answer, idempotency_key: `demo-${id}-${m.message_id}` });
    } catch (err) {
      // refused for good (a thread or hop budget): said, and the message is still acked; a
      // retry would be refused the same way, and then dead-lettered with an alert
      o.say(`demo: ${id} could not answer ${m.kind} from ${m.sender}: ${err.message}`);
    }
  };
}

/** The demo's answer to a message, or undefined: none. */
function answerTo(id, m) {
  const fromAgent = m.sender !== 'adapter' && !m.sender.startsWith('operator:');
  if (!fromAgent || m.sender === id || m.reply_to !== undefined) return undefined;
  const reply = { to: `@${m.sender}`, reply_to: m.message_id };
  if (m.kind === 'task/request') {
    const task = m.payload.task_id;
    return {
      ...reply,
      kind: 'task/result',
      payload: { ...(task === undefined ? {} : { task_id: task }), status: 'success', by: id },
    };
  }
  if (m.channel === `@${id}`) {
    return { ...reply, kind: 'status', payload: { text: `${id} (demo) got your ${m.kind}` } };
  }
  return undefined;
}

/** An agent the demo runs: long polls, each delivery handled and acked. */
async function receive(id, gw, handle, o) {
  await gw.receive(handle, {
    signal: o.signal,
    waitS: 25,
    onError: (err, d) => o.say(`demo: ${id} failed delivery ${d.delivery_id}: ${err.message}`),
  });
}

/**
 * An agent you drive by hand: heartbeats (which do not count as polling) say whether something
 * waits; what has waited for half of AGW_STALL_S is taken, answered and acked here. A message you
 * took and did not ack comes back when its lease ends, and is taken then.
 */
async function standBy(id, gw, handle, o) {
  const stallMs = o.stallS * 1000;
  const takeOverMs = stallMs / 2;
  const beatMs = Math.min(10_000, stallMs / 8);
  let waitingSince;
  while (!o.signal.aborted) {
    try {
      const { pending } = await gw.heartbeat();
      if (pending === 0) waitingSince = undefined;
      else {
        waitingSince ??= Date.now();
        if (Date.now() - waitingSince >= takeOverMs) {
          waitingSince = undefined;
          await takeOver(id, gw, handle, o, takeOverMs);
        }
      }
    } catch {
      // its sidecar is away: nothing to do until it is back
    }
    await sleep(beatMs, undefined, { signal: o.signal }).catch(() => {});
  }
}

async function takeOver(id, gw, handle, o, waitedMs) {
  const { deliveries } = await gw.call('inbox', { wait: 0, max: 100 });
  if (deliveries.length === 0) return; // what waits is leased: it comes back when its lease ends
  o.say(
    `demo: ${id} is yours to drive, but ${deliveries.length} message(s) waited ${Math.round(waitedMs / 1000)} s: the demo takes them`,
  );
  for (const d of deliveries) await handle(d.message, d);
  await gw.ack(deliveries.map((d) => d.delivery_id));
}
