// Fan-out for the peers, measured like bench/path/fanout.mjs: a publisher with 16 in flight, five
// consumers that each get every message and ack it; messages accepted and deliveries received
// per second while sending. PostgreSQL has no fan-out of its own and is left out.
//
// - NATS JetStream: one file stream, five durable consumers with explicit acks.
// - RabbitMQ: a fanout exchange bound to five quorum queues; confirms; consumers with acks.
//
// Server CPU (`cpu_us`): the user + system time of the server's processes while sending, per
// message accepted (each one delivered to five), from /proc (bench/lib/lib.mjs cpuMeter: the
// process listening on the port and its descendants). Deliveries still queued when sending stops
// are not in it, and were not counted as delivered either; only meaningful on a machine where
// nothing else uses the server.
//
//   node bench/peers/peers-fanout.mjs [--seconds 5] [--inflight 16] [--only nats,rabbitmq]
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import { AckPolicy, connect, StringCodec } from 'nats';
import { round, serverCpuMeter } from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    inflight: { type: 'string', default: '16' },
    only: { type: 'string', default: 'nats,rabbitmq' },
  },
});
const seconds = Number(values.seconds);
const inflight = Number(values.inflight);
const only = new Set(values.only.split(','));
const body = () => JSON.stringify({ id: randomUUID(), text: 'x'.repeat(1000) });

async function publishFor(send, meter) {
  let accepted = 0;
  meter.start();
  const started = performance.now();
  const until = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: inflight }, async () => {
      while (performance.now() < until) {
        await send();
        accepted++;
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  return { accepted, seconds: elapsed, ...meter.stop(accepted) };
}

function report(target, { accepted, seconds: s, cpu_us }, receivedWhileSending) {
  console.log(
    JSON.stringify({
      bench: 'peer-fanout',
      target,
      recipients: 5,
      inflight,
      seconds: round(s, 2),
      messages_per_second: Math.round(accepted / s),
      deliveries_per_second_while_sending: Math.round(receivedWhileSending / s),
      cpu_us,
    }),
  );
}

async function nats() {
  const nc = await connect({ servers: '127.0.0.1:4222' });
  const jsm = await nc.jetstreamManager();
  const stream = `AGW_FAN_${process.pid}`;
  const subject = `agwfan${process.pid}.all`;
  await jsm.streams.add({ name: stream, subjects: [subject], storage: 'file' });
  const js = nc.jetstream();
  const sc = StringCodec();
  let received = 0;
  const subs = [];
  for (let i = 0; i < 5; i++) {
    await jsm.consumers.add(stream, { durable_name: `c${i}`, ack_policy: AckPolicy.Explicit });
    const consumer = await js.consumers.get(stream, `c${i}`);
    const messages = await consumer.consume({ max_messages: 500 });
    subs.push(messages);
    (async () => {
      for await (const m of messages) {
        received++;
        m.ack();
      }
    })();
  }
  try {
    const r = await publishFor(
      () => js.publish(subject, sc.encode(body()), { msgID: randomUUID() }),
      serverCpuMeter('nats-server'),
    );
    report('nats-jetstream', r, received);
  } finally {
    for (const s of subs) await s.close();
    await jsm.streams.delete(stream);
    await nc.close();
  }
}

async function rabbitmq() {
  const conn = await amqp.connect('amqp://guest:guest@127.0.0.1:5672', { noDelay: true });
  const pub = await conn.createConfirmChannel();
  const exchange = `agw-fan-${process.pid}`;
  await pub.assertExchange(exchange, 'fanout', { durable: true });
  let received = 0;
  const queues = [];
  for (let i = 0; i < 5; i++) {
    const q = `${exchange}-${i}`;
    queues.push(q);
    await pub.assertQueue(q, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    await pub.bindQueue(q, exchange, '');
    const ch = await conn.createChannel();
    await ch.prefetch(200);
    await ch.consume(q, (m) => {
      if (m === null) return; // the broker cancelled the consumer: its queue was deleted
      received++;
      ch.ack(m);
    });
  }
  try {
    const r = await publishFor(
      () =>
        new Promise((resolve, reject) =>
          pub.publish(exchange, '', Buffer.from(body()), { persistent: true }, (err) =>
            err ? reject(err) : resolve(),
          ),
        ),
      serverCpuMeter('rabbitmq'),
    );
    report('rabbitmq-quorum', r, received);
  } finally {
    for (const q of queues) await pub.deleteQueue(q);
    await pub.deleteExchange(exchange);
    await conn.close();
  }
}

if (only.has('nats')) await nats();
if (only.has('rabbitmq')) await rabbitmq();
