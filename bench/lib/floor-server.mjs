// The bare localhost HTTP floor: node:http reads the body and answers a fixed 201, doing no
// other work. What the adapter costs above this is ours.
import { createServer } from 'node:http';

const answer = JSON.stringify({
  message_id: '01a228db-3740-783b-a46b-3aa14626697f',
  channel: '@qa',
  channel_sequence_id: 1,
  timestamp_iso8601: new Date().toISOString(),
  idempotency_key: 'k',
  duplicate: false,
});
const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    res.writeHead(201, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(answer),
    });
    res.end(answer);
  });
});
server.listen(0, '127.0.0.1', () => {
  console.log(
    JSON.stringify({ msg: 'floor ready', url: `http://127.0.0.1:${server.address().port}` }),
  );
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
