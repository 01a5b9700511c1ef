// The peers, measured like our adapter (bench/path/send.mjs): acked sends per second and p50/p99 ack
// latency at 1, 16 and 64 in flight, ~1 KiB payloads, a closed loop in one client process.
// Each runs on this machine on its standard loopback port.
//
// - NATS JetStream: a file-storage stream; publish awaits the PubAck; Nats-Msg-Id (msgID) for
//   dedup. A PubAck does NOT mean fsynced: JetStream syncs to disk on an interval by default.
// - RabbitMQ: a durable quorum queue, persistent messages, publisher confirms (amqplib). A
//   confirm means the message is fsynced on a quorum of members (here: one node).
// - PostgreSQL (`postgresql`): one INSERT per transaction with synchronous_commit on (the
//   default): the commit returns after the WAL is fsynced. The floor of PostgreSQL as an acked
//   queue's send side, without its wake-up.
// - PostgreSQL as an acked queue, its send side (`postgresql-queue`): the sender of
//   peers-e2e.mjs's `postgresql-queue`, one INSERT and a NOTIFY in the same transaction
//   (synchronous_commit on), with a connection LISTENing on the channel as that queue's consumer
//   does (it only listens here: the rows stay). A transaction that NOTIFYs takes a cluster-wide
//   lock before its commit and keeps it until the commit's WAL flush is done (PreCommit_Notify in
//   PostgreSQL's async.c), so these commits do not share fsyncs: one commit per fsync at most,
//   however many are in flight, where plain INSERTs commit in groups.
//
// Server CPU (`cpu_us`): the user + system time of the server's processes per acked send over
// the measured part (from the end of the warm-up's sends to the end of the measured part's), from
// /proc (bench/lib/lib.mjs cpuMeter: the process listening on the port and all its descendants,
// PostgreSQL's backends included, and those that start or end meanwhile). Only meaningful on a
// machine where nothing else uses the server.
//
//   node bench/peers/peers.mjs [--seconds 5] [--inflight 1,16,64]
//                              [--only nats,rabbitmq,postgres,postgres-queue]
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import { connect, StringCodec } from 'nats';
import pg from 'pg';
import { closedLoopFn, serverCpuMeter } from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    inflight: { type: 'string', default: '1,16,64' },
    only: { type: 'string', default: 'nats,rabbitmq,postgres,postgres-queue' },
  },
});
const seconds = Number(values.seconds);
const levels = values.inflight.split(',').map(Number);
const only = new Set(values.only.split(','));
const body = () =>
  JSON.stringify({
    idempotency_key: randomUUID(),
    to: '@qa',
    kind: 'status',
    payload: { text: 'x'.repeat(1000) },
  });
const emit = (o) => console.log(JSON.stringify({ bench: 'peer-send', ...o }));

async function nats() {
  const nc = await connect({ servers: '127.0.0.1:4222' });
  const jsm = await nc.jetstreamManager();
  const stream = `AGW_BENCH_${process.pid}`;
  await jsm.streams.add({ name: stream, subjects: [`agwbench${process.pid}.>`], storage: 'file' });
  const js = nc.jetstream();
  const sc = StringCodec();
  const meter = serverCpuMeter('nats-server');
  try {
    for (const inflight of levels) {
      const r = await closedLoopFn({
        inflight,
        seconds,
        meter,
        send: () =>
          js.publish(`agwbench${process.pid}.qa`, sc.encode(body()), { msgID: randomUUID() }),
      });
      emit({ target: 'nats-jetstream', fsync_per_ack: false, inflight, ...r });
    }
  } finally {
    await jsm.streams.delete(stream);
    await nc.close();
  }
}

async function rabbitmq() {
  const conn = await amqp.connect('amqp://guest:guest@127.0.0.1:5672', { noDelay: true });
  const ch = await conn.createConfirmChannel();
  const queue = `agw-bench-${process.pid}`;
  await ch.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
  const meter = serverCpuMeter('rabbitmq');
  try {
    for (const inflight of levels) {
      const r = await closedLoopFn({
        inflight,
        seconds,
        meter,
        send: () =>
          new Promise((resolve, reject) =>
            ch.sendToQueue(
              queue,
              Buffer.from(body()),
              { persistent: true, messageId: randomUUID() },
              (err) => (err ? reject(err) : resolve()),
            ),
          ),
      });
      emit({ target: 'rabbitmq-quorum', fsync_per_ack: true, inflight, ...r });
      await ch.purgeQueue(queue);
    }
  } finally {
    await ch.deleteQueue(queue);
    await conn.close();
  }
}

/**
 * One INSERT per transaction; `queue`: with a NOTIFY in the same transaction and a connection
 * LISTENing on the channel, the send side of peers-e2e.mjs's `postgresql-queue`.
 */
async function postgres({ queue = false } = {}) {
  const opts = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'postgres' };
  const table = `agw_bench_${queue ? 'q_' : ''}${process.pid}`;
  const admin = new pg.Client(opts);
  await admin.connect();
  await admin.query(
    `CREATE TABLE ${table} (id bigserial PRIMARY KEY, key uuid UNIQUE NOT NULL, body text NOT NULL)`,
  );
  const sync = (await admin.query('SHOW synchronous_commit')).rows[0].synchronous_commit;
  const fsync = (await admin.query('SHOW fsync')).rows[0].fsync;
  let listener;
  if (queue) {
    listener = new pg.Client(opts);
    await listener.connect();
    await listener.query(`LISTEN ${table}`);
  }
  // one statement, one transaction: the row and its notification commit together
  const sql = queue
    ? `WITH ins AS (INSERT INTO ${table} (key, body) VALUES ($1, $2) RETURNING id) SELECT pg_notify('${table}', '') FROM ins`
    : `INSERT INTO ${table} (key, body) VALUES ($1, $2)`;
  const meter = serverCpuMeter('postgresql');
  try {
    for (const inflight of levels) {
      const pool = new pg.Pool({ ...opts, max: inflight });
      const r = await closedLoopFn({
        inflight,
        seconds,
        meter,
        send: () => pool.query(sql, [randomUUID(), body()]),
      });
      await pool.end();
      emit({
        target: queue ? 'postgresql-queue' : 'postgresql',
        role: queue
          ? 'acked queue send side (INSERT + NOTIFY)'
          : 'acked queue send side floor (INSERT)',
        fsync_per_ack: sync === 'on' && fsync === 'on',
        synchronous_commit: sync,
        fsync,
        inflight,
        ...r,
      });
    }
  } finally {
    await listener?.end();
    await admin.query(`DROP TABLE ${table}`);
    await admin.end();
  }
}

if (only.has('nats')) await nats();
if (only.has('rabbitmq')) await rabbitmq();
if (only.has('postgres')) await postgres();
if (only.has('postgres-queue')) await postgres({ queue: true });
