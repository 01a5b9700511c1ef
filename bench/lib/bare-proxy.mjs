// The floor of a sidecar hop: a node:http server that passes each request on to the adapter as
// one agent (its token added) through an undici Pool, and the answer back, doing nothing else:
// no check, no store, no breaker. Two of these in place of the two sidecars measure what the
// extra loopback hops of the path agents use cost by themselves (bench/path/trip.mjs, route
// `proxies`); what the sidecars cost above that is ours.
//
//   node bench/lib/bare-proxy.mjs ADAPTER_URL AGENT_TOKEN
import { createServer } from 'node:http';
import { Pool } from 'undici';

const [adapterUrl, token] = process.argv.slice(2);
const pool = new Pool(adapterUrl, { connections: 32, pipelining: 1 });
const authorization = `Bearer ${token}`;

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined;
    pool
      .request({
        method: req.method,
        path: req.url,
        headers: { 'content-type': 'application/json', authorization },
        body,
      })
      .then(async (r) => {
        const answer = Buffer.from(await r.body.arrayBuffer());
        res.writeHead(r.statusCode, {
          'content-type': 'application/json',
          'content-length': answer.length,
        });
        res.end(answer);
      })
      .catch((err) => {
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: String(err) }));
      });
  });
});
server.listen(0, '127.0.0.1', () => {
  console.log(
    JSON.stringify({ msg: 'proxy ready', url: `http://127.0.0.1:${server.address().port}` }),
  );
});
process.on('SIGTERM', () => server.close(() => pool.close().then(() => process.exit(0))));
