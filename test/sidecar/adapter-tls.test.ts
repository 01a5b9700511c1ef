/**
 * The sidecar towards an https:// adapter, over real TLS on loopback: it trusts the adapter's
 * certificate only through AGW_ADAPTER_CA (else it tells the certificate problem and stays
 * unready), shows its client certificate (mTLS), and takes renewed TLS files while messages
 * flow: no call fails, a long poll parked at the adapter finishes normally on its old
 * connection, and new connections show the new certificate. A bad renewal is refused and the
 * set before stays.
 *
 * Against the real adapter (AGW_TLS_CERT, AGW_TLS_KEY, AGW_TLS_CLIENT_CA) for what an agent
 * sees; against https-adapter-stub.ts for what only the server side of each handshake shows
 * (the certificate each connection presented, when each connection closed).
 */
import { X509Certificate } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { type CertFiles, issue, makeCa, pem, serverCert, spiffeId } from '../helpers/certs.js';
import { call } from '../helpers/http.js';
import { type StubAdapter, startStubAdapter } from '../helpers/https-adapter-stub.js';
import { capturingLogger } from '../helpers/sidecar.js';
import { type RunningSidecar, startEnvSidecar } from '../helpers/sidecar-from-env.js';
import { tempDir, tokenOf } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const { dir, cleanup } = tempDir('agw-sidecar-tls-');
const folder = (name: string) => {
  const path = join(dir, name);
  mkdirSync(path);
  return path;
};
// the adapter's CA and the agents' CA, as cert-manager would keep them: two issuers
const serverCa = makeCa(folder('server-ca'), 'server-ca');
const clientCa = makeCa(folder('client-ca'), 'client-ca');
const adapterCert = serverCert(serverCa);
const agentCertOf = (agent: string, cn: string) => issue(clientCa, { cn, uri: [spiffeId(agent)] });
const pmCert = (cn: string) => agentCertOf('pm', cn);

const running: { stop(): Promise<void> }[] = [];
afterEach(async () => {
  for (const r of running.splice(0).reverse()) await r.stop();
});
afterAll(cleanup);

/** The real adapter over HTTPS; with `mtls`, every path but the probes wants a client certificate. */
async function adapter(mtls: boolean): Promise<TestAdapter> {
  const a = await startTestAdapter({
    tlsCert: adapterCert.cert,
    tlsKey: adapterCert.key,
    ...(mtls ? { tlsClientCa: clientCa.cert } : {}),
  });
  running.push(a);
  return a;
}

async function stub(mtls: boolean): Promise<StubAdapter> {
  const s = await startStubAdapter({
    server: adapterCert,
    ...(mtls ? { clientCa: clientCa.cert } : {}),
    agent: 'pm',
    tokens: [tokenOf('pm')],
  });
  running.push({ stop: () => s.close() });
  return s;
}

async function sidecar(env: Record<string, string>, agent = 'pm', logger = capturingLogger()) {
  const s: RunningSidecar = await startEnvSidecar(
    agent,
    dir,
    { AGW_AGENT_TOKEN: tokenOf(agent), ...env },
    logger.logger,
  );
  running.push(s);
  return { ...s, log: logger };
}

const send = (url: string, n: number, to = '@qa') =>
  call(url, 'POST', '/v1/messages', { body: { to, kind: 'status', payload: { n } } });

/** Copies a certificate and its key to the paths the sidecar reads (as a Secret's update). */
function place(from: CertFiles, to: CertFiles): void {
  writeFileSync(to.cert, pem(from.cert));
  writeFileSync(to.key, pem(from.key));
}

const serialOf = (files: CertFiles) => new X509Certificate(pem(files.cert)).serialNumber;

/** Sends from `url`, one after another, until stopped; every answer's status is kept. */
function sendsFlowing(url: string) {
  const answers: number[] = [];
  let flowing = true;
  const done = (async () => {
    for (let n = 0; flowing; n++) answers.push((await send(url, n)).status);
  })();
  return {
    answers,
    /** Resolves once `n` sends have been answered. */
    seen: (n: number) =>
      new Promise<void>((resolve) => {
        const check = () => (answers.length >= n ? resolve() : setImmediate(check));
        check();
      }),
    stop: async () => {
      flowing = false;
      await done;
    },
  };
}

/** `agent`'s long polls parked at the real adapter now (agw_agent_parked_polls). */
async function parkedAt(a: TestAdapter, agent: string): Promise<number> {
  const text = await a.adapter.metrics.registry.metrics();
  const m = new RegExp(`^agw_agent_parked_polls\\{agent="${agent}"\\} (\\d+)$`, 'm').exec(text);
  return m === null ? 0 : Number(m[1]);
}

describe('TLS towards the real adapter', () => {
  it('trusts the adapter only with AGW_ADAPTER_CA; without it, one line names the certificate problem', async () => {
    const a = await adapter(false);
    expect(a.url).toMatch(/^https:/);
    const blind = await sidecar({ AGW_ADAPTER_URL: a.url });
    const warned = await blind.log.line((l) => l.level === 40 && /^TLS with/.test(String(l.msg)));
    // Node's own sentence sits in the middle, and Node 24 adds a hint to it: the line is ours
    // around it, with the code
    const msg = String(warned.msg);
    expect(
      msg.startsWith(
        `TLS with the adapter at ${a.url} failed: its certificate is not signed by a CA the sidecar trusts: unable to verify the first certificate`,
      ),
    ).toBe(true);
    expect(
      msg.endsWith(
        '(UNABLE_TO_VERIFY_LEAF_SIGNATURE); AGW_ADAPTER_CA must name the CA that signed it',
      ),
    ).toBe(true);
    expect((await call(blind.url, 'GET', '/readyz')).status).toBe(503);
    const status = await call(blind.url, 'GET', '/v1/status');
    expect(status.body.last_error).toContain('unable to verify the first certificate');

    const trusting = await sidecar({ AGW_ADAPTER_URL: a.url, AGW_ADAPTER_CA: serverCa.cert });
    await trusting.sidecar.gateOpen;
    expect((await send(trusting.url, 1)).status).toBe(201);
    // the blind one still is not ready, and told its problem once, not at every probe
    expect((await call(blind.url, 'GET', '/readyz')).status).toBe(503);
    expect(blind.log.lines.filter((l) => /^TLS with/.test(String(l.msg)))).toHaveLength(1);
  });

  it('shows its client certificate (mTLS); without one, the start check says what the adapter missed', async () => {
    const a = await adapter(true);
    const pm = pmCert('pm-mtls');
    const s = await sidecar({
      AGW_ADAPTER_URL: a.url,
      AGW_ADAPTER_CA: serverCa.cert,
      AGW_TLS_CLIENT_CERT: pm.cert,
      AGW_TLS_CLIENT_KEY: pm.key,
    });
    await s.sidecar.gateOpen;
    expect((await send(s.url, 1)).status).toBe(201);

    const bare = await sidecar({ AGW_ADAPTER_URL: a.url, AGW_ADAPTER_CA: serverCa.cert });
    const fatal = await new Promise<string>((resolve) => bare.sidecar.events.on('fatal', resolve));
    // Node 24 also names the verification code of the handshake, in parentheses
    expect(
      fatal.startsWith(
        `AGW_AGENT_TOKEN: the adapter at ${a.url} knows no agent with this token (it said: a client certificate signed by AGW_TLS_CLIENT_CA is required`,
      ),
    ).toBe(true);
  });

  it('takes a renewed client certificate under traffic: no call fails, a parked poll answers with its delivery', {
    timeout: 30_000,
  }, async () => {
    const a = await adapter(true);
    const live = { cert: join(dir, 'real-live.crt'), key: join(dir, 'real-live.key') };
    place(pmCert('pm-real-first'), live);
    const env = { AGW_ADAPTER_URL: a.url, AGW_ADAPTER_CA: serverCa.cert };
    const pm = await sidecar({
      ...env,
      AGW_TLS_CLIENT_CERT: live.cert,
      AGW_TLS_CLIENT_KEY: live.key,
    });
    const qaCert = agentCertOf('qa', 'qa-real');
    const qa = await sidecar(
      { ...env, AGW_TLS_CLIENT_CERT: qaCert.cert, AGW_TLS_CLIENT_KEY: qaCert.key },
      'qa',
    );
    await Promise.all([pm.sidecar.gateOpen, qa.sidecar.gateOpen]);

    // pm's long poll parked at the adapter, on a connection of the first certificate
    const polled = call(pm.url, 'GET', '/v1/inbox?wait=25&max=5');
    await until(async () => (await parkedAt(a, 'pm')) === 1, "pm's poll parked at the adapter");
    const sends = sendsFlowing(pm.url);
    await sends.seen(5);

    place(pmCert('pm-real-renewed'), live);
    await pm.log.line((l) => /^took the new TLS files/.test(String(l.msg)));
    const atRenewal = sends.answers.length;
    await sends.seen(atRenewal + 10);
    // the poll is still parked, on its old connection
    expect(await parkedAt(a, 'pm')).toBe(1);

    // a message for pm: the parked poll answers with it, as any poll would
    expect((await send(qa.url, 0, '@pm')).status).toBe(201);
    const answer = await polled;
    expect(answer.status).toBe(200);
    expect(answer.body.deliveries).toHaveLength(1);
    expect(answer.body.deliveries[0].message.sender).toBe('qa');
    await sends.stop();
    expect(sends.answers.length).toBeGreaterThan(atRenewal + 10 - 1);
    expect(sends.answers.every((status) => status === 201)).toBe(true);
    expect(pm.log.lines.filter((l) => (l.level as number) >= 40)).toEqual([]);
  });
});

describe('what each connection shows (a stub that records the handshakes)', () => {
  it('the adapter sees the agent’s URI SAN', async () => {
    const adapter = await stub(true);
    const pm = pmCert('pm-stub-mtls');
    const s = await sidecar({
      AGW_ADAPTER_URL: adapter.url,
      AGW_ADAPTER_CA: serverCa.cert,
      AGW_TLS_CLIENT_CERT: pm.cert,
      AGW_TLS_CLIENT_KEY: pm.key,
    });
    await s.sidecar.gateOpen;
    expect((await send(s.url, 1)).status).toBe(201);
    const used = adapter.requests.filter((r) => r.path !== '/health').map((r) => r.connection);
    expect(used.length).toBeGreaterThan(0);
    for (const c of used) {
      expect(c).toMatchObject({
        authorized: true,
        san: `URI:${spiffeId('pm')}`,
        serial: serialOf(pm),
      });
    }
  });

  it('renewal: new connections show the new certificate, old ones close once their calls are done (a parked poll included); a bad renewal is refused', {
    timeout: 30_000,
  }, async () => {
    const adapter = await stub(true);
    const first = pmCert('pm-first');
    const renewed = pmCert('pm-renewed');
    const stranger = serverCert(serverCa, 'stranger'); // a key that is not pm's
    const live = { cert: join(dir, 'live.crt'), key: join(dir, 'live.key') };
    place(first, live);
    const s = await sidecar({
      AGW_ADAPTER_URL: adapter.url,
      AGW_ADAPTER_CA: serverCa.cert,
      AGW_TLS_CLIENT_CERT: live.cert,
      AGW_TLS_CLIENT_KEY: live.key,
    });
    await s.sidecar.gateOpen;

    // a long poll parked at the adapter, on a connection that shows the first certificate
    const polled = call(s.url, 'GET', '/v1/inbox?wait=25&max=5');
    const parked = await adapter.nextPoll();
    expect(parked.request.connection.serial).toBe(serialOf(first));

    // sends flow, one after another, for the whole test
    const sends = sendsFlowing(s.url);
    const { answers } = sends;
    await sends.seen(5);
    const sendConnection = adapter.requests.at(-1)!.connection;
    expect(sendConnection.serial).toBe(serialOf(first));

    place(renewed, live);
    const took = await s.log.line((l) => /^took the new TLS files/.test(String(l.msg)));
    expect(took.serial).toBe(serialOf(renewed));
    const openedBefore = adapter.connections.length;
    const before = answers.length;
    await sends.seen(before + 5);
    // new connections show the renewed certificate, none the first one any more
    const opened = adapter.connections.slice(openedBefore);
    expect(opened.length).toBeGreaterThan(0);
    for (const c of opened) expect(c.serial).toBe(serialOf(renewed));
    // the old pool for sends closed its idle connection; the poll's stays while it is parked
    await sendConnection.closed;
    expect(parked.request.connection.isClosed).toBe(false);

    // the parked poll finishes normally, then its old connection closes
    await parked.answer();
    const answer = await polled;
    expect(answer.status).toBe(200);
    expect(answer.body.deliveries).toEqual([]);
    await parked.request.connection.closed;
    // and a new poll goes over a connection with the renewed certificate
    const next = call(s.url, 'GET', '/v1/inbox?wait=25&max=5');
    const parkedAgain = await adapter.nextPoll();
    expect(parkedAgain.request.connection.serial).toBe(serialOf(renewed));
    await parkedAgain.answer();
    expect((await next).status).toBe(200);

    // a renewal whose key is not the certificate's: refused, one warning, the set before stays
    writeFileSync(live.key, pem(stranger.key));
    // (or, wrongly, taken: the next line either way)
    const refused = await s.log.line(
      (l) => l.level === 40 || (l !== took && /^took the new TLS files/.test(String(l.msg))),
    );
    expect(refused.msg).toBe(
      `AGW_TLS_CLIENT_KEY ${live.key}: is not the key of the certificate in AGW_TLS_CLIENT_CERT (${live.cert}); refused, the TLS files loaded before stay in use`,
    );
    const afterRefusal = answers.length;
    await sends.seen(afterRefusal + 3);
    await sends.stop();
    // a new connection after the refusal still shows the renewed certificate
    const openedAtRefusal = adapter.connections.length;
    adapter.closeIdle();
    expect((await send(s.url, -1)).status).toBe(201);
    const reopened = adapter.connections.slice(openedAtRefusal);
    expect(reopened.length).toBeGreaterThan(0);
    for (const c of reopened) expect(c.serial).toBe(serialOf(renewed));

    expect(answers.length).toBeGreaterThan(afterRefusal);
    expect(answers.every((status) => status === 201)).toBe(true);
    expect(s.log.lines.filter((l) => /^took the new TLS files/.test(String(l.msg)))).toHaveLength(
      1,
    );
    expect(s.log.lines.filter((l) => (l.level as number) >= 40)).toEqual([refused]);
    expect(adapter.requests.every((r) => r.path === '/health' || r.connection.authorized)).toBe(
      true,
    );
  });
});
