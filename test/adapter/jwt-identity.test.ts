/**
 * JWT workload identity (CONTRACT.md, "Security of a deployment"): a bearer token that is a JWT
 * is verified against AGW_JWT_JWKS (RS256, ES256, EdDSA; never `none` or HMAC), its `iss`, `aud`,
 * `exp` and `nbf` with 60 s of skew; its `sub` names the agent whose topology `subject` it is.
 * Keys and tokens are made here with jose; the adapter is real, on loopback.
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { tempDir, topologyObject } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const ISSUER = 'https://kubernetes.default.svc.cluster.local';
const PM_SUB = 'system:serviceaccount:agents:pm';
const QA_SUB = 'system:serviceaccount:agents:qa';

type Key = Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];
interface SigningKey {
  readonly alg: 'RS256' | 'ES256' | 'EdDSA';
  readonly kid: string;
  readonly privateKey: Key;
  readonly jwk: JWK;
}

async function signingKey(alg: SigningKey['alg'], kid: string): Promise<SigningKey> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { alg, kid, privateKey, jwk };
}

function writeJwks(path: string, keys: readonly SigningKey[]): void {
  writeFileSync(path, JSON.stringify({ keys: keys.map((k) => k.jwk) }));
}

/** A token as a Kubernetes projected service-account token looks (one hour by default). */
function token(
  key: SigningKey,
  claims: { sub?: string; iss?: string; aud?: string; expS?: number | null; nbfS?: number } = {},
): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  let jwt = new SignJWT({})
    .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: 'JWT' })
    .setIssuer(claims.iss ?? ISSUER)
    .setAudience(claims.aud ?? 'agent-gateway')
    .setIssuedAt(now);
  // expS null: no exp at all
  if (claims.expS !== null) jwt = jwt.setExpirationTime(now + (claims.expS ?? 3600));
  if (claims.sub !== '') jwt = jwt.setSubject(claims.sub ?? PM_SUB);
  if (claims.nbfS !== undefined) jwt = jwt.setNotBefore(now + claims.nbfS);
  return jwt.sign(key.privateKey);
}

function bearer(url: string, jwt: string, method = 'GET', path = '/v1/inbox?wait=0') {
  return call(url, method, path, {
    headers: { authorization: `Bearer ${jwt}` },
    ...(method === 'POST'
      ? { body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: {} } }
      : {}),
  });
}

const { dir, cleanup } = tempDir('agw-jwt-');
const jwks = join(dir, 'jwks.json');
let es: SigningKey;
let rs: SigningKey;
let ed: SigningKey;
let a: TestAdapter;

beforeAll(async () => {
  [es, rs, ed] = await Promise.all([
    signingKey('ES256', 'es-1'),
    signingKey('RS256', 'rs-1'),
    signingKey('EdDSA', 'ed-1'),
  ]);
  writeJwks(jwks, [es, rs, ed]);
  const topology = topologyObject();
  // pm proves itself by its service account only; qa by either
  for (const agent of topology.agents) {
    if (agent.id === 'pm') {
      delete agent.token_sha256;
      agent.subject = PM_SUB;
    }
    if (agent.id === 'qa') agent.subject = QA_SUB;
  }
  a = await startTestAdapter({ jwtJwks: jwks, jwtIssuer: ISSUER }, { topology, fileWatchMs: 50 });
});
afterAll(async () => {
  await a.stop();
  cleanup();
});

describe('a valid token', () => {
  it('names the agent whose subject is its sub, with each allowed algorithm', async () => {
    for (const key of [es, rs, ed]) {
      const sent = await bearer(a.url, await token(key), 'POST', '/v1/messages');
      expect(sent.status, key.alg).toBe(201);
    }
    // stored as pm's: qa is handed three messages from pm
    const got = await call(a.url, 'GET', '/v1/inbox?wait=0&max=10', { agent: 'qa' });
    expect(JSON.stringify(got.body.deliveries.map((d: object) => d))).toMatch(/"sender":"pm"/);
    expect(got.body.deliveries).toHaveLength(3);
    // qa by its JWT as by its static token
    const qa = await bearer(a.url, await token(es, { sub: QA_SUB }));
    expect(qa.status).toBe(200);
    expect((await call(a.url, 'GET', '/v1/inbox?wait=0', { agent: 'qa' })).status).toBe(200);
  });

  it('is taken within 60 s of skew: exp just past, nbf just ahead', async () => {
    expect((await bearer(a.url, await token(es, { expS: -30 }))).status).toBe(200);
    expect((await bearer(a.url, await token(es, { nbfS: 30 }))).status).toBe(200);
  });
});

describe('a refused token', () => {
  it('expired past the skew: 401 token_expired', async () => {
    const r = await bearer(a.url, await token(es, { expS: -120 }));
    expect(r).toMatchObject({ status: 401, body: { error: 'token_expired' } });
  });

  it('each other failure: 401 unauthorized, naming why', async () => {
    const cases: [string, Promise<string>, RegExp][] = [
      ['another issuer', token(es, { iss: 'https://elsewhere' }), /iss/],
      ['another audience', token(es, { aud: 'vault' }), /aud/],
      ['not yet valid', token(es, { nbfS: 600 }), /nbf/],
      ['no sub', token(es, { sub: '' }), /no sub/],
      // it would never expire: a token must carry exp
      ['no exp', token(es, { expS: null }), /exp missing/],
      ['an unknown sub', token(es, { sub: 'system:serviceaccount:agents:mallory' }), /no agent/],
    ];
    for (const [what, jwt, why] of cases) {
      const r = await bearer(a.url, await jwt);
      expect(r.status, what).toBe(401);
      expect(r.body.error, what).toBe('unauthorized');
      expect(r.body.message, what).toMatch(why);
    }
  });

  it('signed by a key not in the set, or with its signature changed', async () => {
    const stranger = await signingKey('ES256', 'es-1');
    expect((await bearer(a.url, await token(stranger))).status).toBe(401);
    const good = await token(es);
    const [h, p, s] = good.split('.');
    const forged = Buffer.from(p!, 'base64url').toString().replace(PM_SUB, QA_SUB);
    const r = await bearer(a.url, `${h}.${Buffer.from(forged).toString('base64url')}.${s}`);
    expect(r).toMatchObject({ status: 401, body: { error: 'unauthorized' } });
  });

  it('alg none and HMAC are refused, whatever the key set says', async () => {
    const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const now = Math.floor(Date.now() / 1000);
    const claims = b64({ iss: ISSUER, aud: 'agent-gateway', sub: PM_SUB, exp: now + 600 });
    const none = `${b64({ alg: 'none', typ: 'JWT' })}.${claims}.`;
    expect(await bearer(a.url, none)).toMatchObject({ status: 401 });
    // HS256 "signed" with the public key's text: the classic confusion attack
    const { createHmac } = await import('node:crypto');
    const head = b64({ alg: 'HS256', typ: 'JWT', kid: 'es-1' });
    const mac = createHmac('sha256', JSON.stringify(es.jwk))
      .update(`${head}.${claims}`)
      .digest('base64url');
    const r = await bearer(a.url, `${head}.${claims}.${mac}`);
    expect(r).toMatchObject({ status: 401, body: { error: 'unauthorized' } });
    expect(r.body.message).toMatch(/algorithm/);
  });
});

describe('the key set changes', () => {
  it('is re-read when its file changes: a new key is taken, a removed one refused', async () => {
    const next = await signingKey('ES256', 'es-2');
    const before = await token(next);
    expect((await bearer(a.url, before)).status).toBe(401);
    writeJwks(jwks, [next, rs, ed]);
    await until(async () => (await bearer(a.url, await token(next))).status === 200, 'es-2 taken');
    // es-1 left the set: a token of it not seen before is refused
    expect((await bearer(a.url, await token(es, { expS: 1800 }))).status).toBe(401);
  });

  it('a file that does not parse is refused and the keys in use stay', async () => {
    const rsToken = await token(rs, { expS: 1700 });
    writeFileSync(jwks, '{ "keys": [ not json');
    expect(a.adapter.reload('test')).toMatchObject({ taken: false });
    expect((await bearer(a.url, rsToken)).status).toBe(200);
    const log = await call(a.url, 'GET', '/v1/audit?limit=1000', { agent: 'operator:alice' });
    const refused = log.body.entries.filter(
      (e: { action: string; detail: { taken: boolean } }) =>
        e.action === 'reload' && !e.detail.taken,
    );
    expect(refused.length).toBeGreaterThan(0);
    expect(JSON.stringify(refused.at(-1).detail)).toMatch(/AGW_JWT_JWKS.*not JSON/);
    writeJwks(jwks, [es, rs, ed]);
    expect(a.adapter.reload('test')).toMatchObject({ taken: true });
  });
});
