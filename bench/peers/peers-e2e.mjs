// End-to-end latency for the peers, measured like bench/path/e2e.mjs: a sender at a fixed rate
// (default 500 msg/s, open loop), a consumer in the same process, latency = receive time minus
// send time on this process's clock. One JSON line per peer.
//
// - NATS JetStream: publish awaiting the PubAck; an ordered push consumer.
// - RabbitMQ: a quorum queue, persistent messages with confirms; a consumer with manual acks.
// - PostgreSQL: INSERT and pg_notify in one transaction (synchronous_commit on); LISTEN.
//
//   node bench/peers/peers-e2e.mjs [--rate 500] [--seconds 10] [--only nats,rabbitmq,postgres]
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import { connect, StringCodec } from 'nats';
import pg from 'pg';
import { latencySummary } from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '500' },
    seconds: { type: 'string', default: '10' },
    only: { type: 'string', default: 'nats,rabbitmq,postgres' },
  },
});
const rate = Number(values.rate);
const seconds = Number(values.seconds);
const only = new Set(values.only.split(','));
const text = 'x'.repeat(1000);

/** Sends `rate` per second for `seconds` with send(body); waits for the receipts; reports. */
async function openLoop(target, send, latencies) {
  const total = Math.round(rate * seconds);
  const start = performance.now() + 500;
  const pending = [];
  for (let i = 0; i < total; i++) {
    const wait = start + (i * 1000) / rate - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(send(JSON.stringify({ t: performance.now(), id: randomUUID(), text })));
  }
  await Promise.all(pending);
  const deadline = performance.now() + 10_000;
  while (latencies.length < total && performance.now() < deadline)
    await new Promise((r) => setTimeout(r, 20));
  console.log(
    JSON.stringify({
      bench: 'peer-e2e',
      target,
      rate,
      seconds,
      sent: total,
      received: latencies.length,
      ...latencySummary(latencies),
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
    );
  } finally {
    await pool.end();
    await listener.end();
    await admin.query(`DROP TABLE ${table}`);
    await admin.end();
  }
}

if (only.has('nats')) await nats();
if (only.has('rabbitmq')) await rabbitmq();
if (only.has('postgres')) await postgres();
