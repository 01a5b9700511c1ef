// The floor of an append-only write path (bench/RESULTS.md, "Where the adapter's time goes"):
// node:http reads the body, JSON.parse, the fields a send needs checked for presence, the
// (sender, key) pair looked up in memory (200 for a repeat), the channel's next number from an
// in-memory counter, and one record per message appended to a log file; the records of one turn
// of the event loop are written together and fdatasync'ed once, and only then answered 201 (the
// adapter's group commit, over a log instead of B-trees). No index on disk, no recovery, no
// delivery: what a send would cost if the store's write path were one sequential append, so the
// adapter's distance to it is the price of its relational write path.
//
// `async`: the write and fdatasync of a group run on libuv's thread pool, one group at a time,
// while the event loop takes the next group's requests (a WAL writer beside the loop); `sync`:
// they block the loop, as better-sqlite3's commit does.
//
//   node bench/lib/log-floor.mjs <file> [sync|async]    prints {"msg":"log floor ready",...}
import { closeSync, fdatasync, fdatasyncSync, openSync, write, writeSync } from 'node:fs';
import { createServer } from 'node:http';

const fd = openSync(process.argv[2], 'a');
const keys = new Map();
const seqs = new Map();
let pending = [];
let scheduled = false;
const mode = process.argv[3] ?? 'sync';
let writing = false;

function flush() {
  scheduled = false;
  if (writing || pending.length === 0) return;
  const group = pending;
  pending = [];
  const data = Buffer.concat(group.map((p) => p.record));
  if (mode === 'sync') {
    writeSync(fd, data);
    fdatasyncSync(fd);
    for (const p of group) p.answer();
    return;
  }
  writing = true;
  write(fd, data, (err) => {
    if (err) throw err;
    fdatasync(fd, (err2) => {
      if (err2) throw err2;
      writing = false;
      for (const p of group) p.answer();
      flush(); // what arrived meanwhile: the next group
    });
  });
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const reply = (status, body) => {
      const text = JSON.stringify(body);
      res.writeHead(status, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
      });
      res.end(text);
    };
    let m;
    try {
      m = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      return reply(400, { error: 'invalid_json' });
    }
    if (typeof m?.to !== 'string' || typeof m.idempotency_key !== 'string')
      return reply(400, { error: 'invalid_envelope' });
    const sender = req.headers.authorization ?? '';
    const k = `${sender}\u0000${m.idempotency_key}`;
    const seen = keys.get(k);
    if (seen !== undefined) return reply(200, { ...seen, duplicate: true });
    const seq = (seqs.get(m.to) ?? 0) + 1;
    seqs.set(m.to, seq);
    const a = {
      message_id: m.idempotency_key,
      channel: m.to,
      channel_sequence_id: seq,
      timestamp_iso8601: new Date().toISOString(),
      idempotency_key: m.idempotency_key,
    };
    keys.set(k, a);
    const record = Buffer.from(`${JSON.stringify({ ...a, sender, message: m })}\n`);
    pending.push({ record, answer: () => reply(201, { ...a, duplicate: false }) });
    if (!scheduled) {
      scheduled = true;
      setImmediate(flush);
    }
  });
});
server.listen(0, '127.0.0.1', () => {
  console.log(
    JSON.stringify({ msg: 'log floor ready', url: `http://127.0.0.1:${server.address().port}` }),
  );
});
process.on('SIGTERM', () =>
  server.close(() => {
    closeSync(fd);
    process.exit(0);
  }),
);
