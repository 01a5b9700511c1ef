/**
 * The sidecar takes only what a local agent runtime sends (request-checks.ts;
 * docs/reference/sidecar.md, "Who may call it"):
 * - a browser's cross-site or same-site request (Sec-Fetch-Site), on every route, GET /v1/inbox
 *   too, which a page reaches with a no-cors GET that carries no Origin; and an Origin other
 *   than the sidecar's own loopback one;
 * - a loopback Host from a connection that is not loopback: behind AGW_LISTEN=0.0.0.0 a remote
 *   caller's `Host: localhost` is not local. The decision over addresses this machine may not
 *   have (the rule's table), then real sockets through a non-loopback address of this machine;
 * - and a sidecar listening on a non-loopback address says so at start.
 */
import { request } from 'node:http';
import { networkInterfaces } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { hostAllowed } from '../../src/sidecar/request-checks.js';
import { sidecarRoutes } from '../../src/sidecar/routes.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { call, type Json, sendAs } from '../helpers/http.js';
import { capturingLogger, startTestSidecar } from '../helpers/sidecar.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

/** One request with exactly these headers, to `address` (default the URL's host). */
function raw(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
  address?: string,
): Promise<{ status: number; body: Json }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: address ?? u.hostname, port: u.port, method, path, headers },
      (res) => {
        let text = '';
        res.on('data', (d) => {
          text += d;
        });
        res.on('end', () => {
          let parsed: Json = text;
          try {
            parsed = JSON.parse(text);
          } catch {}
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Every route of the sidecar's table, its parameters filled (the table is read, not served). */
function everyRoute(): { method: string; path: string }[] {
  const none = undefined as never;
  return sidecarRoutes(none, none, none, '', none, '0.0.0').map((r) => ({
    method: r.method,
    path: r.path.replace(/:[a-z_]+/g, 'x'),
  }));
}

it("refuses a browser's cross-site and same-site requests on every route, and the inbox leases nothing for them", async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const qa = await startTestSidecar('qa', adapter.url);
  stops.push(qa.stop);
  const id = await sendAs(adapter.url, 'pm', '@qa', 'status', { n: 1 });
  const host = `localhost:${new URL(qa.url).port}`;
  const routes = everyRoute();
  expect(routes.map((r) => `${r.method} ${r.path}`)).toContain('GET /v1/inbox');
  expect(routes.map((r) => `${r.method} ${r.path}`)).toContain('POST /mcp');
  for (const site of ['cross-site', 'same-site', 'Cross-Site']) {
    for (const { method, path } of routes) {
      // what a page's <img src> or fetch(url, {mode: 'no-cors'}) sends: no Origin
      const headers: Record<string, string> = {
        host,
        'sec-fetch-site': site,
        'sec-fetch-mode': 'no-cors',
        ...(method === 'POST' ? { 'content-type': 'application/json' } : {}),
      };
      const r = await raw(qa.url, method, path, headers, method === 'POST' ? '{}' : undefined);
      expect([r.status, r.body.error], `${site} ${method} ${path}`).toEqual([403, 'cross_origin']);
    }
  }
  // none of those polls leased anything
  const status = await call(adapter.url, 'GET', `/v1/messages/${id}`, { agent: 'pm' });
  expect(status.body.recipients).toEqual([
    expect.objectContaining({ agent: 'qa', state: 'pending', attempts: 0 }),
  ]);
  // what a browser sends when the user opens the URL itself, or a same-origin page: taken
  for (const site of ['none', 'same-origin']) {
    const r = await raw(qa.url, 'GET', '/v1/status', { host, 'sec-fetch-site': site });
    expect(r.status, site).toBe(200);
  }
  const inbox = await raw(qa.url, 'GET', '/v1/inbox', { host });
  expect(inbox.body.deliveries.map((d: Json) => [d.message.message_id, d.attempt])).toEqual([
    [id, 1],
  ]);
}, 30_000);

it('takes an Origin only when it is its own: http:// and the Host, a loopback name', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const qa = await startTestSidecar('qa', adapter.url);
  stops.push(qa.stop);
  const port = new URL(qa.url).port;
  const json = { 'content-type': 'application/json' };
  for (const name of ['localhost', '127.0.0.1', '[::1]', 'LOCALHOST']) {
    const host = `${name}:${port}`;
    const origin = `http://${name.toLowerCase()}:${port}`;
    const get = await raw(qa.url, 'GET', '/v1/me', { host, origin });
    expect([get.status, get.body.agent], origin).toEqual([200, 'qa']);
    const post = await raw(qa.url, 'POST', '/v1/heartbeat', { ...json, host, origin }, '{}');
    expect(post.status, origin).toBe(200);
  }
  const host = `localhost:${port}`;
  for (const origin of [
    'http://evil.example',
    'null',
    `https://localhost:${port}`,
    `http://localhost:${Number(port) + 1}`,
    'http://localhost',
    `http://127.0.0.1:${port}`, // another origin than the Host's
    `http://localhost:${port}.evil.example`,
  ]) {
    const r = await raw(qa.url, 'POST', '/v1/heartbeat', { ...json, host, origin }, '{}');
    expect([r.status, r.body.error], origin).toEqual([403, 'cross_origin']);
  }
});

describe('a loopback Host counts only on a loopback connection', () => {
  const loop = { localAddress: '127.0.0.1', remoteAddress: '127.0.0.1' };
  const remote = { localAddress: '10.1.2.3', remoteAddress: '10.9.9.9' };
  const mapped = (c: typeof loop) => ({
    localAddress: `::ffff:${c.localAddress}`,
    remoteAddress: `::ffff:${c.remoteAddress}`,
  });
  it.each([
    // host header, connection, AGW_LISTEN's host, taken?
    ['localhost:7070', loop, '127.0.0.1', true],
    ['127.0.0.1:7070', loop, '0.0.0.0', true],
    ['[::1]:7070', { localAddress: '::1', remoteAddress: '::1' }, '::', true],
    ['localhost:7070', mapped(loop), '::', true],
    ['localhost', { localAddress: '127.0.0.2', remoteAddress: '127.0.0.1' }, '0.0.0.0', true],
    // behind 0.0.0.0 (or ::), from another machine: a loopback name is not enough
    ['localhost:7070', remote, '0.0.0.0', false],
    ['127.0.0.1:7070', remote, '0.0.0.0', false],
    ['[::1]:7070', mapped(remote), '::', false],
    ['localhost:7070', { localAddress: '127.0.0.1', remoteAddress: '10.9.9.9' }, '0.0.0.0', false],
    ['localhost:7070', { localAddress: undefined, remoteAddress: undefined }, '0.0.0.0', false],
    // its own address: the one the connection arrived on, or the listen address
    ['10.1.2.3:7070', remote, '0.0.0.0', true],
    ['10.1.2.3:7070', mapped(remote), '::', true],
    ['10.1.2.3:7070', remote, '10.1.2.3', true],
    ['sidecar.internal:7070', remote, 'sidecar.internal', true],
    ['10.1.2.4:7070', remote, '0.0.0.0', false],
    // the wildcard is no address of its own, from anywhere
    ['0.0.0.0:7070', loop, '0.0.0.0', false],
    ['0.0.0.0:7070', remote, '0.0.0.0', false],
    ['[::]:7070', loop, '::', false],
    // rebound names, and none
    ['evil.example:7070', loop, '127.0.0.1', false],
    ['127.0.0.1.nip.io:7070', loop, '127.0.0.1', false],
    ['', loop, '127.0.0.1', false],
  ] as const)('Host %s on %o, listening on %s: %s', (header, conn, listenHost, taken) => {
    expect(hostAllowed(header, conn, listenHost)).toBe(taken);
  });
});

/** An IPv4 address of this machine that is not loopback, if it has one. */
function outsideAddress(): string | undefined {
  return Object.values(networkInterfaces())
    .flat()
    .find((i) => i !== undefined && i.family === 'IPv4' && !i.internal)?.address;
}

it.skipIf(outsideAddress() === undefined)(
  'on 0.0.0.0: warns at start; from a non-loopback address a Host of localhost is refused, its own address taken',
  async () => {
    const outside = outsideAddress()!;
    const adapter = await startTestAdapter();
    stops.push(adapter.stop);
    const log = capturingLogger();
    const qa = await startTestSidecar('qa', adapter.url, {
      listen: '0.0.0.0:0',
      logger: log.logger,
    });
    stops.push(qa.stop);
    const port = new URL(qa.url).port;
    const warnings = log.lines.filter((l) => (l.level as number) >= 40);
    expect(warnings).toEqual([
      expect.objectContaining({
        level: 40,
        msg: expect.stringMatching(/^AGW_LISTEN 0\.0\.0\.0:0 /),
      }),
    ]);
    expect(warnings[0]!.msg).toContain('not a loopback address');
    expect(warnings[0]!.msg).toContain('as qa');
    // a caller reaching it through this machine's outside address (the connection's both ends
    // are that address: not loopback)
    for (const name of ['localhost', '127.0.0.1', '[::1]']) {
      const r = await raw(
        qa.url,
        'GET',
        '/v1/inbox',
        { host: `${name}:${port}` },
        undefined,
        outside,
      );
      expect([r.status, r.body.error], name).toEqual([403, 'bad_host']);
    }
    const own = await raw(
      qa.url,
      'GET',
      '/v1/me',
      { host: `${outside}:${port}` },
      undefined,
      outside,
    );
    expect([own.status, own.body.agent]).toEqual([200, 'qa']);
    // on loopback, the loopback names still do
    const local = await raw(
      qa.url,
      'GET',
      '/v1/me',
      { host: `localhost:${port}` },
      undefined,
      '127.0.0.1',
    );
    expect([local.status, local.body.agent]).toEqual([200, 'qa']);
  },
);

it('on loopback it says nothing of it at start', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const log = capturingLogger();
  const qa = await startTestSidecar('qa', adapter.url, { logger: log.logger });
  stops.push(qa.stop);
  expect(log.lines.filter((l) => (l.level as number) >= 40)).toEqual([]);
});
