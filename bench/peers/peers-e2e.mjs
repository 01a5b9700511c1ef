// End-to-end latency for the peers, measured like bench/path/e2e.mjs: a sender at a fixed rate
// (default 500 msg/s, open loop), a consumer in the same process, latency = receive time minus
// send time on this process's clock. One JSON line per peer.
//
// - NATS JetStream: publish awaiting the PubAck; an ordered push consumer.
// - RabbitMQ: a quorum queue, persistent messages with confirms; a consumer with manual acks.
// - PostgreSQL (`postgresql`): INSERT and pg_notify in one transaction (synchronous_commit on);
//   LISTEN. The notification is the receipt: no lease, no ack.
// - PostgreSQL as an acked queue (`postgresql-queue`, --only postgres-queue): the sender INSERTs
//   one row and NOTIFYs in the same transaction (synchronous_commit on); --consumers connections
//   (default 2) take rows, woken by one more connection that LISTENs: a notification wakes one
//   idle consumer, and a consumer loops as long as it finds rows. A consumer takes the oldest row
//   it can (BEGIN; SELECT ... ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED), handles it (records its
//   latency), DELETEs it and COMMITs; the message counts as received when that commit returns (its
//   ack, fsynced). `p50_ms`/`p99_ms`/`max_ms` are to the row in the consumer's hands, as the other
//   rows measure to the consumer's callback; `ack_p50_ms`/`ack_p99_ms`/`ack_max_ms` to the DELETE's
//   commit. Its send side, like `postgresql`'s, commits one transaction per fsync at most: a
//   transaction that NOTIFYs holds a cluster-wide lock until its commit is flushed (see
//   peers.mjs), so a rate above what one fsync at a time allows backs up the sender.
//
// Server CPU (`cpu_us`): the user + system time of the server's processes per delivered message,
// from the first send to the last receipt (or the 10 s wait's end), from /proc (bench/lib/lib.mjs
// cpuMeter: the process listening on the port and all its descendants, PostgreSQL's backends
// included, and those that start or end meanwhile). Only meaningful on a machine where nothing
// else uses the server.
//
//   node bench/peers/peers-e2e.mjs [--rate 500] [--seconds 10] [--consumers 2]
//                                  [--only nats,rabbitmq,postgres,postgres-queue]
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import { connect, StringCodec } from 'nats';
import pg from 'pg';
import { latencySummary, serverCpuMeter } from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '500' },
    seconds: { type: 'string', default: '10' },
    consumers: { type: 'string', default: '2' },
    only: { type: 'string', default: 'nats,rabbitmq,postgres,postgres-queue' },
  },
});
const rate = Number(values.rate);
const seconds = Number(values.seconds);
const consumers = Number(values.consumers);
const only = new Set(values.only.split(','));
const text = 'x'.repeat(1000);

/**
 * Sends `rate` per second for `seconds` with send(body); waits for the receipts (`latencies`, one
 * per message received); reports, with the server's CPU (`meter`) per message received and the
 * fields of `extra()`.
 */
async function openLoop(target, send, latencies, meter, extra = () => ({})) {
  const total = Math.round(rate * seconds);
  const start = performance.now() + 500;
  const pending = [];
  for (let i = 0; i < total; i++) {
    const wait = start + (i * 1000) / rate - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    if (i === 0) {
      latencies.length = 0;
      meter.start();
    }
    pending.push(send(JSON.stringify({ t: performance.now(), id: randomUUID(), text })));
  }
  await Promise.all(pending);
  const deadline = performance.now() + 10_000;
  while (latencies.length < total && performance.now() < deadline)
    await new Promise((r) => setTimeout(r, 20));
  const cpu = meter.stop(latencies.length);
  console.log(
    JSON.stringify({
      bench: 'peer-e2e',
      target,
      rate,
      seconds,
      sent: total,
      received: latencies.length,
      ...latencySummary(latencies),
      ...extra(),
      ...cpu,
    }),
  );
}

async function nats() {
  const nc = await connect({ servers: '127.0.0.1:4222' });
  const jsm = await nc.jetstreamManager();
  const stream = `AGW_E2E_${process.pid}`;
  const subject = `agwe2e${process.pid}.qa`;
  await jsm.streams.add({ name: stream, subjects: [subject], storage: 'file' });
  const js = nc.jetstream();
  const sc = StringCodec();
  const latencies = [];
  const consumer = await js.consumers.get(stream); // ordered consumer
  const messages = await consumer.consume();
  (async () => {
    for await (const m of messages)
      latencies.push(performance.now() - JSON.parse(sc.decode(m.data)).t);
  })();
  try {
    await openLoop(
      'nats-jetstream',
      (b) => js.publish(subject, sc.encode(b), { msgID: randomUUID() }),
      latencies,
      serverCpuMeter('nats-server'),
    );
  } finally {
    await messages.close();
    await jsm.streams.delete(stream);
    await nc.close();
  }
}

async function rabbitmq() {
  const conn = await amqp.connect('amqp://guest:guest@127.0.0.1:5672', { noDelay: true });
  const pub = await conn.createConfirmChannel();
  const sub = await conn.createChannel();
  const queue = `agw-e2e-${process.pid}`;
  await pub.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
  await sub.prefetch(100);
  const latencies = [];
  await sub.consume(queue, (m) => {
    latencies.push(performance.now() - JSON.parse(m.content.toString()).t);
    sub.ack(m);
  });
  try {
    await openLoop(
      'rabbitmq-quorum',
      (b) =>
        new Promise((resolve, reject) =>
          pub.sendToQueue(queue, Buffer.from(b), { persistent: true }, (err) =>
            err ? reject(err) : resolve(),
          ),
        ),
      latencies,
      serverCpuMeter('rabbitmq'),
    );
  } finally {
    await pub.deleteQueue(queue);
    await conn.close();
  }
}

async function postgres() {
  const opts = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'postgres' };
  const table = `agw_e2e_${process.pid}`;
  const admin = new pg.Client(opts);
  await admin.connect();
  await admin.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, body text NOT NULL)`);
  const listener = new pg.Client(opts);
  await listener.connect();
  const latencies = [];
  listener.on('notification', (n) => latencies.push(performance.now() - JSON.parse(n.payload).t));
  await listener.query(`LISTEN ${table}`);
  const pool = new pg.Pool({ ...opts, max: 16 });
  try {
    // the notification carries the time only (NOTIFY payloads are limited to 8000 bytes)
    await openLoop(
      'postgresql',
      (b) =>
        pool.query(
          `WITH ins AS (INSERT INTO ${table} (body) VALUES ($1) RETURNING id) SELECT pg_notify('${table}', $2) FROM ins`,
          [b, JSON.stringify({ t: JSON.parse(b).t })],
        ),
      latencies,
      serverCpuMeter('postgresql'),
    );
  } finally {
    await pool.end();
    await listener.end();
    await admin.query(`DROP TABLE ${table}`);
    await admin.end();
  }
}

async function postgresQueue() {
  const opts = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'postgres' };
  const table = `agw_q_${process.pid}`;
  const admin = new pg.Client(opts);
  await admin.connect();
  await admin.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, body text NOT NULL)`);
  const sync = (await admin.query('SHOW synchronous_commit')).rows[0].synchronous_commit;
  const latencies = []; // to the row in hand, pushed when its DELETE commits
  const acked = []; // to the DELETE's commit
  let errors = 0;
  let notified = 0; // notifications so far: a consumer that found no row looks again if it moved
  let stopping = false;
  const idle = []; // the wake-ups of consumers waiting for a notification

  /** Takes, handles and deletes rows until none is left; false if none was there. */
  const takeOne = async (client) => {
    await client.query('BEGIN');
    try {
      const { rows } = await client.query(
        `SELECT id, body FROM ${table} ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`,
      );
      if (rows.length === 0) {
        await client.query('COMMIT');
        return false;
      }
      const { t } = JSON.parse(rows[0].body); // handling: the message is in the consumer's hands
      const inHand = performance.now() - t;
      await client.query(`DELETE FROM ${table} WHERE id = $1`, [rows[0].id]);
      await client.query('COMMIT'); // the ack: fsynced with synchronous_commit on
      acked.push(performance.now() - t);
      latencies.push(inHand);
      return true;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    }
  };
  const workers = await Promise.all(
    Array.from({ length: consumers }, async () => {
      const client = new pg.Client(opts);
      await client.connect();
      const done = (async () => {
        while (!stopping) {
          const seen = notified;
          let took;
          try {
            took = await takeOne(client);
          } catch {
            errors++;
            took = false;
          }
          if (took || notified !== seen) continue; // rows may remain: look again
          await new Promise((wake) => idle.push(wake));
        }
      })();
      return { client, done };
    }),
  );
  const listener = new pg.Client(opts);
  await listener.connect();
  listener.on('notification', () => {
    notified++;
    idle.shift()?.();
  });
  await listener.query(`LISTEN ${table}`);
  const pool = new pg.Pool({ ...opts, max: 16 });
  try {
    await openLoop(
      'postgresql-queue',
      // one statement, one transaction: the row and its notification commit together
      (b) =>
        pool.query(
          `WITH ins AS (INSERT INTO ${table} (body) VALUES ($1) RETURNING id) SELECT pg_notify('${table}', '') FROM ins`,
          [b],
        ),
      latencies,
      serverCpuMeter('postgresql'),
      () => {
        const { p50_ms, p99_ms, max_ms } = latencySummary(acked);
        return {
          consumers,
          synchronous_commit: sync,
          ack_p50_ms: p50_ms,
          ack_p99_ms: p99_ms,
          ack_max_ms: max_ms,
          errors,
        };
      },
    );
  } finally {
    stopping = true;
    for (const wake of idle.splice(0)) wake();
    await Promise.all(workers.map((w) => w.done));
    await Promise.all([pool.end(), listener.end(), ...workers.map((w) => w.client.end())]);
    await admin.query(`DROP TABLE ${table}`);
    await admin.end();
  }
}

if (only.has('nats')) await nats();
if (only.has('rabbitmq')) await rabbitmq();
if (only.has('postgres')) await postgres();
if (only.has('postgres-queue')) await postgresQueue();
