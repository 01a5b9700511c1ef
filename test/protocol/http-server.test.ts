/**
 * The server shell both programs run in (src/protocol/http-server.ts), on a real server on port 0:
 * request ids in and out and on the request's log lines, the hooks, TLS with a real certificate,
 * and the drain on stop.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { GatewayError } from '../../src/protocol/errors.js';
import {
  createServer,
  DEFAULT_LIMITS,
  type HttpShell,
  type RequestInfo,
  type TlsOptions,
} from '../../src/protocol/http-server.js';
import { RouteTable, route } from '../../src/protocol/router.js';

type Who = 'anyone' | 'member';

/** Log lines as parsed objects. */
function capture(): { logger: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l !== '') lines.push(JSON.parse(l));
      done();
    },
  });
  return { logger: pino({ level: 'debug' }, sink), lines };
}

/** Resolves when `release` is called: a handler that holds its answer until the test says. */
function gate(): { wait: Promise<void>; release: () => void } {
  let release!: () => void;
  const wait = new Promise<void>((r) => {
    release = r;
  });
  return { wait, release };
}

const shells: HttpShell[] = [];
afterEach(async () => {
  for (const s of shells.splice(0)) await s.close(0);
});

async function start(
  opts: { tls?: TlsOptions; held?: ReturnType<typeof gate> } = {},
): Promise<{ shell: HttpShell; lines: Record<string, unknown>[]; entered: Promise<void> }> {
  const { logger, lines } = capture();
  const arrived = gate();
  const table = new RouteTable<Who, { member: boolean }>([
    route({
      method: 'GET',
      path: '/things/:name',
      who: 'anyone',
      handler: ({ params, log }) => {
        log.info({ thing: params.name }, 'looked a thing up');
        return { body: { name: params.name } };
      },
    }),
    route({
      method: 'GET',
      path: '/members-only',
      who: 'member',
      handler: () => ({ body: {} }),
    }),
    route({
      method: 'GET',
      path: '/broken',
      who: 'anyone',
      handler: () => {
        throw new Error('a bug');
      },
    }),
    route({
      method: 'GET',
      path: '/held',
      who: 'anyone',
      handler: async () => {
        arrived.release();
        await opts.held?.wait;
        return { body: { held: true } };
      },
    }),
    route({
      method: 'GET',
      path: '/waits',
      who: 'anyone',
      // a long poll: gives up (client_closed) when its signal aborts
      handler: ({ signal }) =>
        new Promise((_, reject) => {
          arrived.release();
          signal.addEventListener('abort', () =>
            reject(new GatewayError('client_closed', 'given up')),
          );
        }),
    }),
  ]);
  const shell = await createServer({
    program: 'test program',
    listen: { host: '127.0.0.1', port: 0 },
    limits: DEFAULT_LIMITS,
    table,
    guard: (who, req) => {
      if (who === 'member' && req.headers.authorization !== 'Bearer yes') {
        throw new GatewayError('unauthorized', 'members only');
      }
      return { member: who === 'member' };
    },
    logger,
    ...(opts.tls === undefined ? {} : { tls: opts.tls }),
  });
  shells.push(shell);
  return { shell, lines, entered: arrived.wait };
}

describe('the request id', () => {
  it('answers with the caller’s x-request-id, or a new one, and puts it on the request’s log lines', async () => {
    const { shell, lines } = await start();
    const mine = await fetch(`${shell.url}/things/cup`, { headers: { 'x-request-id': 'trace-7' } });
    expect(mine.status).toBe(200);
    expect(mine.headers.get('x-request-id')).toBe('trace-7');
    expect(lines.find((l) => l.msg === 'looked a thing up')).toMatchObject({
      reqId: 'trace-7',
      thing: 'cup',
    });

    const fresh = await fetch(`${shell.url}/things/pot`);
    const id = fresh.headers.get('x-request-id');
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(lines.filter((l) => l.msg === 'looked a thing up').map((l) => l.reqId)).toEqual([
      'trace-7',
      id,
    ]);

    // one that is too long or holds a space is not echoed: it is replaced
    for (const bad of ['x'.repeat(129), 'two words']) {
      const res = await fetch(`${shell.url}/things/pan`, { headers: { 'x-request-id': bad } });
      expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    }
  });

  it('puts it on the line of a request that failed, and on the error answer', async () => {
    const { shell, lines } = await start();
    const res = await fetch(`${shell.url}/broken`, { headers: { 'x-request-id': 'oops-1' } });
    expect(res.status).toBe(500);
    expect(res.headers.get('x-request-id')).toBe('oops-1');
    expect(await res.json()).toEqual({
      error: 'internal',
      message: 'the test program failed to handle the request',
    });
    expect(lines.find((l) => l.msg === 'request failed')).toMatchObject({ reqId: 'oops-1' });
  });
});

describe('hooks', () => {
  it('tell each request with its route template, its status and its error; a failing hook harms nothing', async () => {
    const { shell, lines } = await start();
    const seen: string[] = [];
    const responded = new Map<string, number>();
    shell.addHook('onRequest', (info: RequestInfo) => seen.push(`${info.method} ${info.route}`));
    shell.addHook('onRequest', () => {
      throw new Error('a hook that fails');
    });
    shell.addHook('onError', (info, err) => seen.push(`error ${info.route} ${err.code}`));
    const done = new Promise<void>((resolve) =>
      shell.addHook('onResponse', (info, status, ms) => {
        expect(ms).toBeGreaterThanOrEqual(0);
        responded.set(info.id, status);
        if (responded.size === 3) resolve();
      }),
    );

    const ok = await fetch(`${shell.url}/things/cup`, { headers: { 'x-request-id': 'a' } });
    const refused = await fetch(`${shell.url}/members-only`, { headers: { 'x-request-id': 'b' } });
    const missing = await fetch(`${shell.url}/nowhere`, { headers: { 'x-request-id': 'c' } });
    expect([ok.status, refused.status, missing.status]).toEqual([200, 401, 404]);
    await done;
    expect(seen).toEqual([
      'GET /things/:name',
      'GET /members-only',
      'error /members-only unauthorized',
      // no route: no onRequest, but the error and the response are told
      'error undefined not_found',
    ]);
    expect(Object.fromEntries(responded)).toEqual({ a: 200, b: 401, c: 404 });
    expect(lines.filter((l) => l.hook === 'onRequest')).toHaveLength(2);
  });
});

describe('TLS', () => {
  it('listens with https:// when given a certificate and key', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'agw-tls-'));
    try {
      const key = join(dir, 'key.pem');
      const cert = join(dir, 'cert.pem');
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'ec',
          '-pkeyopt',
          'ec_paramgen_curve:prime256v1',
          '-nodes',
          '-keyout',
          key,
          '-out',
          cert,
          '-days',
          '1',
          '-subj',
          '/CN=localhost',
          '-addext',
          'subjectAltName=IP:127.0.0.1',
        ],
        { stdio: 'ignore' },
      );
      const pem = { cert: readFileSync(cert), key: readFileSync(key) };
      const { shell } = await start({ tls: pem });
      expect(shell.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      const answer = await new Promise<{ status: number; body: string; protocol: string }>(
        (resolve, reject) => {
          const req = httpsRequest(`${shell.url}/things/cup`, { ca: pem.cert }, (res) => {
            const protocol = (res.socket as import('node:tls').TLSSocket).getProtocol() ?? '';
            let body = '';
            res.on('data', (c) => {
              body += c;
            });
            res.on('end', () =>
              resolve({
                status: res.statusCode ?? 0,
                body,
                protocol,
              }),
            );
          });
          req.on('error', reject);
          req.end();
        },
      );
      expect(answer).toMatchObject({ status: 200, body: '{"name":"cup"}' });
      expect(answer.protocol).toMatch(/^TLSv1\.[23]$/);
      // a client that does not trust the certificate is refused by its own check
      await expect(fetch(`${shell.url}/things/cup`)).rejects.toThrow();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the drain on stop', () => {
  it('lets a request in flight finish, refuses nothing it took, and runs the program’s drain', async () => {
    const held = gate();
    const { shell, entered } = await start({ held });
    const answer = fetch(`${shell.url}/held`);
    await entered;
    let drained = false;
    const closed = shell.close(60_000, async () => {
      drained = true;
      held.release();
    });
    const res = await answer;
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ held: true });
    await closed;
    expect(drained).toBe(true);
    expect(shell.closing).toBe(true);
  });

  it('gives up a waiting call when the program stops: 503 shutting_down, not a cut connection', async () => {
    const { shell, entered } = await start();
    const answer = fetch(`${shell.url}/waits`);
    await entered;
    await shell.close(60_000);
    const res = await answer;
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ error: 'shutting_down' });
  });

  it('cuts what is still in flight once the grace period is over', async () => {
    const held = gate();
    const { shell, entered } = await start({ held });
    const answer = fetch(`${shell.url}/held`).then(
      (r) => r.status,
      () => 'cut',
    );
    await entered;
    await shell.close(50);
    expect(await answer).toBe('cut');
    held.release();
  });
});
