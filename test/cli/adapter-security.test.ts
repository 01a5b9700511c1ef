/**
 * The adapter's security settings as the real CLI (`node dist/cli/main.js adapter`):
 *
 * - a TLS file, a JWKS or a topology subject that cannot be used stops it at start with exit 2
 *   and one line on stderr naming the variable (or topology entry) and the problem, before the
 *   store is opened; a good TLS (and mTLS, and JWKS) setup starts and answers, and with mTLS a
 *   client without a certificate is refused, also when it resumes a TLS 1.3 session;
 * - its credentials are reloaded without a restart, on SIGHUP and when the topology file changes:
 *   a second token hash is taken, a removed one is refused, a file whose agents differ is refused
 *   with one log line while the last good credentials stay, a long poll open across a reload
 *   ends normally, and every reload is an audit entry (taken true or false).
 *
 * The adapter also polls the topology file each second, so a rewrite may be taken before the
 * test's SIGHUP: the tests assert outcomes (which token is taken), and where they name SIGHUP
 * they wait for the log line of the reload the signal itself caused, which comes either way.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { connect as tlsConnect } from 'node:tls';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { agentCert, makeCa, pem, serverCert } from '../helpers/certs.js';
import { type ChildAdapter, CLI, spawnAdapter } from '../helpers/cli.js';
import { type Json, sendAs } from '../helpers/http.js';
import {
  sha256Hex,
  type TopologyObject,
  tempDir,
  tokenOf,
  topologyObject,
  writeTopology,
} from '../helpers/topology.js';
import { until, untilParked } from '../helpers/wait.js';

const { dir, cleanup } = tempDir('agw-security-');
const started: ChildAdapter[] = [];
afterAll(async () => {
  for (const c of started) if (c.child.exitCode === null) c.child.kill('SIGKILL');
  await Promise.all(started.map((c) => c.exited));
  cleanup();
});

const ca = makeCa(dir, 'test-ca');
const server = serverCert(ca, 'adapter');
const other = serverCert(ca, 'other');

/** A folder of its own under `dir`. */
function sub(name: string): string {
  const d = join(dir, name);
  mkdirSync(d, { recursive: true });
  return d;
}

/**
 * `agent-gateway adapter ARGS` to its exit; one that starts after all (the check broken) is
 * killed after 10 s rather than left running, and fails the test.
 */
function runAdapter(args: string[], env: Record<string, string> = {}) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      [CLI, 'adapter', '--listen', '127.0.0.1:0', ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 10_000, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : null;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** Exit 2, one line on stderr, nothing on stdout, the store never opened; answers the line. */
async function refused(
  name: string,
  env: Record<string, string>,
  topology: TopologyObject = topologyObject(),
): Promise<string> {
  const d = sub(name);
  const db = join(d, 'adapter.db');
  const res = await runAdapter(['--topology', writeTopology(d, topology), '--db', db], env);
  expect(res.code, `${res.stderr}${res.stdout}`).toBe(2);
  const lines = res.stderr.trim().split('\n');
  expect(lines, res.stderr).toHaveLength(1);
  expect(res.stdout).toBe('');
  expect(existsSync(db), 'the store was opened before the settings were checked').toBe(false);
  expect(lines[0]).toMatch(/^agent-gateway adapter: /);
  return lines[0]!;
}

/** A JWKS file of one public key (ES256) and the private key that signs for it. */
async function jwks(path: string) {
  const { publicKey, privateKey } = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
  writeFileSync(path, JSON.stringify({ keys: [jwk] }));
  return privateKey;
}

describe('bad security settings at start: exit 2, one line naming the variable', {
  timeout: 30_000,
}, () => {
  it('AGW_TLS_CERT that does not exist', async () => {
    const missing = join(dir, 'no-such.crt');
    const line = await refused('cert-missing', {
      AGW_TLS_CERT: missing,
      AGW_TLS_KEY: server.key,
    });
    expect(line).toContain(`AGW_TLS_CERT: ${missing}: cannot read`);
    expect(line).toContain('ENOENT');
  });

  it("a certificate with another certificate's key", async () => {
    const line = await refused('cert-key-mismatch', {
      AGW_TLS_CERT: server.cert,
      AGW_TLS_KEY: other.key,
    });
    expect(line).toContain(
      `AGW_TLS_CERT/AGW_TLS_KEY: ${server.cert} and ${other.key} cannot be used together`,
    );
  });

  it('a key file that is no PEM', async () => {
    const notPem = join(dir, 'not-pem.key');
    writeFileSync(notPem, 'this is not a key\n');
    const line = await refused('key-not-pem', { AGW_TLS_CERT: server.cert, AGW_TLS_KEY: notPem });
    expect(line).toContain(`AGW_TLS_KEY: ${notPem}: not a PEM file`);
  });

  it('AGW_TLS_CERT without AGW_TLS_KEY', async () => {
    const line = await refused('cert-no-key', { AGW_TLS_CERT: server.cert });
    expect(line).toContain('AGW_TLS_KEY');
    expect(line).toContain('AGW_TLS_CERT and AGW_TLS_KEY go together: set both or neither');
  });

  it('AGW_TLS_CLIENT_CA without AGW_TLS_CERT', async () => {
    const line = await refused('ca-no-cert', { AGW_TLS_CLIENT_CA: ca.cert });
    expect(line).toContain('AGW_TLS_CLIENT_CA');
    expect(line).toContain('needs AGW_TLS_CERT and AGW_TLS_KEY');
  });

  it('AGW_TLS_CLIENT_CA holding a truncated certificate, or a key: no client could ever verify', async () => {
    // node's createSecureContext takes both without a word and then verifies no client
    const truncated = join(dir, 'truncated-ca.crt');
    writeFileSync(truncated, '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    const tls = { AGW_TLS_CERT: server.cert, AGW_TLS_KEY: server.key };
    const line = await refused('ca-truncated', { ...tls, AGW_TLS_CLIENT_CA: truncated });
    expect(line).toContain(`AGW_TLS_CLIENT_CA: ${truncated}: its certificate 1 cannot be parsed`);
    const key = await refused('ca-is-a-key', { ...tls, AGW_TLS_CLIENT_CA: server.key });
    expect(key).toContain(`AGW_TLS_CLIENT_CA: ${server.key}: holds no PEM certificate`);
  });

  it('a JWKS whose key material cannot be imported', async () => {
    const path = join(dir, 'bad-key.jwks');
    const source = join(dir, 'for-bad-key.jwks');
    await jwks(source);
    const good = JSON.parse(readFileSync(source, 'utf8'));
    // an EC key whose x is not a point coordinate
    writeFileSync(path, JSON.stringify({ keys: [{ ...good.keys[0], x: 'zz' }] }));
    const line = await refused('jwks-bad-key', {
      AGW_JWT_JWKS: path,
      AGW_JWT_ISSUER: 'https://issuer.test',
    });
    expect(line).toContain(`AGW_JWT_JWKS: ${path}: keys.0: cannot be imported`);
  });

  it('a JWKS file that is not JSON', async () => {
    const path = join(dir, 'not-json.jwks');
    // a key set written as YAML by mistake
    writeFileSync(path, 'keys:\n  - kty: EC\n    crv: P-256\n    x: abc\n    y: def\n');
    const line = await refused('jwks-not-json', {
      AGW_JWT_JWKS: path,
      AGW_JWT_ISSUER: 'https://issuer.test',
    });
    expect(line).toContain(`AGW_JWT_JWKS: ${path}: not JSON`);
  });

  it('a JWKS with a symmetric (oct, HMAC) key', async () => {
    const path = join(dir, 'oct.jwks');
    writeFileSync(
      path,
      JSON.stringify({
        keys: [{ kty: 'oct', k: Buffer.from('a shared secret').toString('base64url') }],
      }),
    );
    const line = await refused('jwks-oct', {
      AGW_JWT_JWKS: path,
      AGW_JWT_ISSUER: 'https://issuer.test',
    });
    expect(line).toContain(`AGW_JWT_JWKS: ${path}: keys.0: a symmetric (oct) key`);
  });

  it('AGW_JWT_JWKS without AGW_JWT_ISSUER', async () => {
    const path = join(dir, 'good-for-issuer.jwks');
    await jwks(path);
    const line = await refused('jwks-no-issuer', { AGW_JWT_JWKS: path });
    expect(line).toContain('AGW_JWT_ISSUER');
    expect(line).toContain('is required with AGW_JWT_JWKS');
  });

  it('a topology whose two agents share a subject', async () => {
    const t = topologyObject();
    t.agents[1]!.subject = 'system:serviceaccount:agents:shared';
    t.agents[3]!.subject = 'system:serviceaccount:agents:shared';
    const line = await refused('dup-subject', {}, t);
    expect(line).toContain(
      `agents.3.subject: "${t.agents[3]!.id}" has the same subject as "${t.agents[1]!.id}"`,
    );
    expect(line).toContain('system:serviceaccount:agents:shared');
  });

  it('an agent with only a subject while neither AGW_JWT_JWKS nor AGW_TLS_CLIENT_CA is set', async () => {
    const t = topologyObject();
    const research = t.agents.find((a) => a.id === 'research')!;
    delete research.token_sha256;
    research.subject = 'system:serviceaccount:agents:research';
    const line = await refused('subject-only', {}, t);
    expect(line).toContain('agent "research" has only a subject');
    expect(line).toContain('neither AGW_JWT_JWKS nor AGW_TLS_CLIENT_CA is set');
  });
});

/** An adapter with TLS and AGW_TLS_CLIENT_CA (mTLS), in a folder `name`. */
async function mtlsAdapter(name: string): Promise<ChildAdapter> {
  const d = sub(name);
  const adapter = await spawnAdapter(
    ['--topology', writeTopology(d), '--db', join(d, 'adapter.db')],
    { AGW_TLS_CERT: server.cert, AGW_TLS_KEY: server.key, AGW_TLS_CLIENT_CA: ca.cert },
  );
  started.push(adapter);
  return adapter;
}

/**
 * GET `path` over one TLS connection to 127.0.0.1:`port` (the test CA trusted, no client
 * certificate), resuming `session` when given: its status, its body, the session ticket the
 * server gave, and whether the session was resumed.
 */
function tlsGet(port: number, path: string, token: string, session?: Buffer) {
  return new Promise<{ status: number; body: string; session?: Buffer; reused: boolean }>(
    (resolve, reject) => {
      let ticket: Buffer | undefined;
      let text = '';
      let reused = false;
      const socket = tlsConnect({
        host: '127.0.0.1',
        port,
        ca: pem(ca.cert),
        ...(session === undefined ? {} : { session }),
      });
      socket.on('session', (s: Buffer) => {
        ticket = s;
      });
      socket.once('secureConnect', () => {
        reused = socket.isSessionReused();
        socket.write(
          `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`,
        );
      });
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => {
        text += chunk;
      });
      socket.once('error', reject);
      socket.once('close', () => {
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
        resolve({
          status,
          body: text.slice(text.indexOf('\r\n\r\n') + 4),
          ...(ticket === undefined ? {} : { session: ticket }),
          reused,
        });
      });
    },
  );
}

describe('good security settings start', { timeout: 60_000 }, () => {
  it('TLS: https on /healthz with the CA trusted; plain http is not served', async () => {
    const d = sub('tls-good');
    const adapter = await spawnAdapter(
      ['--topology', writeTopology(d), '--db', join(d, 'adapter.db')],
      { AGW_TLS_CERT: server.cert, AGW_TLS_KEY: server.key },
    );
    started.push(adapter);
    expect(adapter.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const dispatcher = new Agent({ connect: { ca: pem(ca.cert) } });
    try {
      const res = await undiciFetch(`${adapter.url}/healthz`, { dispatcher });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      const me = await undiciFetch(`${adapter.url}/v1/me`, {
        dispatcher,
        headers: { authorization: `Bearer ${tokenOf('pm')}` },
      });
      expect(me.status).toBe(200);
      expect(((await me.json()) as Json).agent).toBe('pm');
    } finally {
      await dispatcher.close();
    }
    await expect(fetch(`${adapter.url.replace('https:', 'http:')}/healthz`)).rejects.toThrow();
    adapter.child.kill('SIGTERM');
    expect((await adapter.exited).code).toBe(0);
  });

  it('mTLS: /healthz without a client certificate; elsewhere the certificate is required and must match the token', async () => {
    const adapter = await mtlsAdapter('mtls-good');
    const pmCert = agentCert(ca, 'pm');
    const anonymous = () => new Agent({ connect: { ca: pem(ca.cert) } });
    const asPm = new Agent({
      connect: { ca: pem(ca.cert), cert: pem(pmCert.cert), key: pem(pmCert.key) },
    });
    const me = async (dispatcher: Agent, agent: string) => {
      const res = await undiciFetch(`${adapter.url}/v1/me`, {
        dispatcher,
        headers: { authorization: `Bearer ${tokenOf(agent)}` },
      });
      return { status: res.status, body: (await res.json()) as Json };
    };
    const probe = anonymous();
    const caller = anonymous();
    try {
      const health = await undiciFetch(`${adapter.url}/healthz`, { dispatcher: probe });
      expect(health.status).toBe(200);
      await health.arrayBuffer();
      const noCert = await me(caller, 'pm');
      expect(noCert.status).toBe(401);
      expect(noCert.body.message).toContain('client certificate signed by AGW_TLS_CLIENT_CA');
      const ok = await me(asPm, 'pm');
      expect(ok.status).toBe(200);
      expect(ok.body.agent).toBe('pm');
      const mismatch = await me(asPm, 'qa');
      expect(mismatch.status).toBe(403);
      expect(mismatch.body.error).toBe('identity_mismatch');
    } finally {
      await Promise.all([probe.close(), caller.close(), asPm.close()]);
    }
    adapter.child.kill('SIGTERM');
    expect((await adapter.exited).code).toBe(0);
  });

  it('mTLS: a client without a certificate that resumes a TLS session is still refused', async () => {
    const adapter = await mtlsAdapter('mtls-resumed');
    const { port } = new URL(adapter.url);
    // the first connection: no certificate, 401, and a session ticket to resume
    const first = await tlsGet(Number(port), '/v1/me', tokenOf('pm'));
    expect(first.status).toBe(401);
    // the same client again with that session: TLS 1.3 resumption carries no certificate either
    const second = await tlsGet(Number(port), '/v1/me', tokenOf('pm'), first.session);
    expect(
      second.status,
      `a resumed session (reused: ${second.reused}) without a client certificate was answered ${second.status}: ${second.body}`,
    ).toBe(401);
    adapter.child.kill('SIGTERM');
    expect((await adapter.exited).code).toBe(0);
  });

  it("JWKS: a subject-only agent is known by a JWT's sub", async () => {
    const d = sub('jwt-good');
    const keys = join(d, 'jwks.json');
    const privateKey = await jwks(keys);
    const t = topologyObject();
    const research = t.agents.find((a) => a.id === 'research')!;
    delete research.token_sha256;
    research.subject = 'system:serviceaccount:agents:research';
    const adapter = await spawnAdapter(
      ['--topology', writeTopology(d, t), '--db', join(d, 'adapter.db')],
      { AGW_JWT_JWKS: keys, AGW_JWT_ISSUER: 'https://issuer.test' },
    );
    started.push(adapter);
    const jwt = await new SignJWT({})
      .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
      .setIssuer('https://issuer.test')
      .setAudience('agent-gateway')
      .setSubject('system:serviceaccount:agents:research')
      .setIssuedAt()
      .setExpirationTime('10m')
      .sign(privateKey);
    const res = await fetch(`${adapter.url}/v1/me`, {
      headers: { authorization: `Bearer ${jwt}` },
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as Json).agent).toBe('research');
    // the same token for another audience is refused
    const wrongAud = await new SignJWT({})
      .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
      .setIssuer('https://issuer.test')
      .setAudience('someone-else')
      .setSubject('system:serviceaccount:agents:research')
      .setExpirationTime('10m')
      .sign(privateKey);
    const refusedAud = await fetch(`${adapter.url}/v1/me`, {
      headers: { authorization: `Bearer ${wrongAud}` },
    });
    expect(refusedAud.status).toBe(401);
    await refusedAud.arrayBuffer();
    adapter.child.kill('SIGTERM');
    expect((await adapter.exited).code).toBe(0);
  });
});

describe('credentials reload of a running adapter (SIGHUP and the file watch)', {
  timeout: 120_000,
}, () => {
  it('takes new token hashes, refuses a changed membership, keeps long polls, audits each reload', async () => {
    const d = sub('reload');
    const topologyPath = join(d, 'topology.json');
    /** Written whole (a rename), so that the file watch never reads half a file. */
    const rewrite = (t: TopologyObject) => {
      writeFileSync(`${topologyPath}.tmp`, JSON.stringify(t));
      renameSync(`${topologyPath}.tmp`, topologyPath);
    };
    const withPm = (hashes: string | string[], extra?: string): TopologyObject => {
      const t = topologyObject();
      t.agents.find((a) => a.id === 'pm')!.token_sha256 = hashes;
      if (extra !== undefined) t.agents.push({ id: extra, token_sha256: sha256Hex(`t-${extra}`) });
      return t;
    };
    const oldToken = tokenOf('pm');
    const newToken = 'rotated-token-of-pm-1b8f0c';
    const newerToken = 'rotated-token-of-pm-9d2e71';
    rewrite(topologyObject());
    const adapter = await spawnAdapter(['--topology', topologyPath, '--db', join(d, 'a.db')], {
      AGW_LOG: 'stdout',
    });
    started.push(adapter);
    const { url, pid, lines } = adapter;

    const inboxStatus = async (token: string, wait = 0) => {
      const res = await fetch(`${url}/v1/inbox?wait=${wait}`, {
        headers: { authorization: `Bearer ${token}` },
      });
      await res.arrayBuffer();
      return res.status;
    };
    const accepted = (token: string) => async () => (await inboxStatus(token)) === 200;
    const rejected = (token: string) => async () => (await inboxStatus(token)) === 401;
    /** The JSON log lines on stdout from index `from` on. */
    const logFrom = (from: number): { msg?: string; cause?: string }[] =>
      lines.slice(from).flatMap((l) => {
        try {
          return [JSON.parse(l) as { msg?: string; cause?: string }];
        } catch {
          return [];
        }
      });
    /** Sends SIGHUP and waits for the log line of the reload it caused, taken or refused. */
    const hup = async (): Promise<string> => {
      const from = lines.length;
      process.kill(pid, 'SIGHUP');
      let msg = '';
      await until(
        () => {
          const hit = logFrom(from).find(
            (e) =>
              e.cause === 'SIGHUP' &&
              /^credentials (reloaded|reload refused) \(SIGHUP\)/.test(e.msg ?? ''),
          );
          msg = hit?.msg ?? '';
          return hit !== undefined;
        },
        () => `the log line of a SIGHUP reload:\n${lines.slice(from).join('\n')}`,
        { ms: 15_000 },
      );
      return msg;
    };

    expect(await inboxStatus(oldToken)).toBe(200);
    expect(await inboxStatus(newToken)).toBe(401);

    // 1. a second hash for pm: both tokens are taken
    rewrite(withPm([sha256Hex(oldToken), sha256Hex(newToken)]));
    expect(await hup()).toMatch(/^credentials reloaded \(SIGHUP\) from /);
    await until(accepted(newToken), 'the new token of pm accepted', { ms: 15_000 });
    expect(await inboxStatus(oldToken)).toBe(200);

    // 2. only the new hash: the old token is refused
    rewrite(withPm(sha256Hex(newToken)));
    expect(await hup()).toMatch(/^credentials reloaded \(SIGHUP\)/);
    await until(rejected(oldToken), 'the old token of pm refused', { ms: 15_000 });
    expect(await inboxStatus(newToken)).toBe(200);

    // 3. an agent added: refused, one error line naming the agents, the last credentials stay
    rewrite(withPm(sha256Hex(newToken), 'intruder'));
    const refusal = await hup();
    expect(refusal).toMatch(/^credentials reload refused \(SIGHUP\): /);
    expect(refusal).toContain(topologyPath);
    expect(refusal).toContain('its agents differ');
    expect(refusal).toContain('intruder');
    expect(refusal).toContain('membership changes need a restart');
    expect(refusal).toContain('the old credentials stay');
    const refusalEntry = lines
      .map((l) => {
        try {
          return JSON.parse(l) as { msg?: string; level?: number | string };
        } catch {
          return {};
        }
      })
      .find((e) => e.msg === refusal);
    // pino's error level (50), or its label
    expect(['error', 50]).toContain(refusalEntry?.level);
    expect(await inboxStatus(newToken)).toBe(200);
    expect(await inboxStatus(oldToken)).toBe(401);
    expect(await inboxStatus('t-intruder')).toBe(401);

    // 4. a long poll open across a SIGHUP reload ends normally (and still delivers)
    rewrite(withPm(sha256Hex(newToken)));
    let settled = false;
    const poll = fetch(`${url}/v1/inbox?wait=5`, {
      headers: { authorization: `Bearer ${newToken}` },
    }).then(async (res) => {
      settled = true;
      return { status: res.status, body: (await res.json()) as Json };
    });
    await untilParked(url, 'pm');
    expect(await hup()).toMatch(/^credentials reloaded \(SIGHUP\)/);
    expect(settled, 'the long poll ended at the reload').toBe(false);
    const messageId = await sendAs(url, 'orchestrator', '@pm', 'status', { after: 'reload' });
    const polled = await poll;
    expect(polled.status).toBe(200);
    // the event itself: the parked poll, across the reload, was woken by the send and answered
    // it (a poll that had waited its 5 s out would have answered none), so no clock is read
    expect(polled.body.deliveries.map((x: Json) => x.message.message_id)).toEqual([messageId]);

    // a long poll that times out across a reload answers 200 with nothing too
    const idle = fetch(`${url}/v1/inbox?wait=2`, {
      headers: { authorization: `Bearer ${newToken}` },
    }).then(async (res) => ({ status: res.status, body: (await res.json()) as Json }));
    await untilParked(url, 'pm');
    await hup();
    const idleAnswer = await idle;
    expect(idleAnswer.status).toBe(200);
    expect(idleAnswer.body.deliveries).toEqual([]);

    // 5. the file watch alone, no SIGHUP: a third hash is taken
    const fromWatch = lines.length;
    rewrite(withPm([sha256Hex(newToken), sha256Hex(newerToken)]));
    await until(accepted(newerToken), 'the newer token of pm accepted without SIGHUP', {
      ms: 15_000,
    });
    expect(
      logFrom(fromWatch).some((e) => e.msg?.startsWith('credentials reloaded (file changed)')),
    ).toBe(true);
    expect(await inboxStatus(newToken)).toBe(200);

    // 6. the audit log holds the reloads, taken and refused
    const audit = async (): Promise<Json[]> => {
      const entries: Json[] = [];
      let after = 0;
      for (;;) {
        const res = await fetch(`${url}/v1/audit?after=${after}`, {
          headers: { authorization: `Bearer ${tokenOf('operator:alice')}` },
        });
        expect(res.status).toBe(200);
        const body = (await res.json()) as Json;
        entries.push(...body.entries);
        if (body.entries.length === 0 || body.next_after === null) return entries;
        after = body.next_after;
      }
    };
    let reloads: Json[] = [];
    await until(
      async () => {
        reloads = (await audit()).filter((e) => e.action === 'reload');
        return (
          reloads.some((e) => e.detail.cause === 'SIGHUP' && e.detail.taken === false) &&
          reloads.filter((e) => e.detail.cause === 'SIGHUP' && e.detail.taken === true).length >=
            4 &&
          reloads.some((e) => e.detail.cause === 'file changed' && e.detail.taken === true)
        );
      },
      () => `the reload entries in the audit log: ${JSON.stringify(reloads)}`,
      { ms: 15_000 },
    );
    for (const e of reloads) {
      expect(e.actor).toBe('adapter');
      expect(e.target).toBe(topologyPath);
      expect(typeof e.detail.taken).toBe('boolean');
    }
    const refusedEntry = reloads.find((e) => e.detail.cause === 'SIGHUP' && !e.detail.taken);
    expect(refusedEntry.detail.reason).toContain('its agents differ');
    expect(refusedEntry.detail.reason).toContain('intruder');
    const takenEntry = reloads.find((e) => e.detail.taken);
    expect(takenEntry.detail.reason).toBeUndefined();

    // stopped by its pid: exit 0
    process.kill(pid, 'SIGTERM');
    expect((await adapter.exited).code).toBe(0);
  });
});

describe('a SIGHUP while the adapter starts', { timeout: 30_000 }, () => {
  it('is taken once it has started, not its end (node ends a process on SIGHUP by default)', async () => {
    const d = sub('hup-at-start');
    const child = spawn(
      process.execPath,
      [
        CLI,
        'adapter',
        '--listen',
        '127.0.0.1:0',
        '--topology',
        writeTopology(d, topologyObject()),
        '--db',
        join(d, 'adapter.db'),
      ],
      {
        env: { PATH: process.env.PATH ?? '', AGW_LOG_LEVEL: 'debug' },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const said: string[] = [];
    const heard = (text: string) =>
      until(
        () => said.some((m) => m.includes(text)),
        () => `"${text}" in: ${said.join(' | ')}`,
        { ms: 20_000 },
      );
    createInterface({ input: child.stdout! }).on('line', (line) => {
      try {
        const msg = (JSON.parse(line) as { msg?: string }).msg ?? '';
        said.push(msg);
        // told before the store is opened: the signal comes while it starts
        if (msg.startsWith('adapter starting')) child.kill('SIGHUP');
      } catch {}
    });
    try {
      await heard('adapter ready');
      await heard('credentials reloaded (SIGHUP)');
      expect(child.exitCode).toBeNull();
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
  });
});
