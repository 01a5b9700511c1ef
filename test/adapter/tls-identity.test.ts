/**
 * TLS and mTLS on the adapter, over real TLS on loopback with certificates made by openssl
 * (CONTRACT.md, "Security of a deployment"): HTTPS only; with a client CA every path but the
 * probes and /metrics needs a valid client certificate; a certificate names its agent by a URI
 * SAN and a token of another is 403 identity_mismatch; the certificate files are taken again
 * when they change, under traffic, without a request failing or a parked poll cut.
 */
import { randomUUID } from 'node:crypto';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { Agent, fetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { agentCert, type Ca, issue, makeCa, pem, serverCert } from '../helpers/certs.js';
import { runCli } from '../helpers/cli.js';
import type { Json } from '../helpers/http.js';
import { tempDir, tokenOf } from '../helpers/topology.js';
import { until as waitFor } from '../helpers/wait.js';

const { dir, cleanup } = tempDir('agw-tls-');
let ca: Ca;
let otherCa: Ca;

beforeAll(() => {
  mkdirSync(join(dir, 'ca'));
  ca = makeCa(join(dir, 'ca'), 'agents-ca');
  mkdirSync(join(dir, 'other'));
  otherCa = makeCa(join(dir, 'other'), 'stranger-ca');
});
afterAll(() => cleanup());

/** A client that trusts `ca` and presents `client` (cert and key paths) when given. */
function client(opts: { client?: { cert: string; key: string }; ca?: Ca } = {}): Agent {
  return new Agent({
    connect: {
      ca: pem((opts.ca ?? ca).cert),
      ...(opts.client ? { cert: pem(opts.client.cert), key: pem(opts.client.key) } : {}),
    },
  });
}

async function call(
  dispatcher: Agent,
  url: string,
  method: string,
  path: string,
  opts: { token?: string; body?: unknown } = {},
): Promise<{ status: number; body: Json }> {
  const res = await fetch(url + path, {
    dispatcher,
    method,
    headers: {
      'content-type': 'application/json',
      ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
    },
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  const text = await res.text();
  let body: Json = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status: res.status, body };
}

function send(dispatcher: Agent, url: string, agent: string, to = '@qa') {
  return call(dispatcher, url, 'POST', '/v1/messages', {
    token: tokenOf(agent),
    body: { idempotency_key: randomUUID(), to, kind: 'status', payload: { n: 1 } },
  });
}

/** The serial number of the certificate a new TLS connection to `url` is shown. */
function servedSerial(url: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port), ca: pem(ca.cert) }, () => {
      const serial = socket.getPeerCertificate().serialNumber;
      socket.end();
      resolve(serial);
    });
    socket.on('error', reject);
  });
}

describe('TLS only', () => {
  let a: TestAdapter;
  beforeAll(async () => {
    const server = serverCert(ca, 'adapter-tls');
    a = await startTestAdapter({ tlsCert: server.cert, tlsKey: server.key });
  });
  afterAll(() => a.stop());

  it('serves HTTPS, and only HTTPS', async () => {
    expect(a.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const c = client();
    expect((await call(c, a.url, 'GET', '/healthz')).status).toBe(200);
    expect((await send(c, a.url, 'pm')).status).toBe(201);
    // a client that does not trust the CA is refused at the handshake
    await expect(call(client({ ca: otherCa }), a.url, 'GET', '/healthz')).rejects.toThrow();
    // plain HTTP to the TLS port gets no HTTP answer
    await expect(fetch(`${a.url.replace('https:', 'http:')}/healthz`)).rejects.toThrow();
    await c.close();
  });

  it("is probed by wait-ready: refused unchecked only with --insecure (the kubelet's way)", async () => {
    const url = `${a.url}/health`;
    const checked = await runCli(['wait-ready', '--url', url, '--timeout', '0.5']);
    expect(checked.code).toBe(1);
    const insecure = await runCli(['wait-ready', '--url', url, '--timeout', '5', '--insecure']);
    expect(insecure.code).toBe(0);
  });
});

describe('mTLS', () => {
  let a: TestAdapter;
  let pm: Agent;
  beforeAll(async () => {
    const server = serverCert(ca, 'adapter-mtls');
    a = await startTestAdapter({
      tlsCert: server.cert,
      tlsKey: server.key,
      tlsClientCa: ca.cert,
    });
    pm = client({ client: agentCert(ca, 'pm') });
  });
  afterAll(async () => {
    await pm.close();
    await a.stop();
  });

  it('answers the probes and /metrics without a client certificate, nothing else', async () => {
    const bare = client();
    for (const path of ['/healthz', '/health', '/metrics'])
      expect((await call(bare, a.url, 'GET', path)).status).toBe(200);
    const refused = await call(bare, a.url, 'GET', '/v1/inbox?wait=0', { token: tokenOf('pm') });
    expect(refused).toMatchObject({ status: 401, body: { error: 'unauthorized' } });
    expect(refused.body.message).toMatch(/client certificate/);
    await bare.close();
  });

  it('refuses a certificate of another CA (401) even with a good token', async () => {
    mkdirSync(join(dir, 'stray'), { recursive: true });
    const stray = agentCert(otherCa, 'pm');
    const c = client({ client: stray });
    const r = await call(c, a.url, 'GET', '/v1/inbox?wait=0', { token: tokenOf('pm') });
    expect(r).toMatchObject({ status: 401, body: { error: 'unauthorized' } });
    await c.close();
  });

  it("takes the agent whose certificate it is, and refuses another's token: identity_mismatch", async () => {
    expect((await send(pm, a.url, 'pm')).status).toBe(201);
    const r = await send(pm, a.url, 'qa', '@pm');
    expect(r).toMatchObject({ status: 403, body: { error: 'identity_mismatch' } });
    expect(r.body.message).toMatch(/pm's.*qa's/);
    // an operator's token on an agent's certificate is refused too
    const op = await call(pm, a.url, 'GET', '/v1/agents', { token: tokenOf('operator:alice') });
    expect(op).toMatchObject({ status: 403, body: { error: 'identity_mismatch' } });
  });

  it('takes any known token on a certificate that names no agent (an operator tool)', async () => {
    const tool = client({ client: issue(ca, { cn: 'ops-tool', dns: ['ops.example'] }) });
    const r = await call(tool, a.url, 'GET', '/v1/agents', { token: tokenOf('operator:alice') });
    expect(r.status).toBe(200);
    await tool.close();
  });

  it('knows an agent by its topology subject as a URI SAN too', async () => {
    const b = await startTestAdapter(
      {
        tlsCert: serverCert(ca, 'adapter-subject').cert,
        tlsKey: join(ca.dir, 'adapter-subject.key'),
        tlsClientCa: ca.cert,
      },
      {
        topology: (await import('../helpers/topology.js')).topologyObject(),
      },
    );
    // the spiffe form: any trust domain, path ending in /agent/<id>
    const qa = client({
      client: issue(ca, { cn: 'qa-other-domain', uri: ['spiffe://prod.example/ns/x/agent/qa'] }),
    });
    expect((await send(qa, b.url, 'qa', '@pm')).status).toBe(201);
    expect((await send(qa, b.url, 'pm')).status).toBe(403);
    await qa.close();
    await b.stop();
  });
});

describe('a reload that moves a subject', () => {
  it('binds the certificate of an open connection to the agent the new topology names', async () => {
    const { topologyObject, writeTopology } = await import('../helpers/topology.js');
    const b = await startTestAdapter({
      tlsCert: serverCert(ca, 'adapter-moved').cert,
      tlsKey: join(ca.dir, 'adapter-moved.key'),
      tlsClientCa: ca.cert,
    });
    // a certificate that names no agent yet: any known token passes on it
    const holder = new Agent({
      connections: 1,
      connect: {
        ca: pem(ca.cert),
        ...(() => {
          const c = issue(ca, { cn: 'moved', uri: ['urn:agent:moved'] });
          return { cert: pem(c.cert), key: pem(c.key) };
        })(),
      },
    });
    expect((await send(holder, b.url, 'pm')).status).toBe(201);
    // qa now has that subject: the same connection's certificate is qa's
    const t = topologyObject();
    t.agents.find((x) => x.id === 'qa')!.subject = 'urn:agent:moved';
    writeTopology(b.dir, t);
    expect(b.adapter.reload('test')).toMatchObject({ taken: true });
    const r = await send(holder, b.url, 'pm');
    expect(r).toMatchObject({ status: 403, body: { error: 'identity_mismatch' } });
    expect((await send(holder, b.url, 'qa', '@pm')).status).toBe(201);
    await holder.close();
    await b.stop();
  });
});

describe('certificate rotation', () => {
  it('takes new files under traffic: no request fails, a parked poll finishes, new connections see the new certificate', async () => {
    const live = join(dir, 'live');
    mkdirSync(live);
    const first = serverCert(ca, 'adapter-first');
    copyFileSync(first.cert, join(live, 'tls.crt'));
    copyFileSync(first.key, join(live, 'tls.key'));
    const a = await startTestAdapter(
      {
        tlsCert: join(live, 'tls.crt'),
        tlsKey: join(live, 'tls.key'),
        tlsClientCa: ca.cert,
      },
      { fileWatchMs: 50 },
    );
    const pm = client({ client: agentCert(ca, 'pm') });
    const qa = client({ client: agentCert(ca, 'qa') });
    try {
      const before = await servedSerial(a.url);
      // qa parks a long poll on a connection made with the first certificate
      const parked = call(qa, a.url, 'GET', '/v1/inbox?wait=2&max=1', { token: tokenOf('qa') });
      let stop = false;
      const statuses: number[] = [];
      const traffic = (async () => {
        while (!stop) statuses.push((await send(pm, a.url, 'pm', '@pm')).status);
      })();
      await waitFor(() => statuses.length >= 5, 'sends flowing');

      // a bad replacement first: a key that is not the certificate's is refused, the old stays
      const second = serverCert(ca, 'adapter-second');
      const third = serverCert(ca, 'adapter-third');
      copyFileSync(second.cert, join(live, 'tls.crt'));
      copyFileSync(third.key, join(live, 'tls.key'));
      expect(a.adapter.reload('test')).toMatchObject({ taken: false });
      expect(await servedSerial(a.url)).toBe(before);

      // then the good pair: the file watch takes it
      copyFileSync(second.key, join(live, 'tls.key'));
      let after = before;
      await waitFor(async () => {
        after = await servedSerial(a.url);
        return after !== before;
      }, 'new connections shown the new certificate');
      const n = statuses.length;
      await waitFor(() => statuses.length >= n + 5, 'sends still flowing after the rotation');
      stop = true;
      await traffic;
      expect(statuses.every((s) => s === 201)).toBe(true);
      // the poll parked before the rotation ends as any poll does: 200, with what came
      const done = await parked;
      expect(done.status).toBe(200);
      const audit = await call(pm, a.url, 'GET', '/v1/audit', {
        token: tokenOf('operator:alice'),
      }).catch(() => undefined);
      // (pm's certificate names pm: the operator's token is refused on it)
      expect(audit?.status).toBe(403);
      const tool = client({ client: issue(ca, { cn: 'ops-rotation', dns: ['ops'] }) });
      const log = await call(tool, a.url, 'GET', '/v1/audit', { token: tokenOf('operator:alice') });
      const reloads = (log.body.entries as Json[]).filter((e) => e.action === 'reload');
      expect(reloads.map((e) => e.detail.taken)).toContain(false);
      expect(reloads.map((e) => e.detail.taken)).toContain(true);
      await tool.close();
    } finally {
      await pm.close();
      await qa.close();
      await a.stop();
    }
  });
});
