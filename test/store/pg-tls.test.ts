/**
 * A `postgres://` AGW_DB over TLS (CONTRACT.md, "Security of a deployment": the URL's
 * `sslrootcert`, `sslcert`, `sslkey` and `sslmode=verify-full` are honoured), against a real
 * PostgreSQL that takes only TLS (helpers/pg-tls-server.ts). The store is opened as the adapter
 * opens it (store/open.ts, through startTestAdapter or the CLI), so every connection it makes
 * (commits, reads, LISTEN) is the one tested: with the right CA it serves a message; with
 * another CA, or under a name the server's certificate does not carry, it does not open; a
 * client certificate logs in the role that may log in only with one; the files are read again
 * at each new connection (a renewal needs no restart); and without TLS the server refuses, so
 * the connections that worked were TLS ones.
 */
import { randomUUID } from 'node:crypto';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { runCli } from '../helpers/cli.js';
import { call, pollAs, sendAs } from '../helpers/http.js';
import { CERT_USER, PgTlsServer } from '../helpers/pg-tls-server.js';
import { tempDir, writeTopology } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

let server: PgTlsServer;
const { dir, cleanup } = tempDir('agw-pgtls-test-');
beforeAll(async () => {
  server = await PgTlsServer.start();
  await server.admin('CREATE DATABASE agw_tls');
  await server.admin(`CREATE DATABASE agw_cert OWNER ${CERT_USER}`);
}, 120_000);
afterAll(async () => {
  await server?.stop();
  cleanup();
});

/** verify-full against the server's CA: the configuration the contract promises. */
const verifyFull = (o: { host?: string; db?: string; ca?: string } = {}) =>
  server.url({
    host: o.host,
    db: o.db ?? 'agw_tls',
    params: { sslmode: 'verify-full', sslrootcert: o.ca ?? server.ca.cert },
  });

interface Session {
  application_name: string;
  ssl: boolean;
  client_dn: string | null;
}

/** The sessions on `db` but the asker's own, with their TLS state. */
const sessions = (db: string) =>
  server.admin<Session>(
    `SELECT a.application_name, s.ssl, s.client_dn
       FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
      WHERE a.datname = $1 AND a.pid <> pg_backend_pid()
      ORDER BY 1`,
    [db],
  );

/**
 * A message from pm to engineering stored, read back and acked through the adapter's HTTP API
 * (acked: the next one of that lane is not held behind its lease).
 */
async function roundTrip(url: string): Promise<void> {
  const text = `over TLS ${randomUUID()}`;
  const id = await sendAs(url, 'pm', '@engineering', 'status', { text });
  const got = await pollAs(url, 'engineering', { max: 10 });
  expect(got.map((d) => [d.message.message_id, d.message.payload.text])).toEqual([[id, text]]);
  const acked = await call(url, 'POST', '/v1/acks', {
    agent: 'engineering',
    body: { delivery_ids: got.map((d) => d.delivery_id) },
  });
  expect(acked.status).toBe(200);
}

/** What opening the store at `url` fails with (it must fail). */
async function openFails(url: string): Promise<Error & { code?: string }> {
  const store = await openStore(url).then(
    (s) => s,
    (err: unknown) => err as Error,
  );
  if (!(store instanceof Error)) {
    await store.close();
    throw new Error(`the store opened at ${url}`);
  }
  return store;
}

describe('sslmode=verify-full with sslrootcert', () => {
  it('the adapter opens its store, stores a message and reads it back, every connection TLS', {
    timeout: 60_000,
  }, async () => {
    const a = await startTestAdapter({ db: verifyFull() });
    try {
      await roundTrip(a.url);
      // /health reads through the read pool: its connection is made too
      expect((await call(a.url, 'GET', '/health')).status).toBe(200);
      const seen = await sessions('agw_tls');
      expect(new Set(seen.map((s) => s.application_name))).toEqual(
        new Set(['agw-commit', 'agw-read', 'agw-listen']),
      );
      expect(seen.filter((s) => !s.ssl)).toEqual([]);
    } finally {
      await a.stop();
    }
  });

  it('by the name `localhost` too (a DNS name of the certificate)', {
    timeout: 30_000,
  }, async () => {
    const store = await openStore(verifyFull({ host: 'localhost' }));
    await store.close();
  });

  it('a server whose certificate another CA signed: the store does not open', {
    timeout: 30_000,
  }, async () => {
    const err = await openFails(verifyFull({ ca: server.otherCa.cert }));
    expect(err.message).toMatch(/certificate/i);
  });

  it('a server under a name its certificate does not carry: the store does not open', {
    timeout: 30_000,
  }, async () => {
    // 127.0.0.2 is the same server; its certificate names 127.0.0.1, ::1 and localhost
    const err = await openFails(verifyFull({ host: '127.0.0.2' }));
    expect(err.code).toBe('ERR_TLS_CERT_ALTNAME_INVALID');
    expect(err.message).toMatch(/127\.0\.0\.2 is not in the cert's list/);
    // the chain was good: only the name failed (libpq's verify-ca skips the name and connects)
    const store = await openStore(
      server.url({
        host: '127.0.0.2',
        db: 'agw_tls',
        params: { uselibpqcompat: 'true', sslmode: 'verify-ca', sslrootcert: server.ca.cert },
      }),
    );
    await store.close();
  });

  it('the adapter command with another CA: exit 1 and one fatal line that says why', {
    timeout: 30_000,
  }, async () => {
    // as with any store that cannot be opened (an unreachable database included)
    const res = await runCli(
      [
        'adapter',
        '--topology',
        writeTopology(dir),
        '--db',
        verifyFull({ ca: server.otherCa.cert }),
        '--listen',
        '127.0.0.1:0',
      ],
      { AGW_JOURNAL_SOCKET: '/nonexistent/agw-test-journal.sock' },
    );
    expect(res.code).toBe(1);
    const fatal = res.stdout
      .split('\n')
      .filter((l) => l.includes('"level":60'))
      .map((l) => (JSON.parse(l) as { msg: string }).msg);
    expect(fatal).toEqual([
      expect.stringMatching(/^adapter cannot start: its store cannot be opened: .*certificate/i),
    ]);
    expect(res.stdout).not.toMatch(/adapter listening/);
    // and the emergency channel's CRIT line (no journald here: on stderr)
    expect(res.stderr).toMatch(
      /^<2>adapter cannot start: its store cannot be opened: .*certificate/m,
    );
  });

  it('sslmode=require verifies too (node-postgres: an alias of verify-full unless uselibpqcompat)', {
    timeout: 30_000,
  }, async () => {
    // no sslrootcert: Node's own CAs, which did not sign this server's certificate
    const err = await openFails(server.url({ db: 'agw_tls', params: { sslmode: 'require' } }));
    expect(err.code).toBe('SELF_SIGNED_CERT_IN_CHAIN');
  });

  it('the files are read again for each new connection: a reconnect verifies with what they hold then', {
    timeout: 60_000,
  }, async () => {
    const { dir: own, cleanup: removeOwn } = tempDir('agw-pgtls-ca-');
    const ca = join(own, 'root.crt');
    copyFileSync(server.ca.cert, ca);
    const a = await startTestAdapter({ db: verifyFull({ ca }) });
    try {
      await roundTrip(a.url);
      // the wrong CA in the file, and every connection of the store cut: its reconnects fail
      copyFileSync(server.otherCa.cert, ca);
      await server.admin(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = 'agw_tls' AND pid <> pg_backend_pid()`,
      );
      // (a cut the pool had not seen yet fails once as a lost connection: the next try verifies)
      let health: { status: number; body: unknown } = { status: 0, body: undefined };
      await until(
        async () => {
          health = await call(a.url, 'GET', '/health');
          return health.status === 503 && /certificate/.test(JSON.stringify(health.body));
        },
        () => `/health to fail on the certificate (last: ${JSON.stringify(health)})`,
        { ms: 10_000 },
      );
      const refused = await call(a.url, 'POST', '/v1/messages', {
        agent: 'pm',
        body: { idempotency_key: randomUUID(), to: '@engineering', kind: 'status', payload: {} },
      });
      expect(refused.status).toBe(503);
      expect(refused.body.error).toBe('storage_error');
      // the right one again (a renewal): the next connection takes it, no restart
      copyFileSync(server.ca.cert, ca);
      await roundTrip(a.url);
    } finally {
      await a.stop();
      removeOwn();
    }
  });
});

describe('sslcert and sslkey: a client certificate', () => {
  const asCertUser = (params: Record<string, string>) =>
    server.url({
      user: CERT_USER,
      db: 'agw_cert',
      params: { sslmode: 'verify-full', sslrootcert: server.ca.cert, ...params },
    });

  it('logs in the role that may log in only with one, on every connection of the store', {
    timeout: 60_000,
  }, async () => {
    const a = await startTestAdapter({
      db: asCertUser({ sslcert: server.client.cert, sslkey: server.client.key }),
    });
    try {
      await roundTrip(a.url);
      expect((await call(a.url, 'GET', '/health')).status).toBe(200);
      const seen = await sessions('agw_cert');
      expect(seen.length).toBeGreaterThanOrEqual(3);
      expect(seen.filter((s) => !s.ssl || s.client_dn !== `/CN=${CERT_USER}`)).toEqual([]);
    } finally {
      await a.stop();
    }
  });

  it('without one that role is refused', { timeout: 30_000 }, async () => {
    const err = await openFails(asCertUser({}));
    expect(err.message).toMatch(/certificate/i);
  });
});

it('without TLS (sslmode=disable) the server refuses: the connections above were TLS', {
  timeout: 30_000,
}, async () => {
  const err = await openFails(server.url({ db: 'agw_tls', params: { sslmode: 'disable' } }));
  expect(err.message).toMatch(/pg_hba\.conf rejects connection .*no encryption/);
});
