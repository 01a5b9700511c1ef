/**
 * A long poll parked on one replica is answered by a commit on another: the replicas tell each
 * other by LISTEN/NOTIFY, and a safety poll covers notifications lost (a failover, PgBouncer,
 * a LISTEN connection cut). Each check waits for the event, the poll returning the message,
 * never for a time bound: the poll's own wait (30 s, the longest allowed) is the only limit.
 */
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, type Json } from '../helpers/http.js';
import { envelope, post, type ReplicaSet, sleep, startReplicaSet } from '../helpers/replicas.js';
import { until, untilParked } from '../helpers/wait.js';

let set: ReplicaSet;
let admin: pg.Client;
beforeAll(async () => {
  set = await startReplicaSet();
  admin = new pg.Client({ connectionString: set.db.url });
  await admin.connect();
}, 60_000);
afterAll(async () => {
  await admin?.end();
  await set?.cleanup();
}, 30_000);

/**
 * Opens a 30 s long poll as `agent` on `pollUrl`, lets it park, sends through `sendUrl`, and
 * answers what the poll returned. `whileWaiting` runs after the poll is open, before the send.
 */
async function wakeAcross(
  pollUrl: string,
  sendUrl: string,
  agent: string,
  whileWaiting: () => Promise<void> = async () => {},
) {
  let returned = false;
  const poll = call(pollUrl, 'GET', '/v1/inbox?wait=30&max=10', { agent }).finally(() => {
    returned = true;
  });
  await untilParked(pollUrl, agent); // a poll opened after the commit would prove nothing
  await whileWaiting();
  expect(returned, 'the poll returned before anything was sent').toBe(false);
  const body = envelope(`@${agent}`, { cross: true });
  const sent = await post(sendUrl, 'pm', body);
  expect(sent.status).toBe(201);
  const r = await poll;
  expect(r.status).toBe(200);
  const ids = (r.body.deliveries as Json[]).map((d) => d.message.message_id);
  expect(ids, `the poll on ${pollUrl} did not return ${sent.body.message_id}`).toEqual([
    sent.body.message_id,
  ]);
  const acked = await call(pollUrl, 'POST', '/v1/acks', {
    agent,
    body: { delivery_ids: (r.body.deliveries as Json[]).map((d) => d.delivery_id) },
  });
  expect(acked.status).toBe(200);
}

/**
 * The backends of this database that LISTEN (one per replica, its dedicated connection): by
 * their last statement, or by the application_name the store gives that connection (it asks
 * for its own pid after LISTEN, so its last statement is not the LISTEN).
 */
async function listeners(): Promise<{ pid: number; query: string }[]> {
  const r = await admin.query(
    "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() AND (query ILIKE 'LISTEN%' OR application_name = 'agw-listen') AND pid <> pg_backend_pid()",
  );
  return r.rows as { pid: number; query: string }[];
}

it('a long poll on one replica wakes for a message sent through another', {
  timeout: 120_000,
}, async () => {
  const url = (i: number) => set.replicas.urlOf(i);
  console.log(`LISTEN connections at start: ${(await listeners()).length}`);
  await wakeAcross(url(0), url(1), 'qa');
  await wakeAcross(url(1), url(2), 'research');
  await wakeAcross(url(2), url(0), 'growth');
});

it('still wakes while its LISTEN connection is being killed', {
  timeout: 120_000,
}, async () => {
  const url = (i: number) => set.replicas.urlOf(i);
  // Cut every replica's LISTEN connection, and keep cutting it until the poll returns: a
  // replica that reconnects and LISTENs again loses it again within 50 ms, so the notice of
  // the commit is most likely lost, and the wake-up must come from the store's cover for lost
  // notices (its safety poll, or the wake-everyone it sends after a reconnect: this test
  // cannot tell which). The notices still go out, from the sender's ordinary connection.
  const killedPids: number[] = [];
  let cutting = true;
  const cut = async () => {
    while (cutting) {
      for (const l of await listeners()) {
        await admin.query('SELECT pg_terminate_backend($1)', [l.pid]);
        killedPids.push(l.pid);
      }
      await sleep(50);
    }
  };
  let cutter: Promise<void> | undefined;
  try {
    await wakeAcross(url(0), url(1), 'engineering', async () => {
      for (const l of await listeners()) {
        await admin.query('SELECT pg_terminate_backend($1)', [l.pid]);
        killedPids.push(l.pid);
      }
      cutter = cut();
      await sleep(200);
    });
  } finally {
    cutting = false;
    await cutter;
  }
  expect(killedPids.length, 'LISTEN connections found and killed').toBeGreaterThan(0);
  // the replicas live on, listen again once the cutting stops, and wake each other as before
  expect(set.replicas.running(), set.replicas.logs()).toHaveLength(3);
  await until(
    async () => (await listeners()).length >= 3,
    'every replica LISTENs again after its connection was killed',
    { ms: 60_000, everyMs: 250 },
  );
  await wakeAcross(url(2), url(0), 'qa');
  console.log(`killed LISTEN backends: ${killedPids.join(' ')}`);
});
