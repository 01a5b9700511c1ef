/**
 * An https:// stand-in for the adapter's endpoints a sidecar calls (/health, /v1/me,
 * /v1/messages/batch, /v1/inbox), for the sidecar's TLS and credential tests: it records each
 * TLS connection's client certificate (serial, URI SAN) and when it closed, and each request's
 * path, Authorization header and connection. Long polls park until the test answers them.
 * The adapter's own TLS (AGW_TLS_CERT, AGW_TLS_KEY, AGW_TLS_CLIENT_CA) was being built when
 * these tests were written; the stub only stands in for its handshake and its 401s.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { type CertFiles, pem } from './certs.js';

export interface Connection {
  /** The client certificate's serial (hex), or undefined without one. */
  readonly serial: string | undefined;
  /** Its subjectAltName as Node renders it (`URI:spiffe://...`). */
  readonly san: string | undefined;
  /** Whether it verified against the stub's client CA. */
  readonly authorized: boolean;
  /** Resolves when the connection has closed. */
  readonly closed: Promise<void>;
  isClosed: boolean;
}

export interface Recorded {
  readonly method: string;
  readonly path: string;
  readonly authorization: string | undefined;
  readonly connection: Connection;
}

export interface ParkedPoll {
  readonly request: Recorded;
  /** Answers the poll 200 with no deliveries; resolves once the answer has been written. */
  answer(): Promise<void>;
}

export interface StubAdapter {
  readonly url: string;
  readonly connections: Connection[];
  readonly requests: Recorded[];
  /** Tokens it takes (`Bearer <token>`); any other is 401. */
  readonly tokens: Set<string>;
  /** The next long poll (wait > 0) to park, once it has arrived. */
  nextPoll(): Promise<ParkedPoll>;
  /** Closes the connections nobody is using (the next call opens a new one). */
  closeIdle(): void;
  close(): Promise<void>;
}

/**
 * `server`: the adapter's certificate; `clientCa`: when given, a client certificate is asked
 * for and checked against it, and a request without a good one is 401 (but /health), as the
 * adapter's mTLS does.
 */
export async function startStubAdapter(opts: {
  server: CertFiles;
  clientCa?: string;
  agent: string;
  tokens: readonly string[];
}): Promise<StubAdapter> {
  const connections: Connection[] = [];
  const requests: Recorded[] = [];
  const tokens = new Set(opts.tokens);
  const ofSocket = new WeakMap<TLSSocket, Connection>();
  const pollWaiters: ((p: ParkedPoll) => void)[] = [];
  const parked: ParkedPoll[] = [];
  let seq = 0;

  const server: Server = createServer(
    {
      key: pem(opts.server.key),
      cert: pem(opts.server.cert),
      ...(opts.clientCa === undefined
        ? {}
        : { ca: pem(opts.clientCa), requestCert: true, rejectUnauthorized: false }),
    },
    (req, res) => {
      const connection = ofSocket.get(req.socket as TLSSocket)!;
      const url = new URL(req.url ?? '/', 'https://stub');
      const recorded: Recorded = {
        method: req.method ?? 'GET',
        path: url.pathname,
        authorization: req.headers.authorization,
        connection,
      };
      requests.push(recorded);
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const json = (status: number, body: unknown) => {
          res.writeHead(status, { 'content-type': 'application/json' });
          res.end(JSON.stringify(body));
        };
        if (url.pathname === '/health') return json(200, { status: 'ok' });
        if (opts.clientCa !== undefined && !connection.authorized)
          return json(401, { error: 'unauthorized', message: 'no valid client certificate' });
        const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
        if (token === undefined || !tokens.has(token))
          return json(401, { error: 'unauthorized', message: 'unknown token' });
        if (url.pathname === '/v1/me')
          return json(200, { agent: opts.agent, limits: { max_message_bytes: 262_144 } });
        if (url.pathname === '/v1/messages/batch' && req.method === 'POST') {
          const { messages } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
            messages: { idempotency_key: string }[];
          };
          return json(200, {
            results: messages.map((m) => ({
              status: 201,
              message_id: randomUUID(),
              channel: `${opts.agent}:stub`,
              channel_sequence_id: ++seq,
              timestamp_iso8601: new Date().toISOString(),
              idempotency_key: m.idempotency_key,
              duplicate: false,
            })),
          });
        }
        if (url.pathname === '/v1/inbox') {
          if (Number(url.searchParams.get('wait') ?? 0) === 0) return json(200, { deliveries: [] });
          const poll: ParkedPoll = {
            request: recorded,
            answer: () =>
              new Promise<void>((resolve) => {
                res.writeHead(200, { 'content-type': 'application/json' });
                res.end(JSON.stringify({ deliveries: [] }), resolve);
              }),
          };
          const waiter = pollWaiters.shift();
          if (waiter === undefined) parked.push(poll);
          else waiter(poll);
          return;
        }
        json(404, { error: 'not_found', message: `the stub has no ${url.pathname}` });
      });
    },
  );
  server.on('secureConnection', (socket: TLSSocket) => {
    const peer = socket.getPeerCertificate();
    const hasCert = peer !== null && Object.keys(peer).length > 0;
    let closedResolve = () => {};
    const connection: Connection = {
      serial: hasCert ? peer.serialNumber : undefined,
      san: hasCert ? peer.subjectaltname : undefined,
      authorized: socket.authorized,
      closed: new Promise<void>((r) => {
        closedResolve = r;
      }),
      isClosed: false,
    };
    socket.once('close', () => {
      connection.isClosed = true;
      closedResolve();
    });
    ofSocket.set(socket, connection);
    connections.push(connection);
  });
  // a handshake the client gives up (an untrusted certificate) is no error of the stub's
  server.on('tlsClientError', () => {});
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `https://127.0.0.1:${port}`,
    connections,
    requests,
    tokens,
    nextPoll: () => {
      const p = parked.shift();
      return p !== undefined ? Promise.resolve(p) : new Promise((r) => pollWaiters.push(r));
    },
    closeIdle: () => server.closeIdleConnections(),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
