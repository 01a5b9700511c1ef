/**
 * JWT workload identity (CONTRACT.md, "Security of a deployment"): a bearer token that is a JWT
 * is verified with `jose` against the keys of AGW_JWT_JWKS (a file, re-read when it changes),
 * RS256, ES256 and EdDSA only (never `none`, never HMAC: a symmetric key in a public key set is
 * refused at load), `iss` AGW_JWT_ISSUER, `aud` AGW_JWT_AUDIENCE, `exp` and `nbf` with 60 s of
 * clock skew. Its `sub` is the caller's identity; credentials.ts maps it to the agent whose
 * topology `subject` equals it.
 *
 * A sidecar presents the same projected token for most of an hour, so a verified token is
 * remembered (by its text, up to its `exp`) and a signature is checked once per token, not per
 * request. A new key set forgets them all.
 */
import { createPublicKey, type JsonWebKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createLocalJWKSet, errors, type JSONWebKeySet, jwtVerify } from 'jose';
import { GatewayError } from '../protocol/errors.js';
import { SettingsError } from '../settings.js';

/** The only algorithms taken: asymmetric, so that the adapter holds no secret that could sign. */
export const JWT_ALGORITHMS = ['RS256', 'ES256', 'EdDSA'] as const;
/** Clocks may differ by this much, seconds. */
export const CLOCK_TOLERANCE_S = 60;
/** Verified tokens remembered at most. */
const REMEMBERED = 4096;

export interface JwtSettings {
  /** Path of the JWKS file. */
  readonly jwks: string;
  readonly issuer: string;
  readonly audience: string;
}

interface Verified {
  readonly sub: string;
  /** `exp` in ms since the epoch; Infinity without one. */
  readonly expMs: number;
}

export class JwtVerifier {
  readonly settings: JwtSettings;
  #keys: ReturnType<typeof createLocalJWKSet>;
  #remembered = new Map<string, Verified>();
  readonly #now: () => number;

  /** Loads the key set; a file that cannot be read or parsed is a SettingsError (exit 2). */
  constructor(settings: JwtSettings, now: () => number = Date.now) {
    this.settings = settings;
    this.#now = now;
    this.#keys = loadKeySet(settings.jwks);
  }

  /**
   * Re-reads the key set. A file that cannot be read or parsed throws (a SettingsError naming
   * the problem) and the keys in use stay.
   */
  reload(): void {
    this.#keys = loadKeySet(this.settings.jwks);
    this.#remembered.clear();
  }

  /** The verified token's `sub`, or a GatewayError: token_expired, or unauthorized naming why. */
  async subject(token: string): Promise<string> {
    const now = this.#now();
    const known = this.#remembered.get(token);
    if (known !== undefined) {
      if (now <= known.expMs + CLOCK_TOLERANCE_S * 1000) return known.sub;
      this.#remembered.delete(token);
      throw new GatewayError('token_expired', 'the JWT has expired (its exp is past)');
    }
    let payload: { sub?: unknown; exp?: unknown };
    try {
      ({ payload } = await jwtVerify(token, this.#keys, {
        algorithms: [...JWT_ALGORITHMS],
        issuer: this.settings.issuer,
        audience: this.settings.audience,
        clockTolerance: CLOCK_TOLERANCE_S,
        currentDate: new Date(now),
        // a token without exp would never expire: refused (projected tokens carry one)
        requiredClaims: ['exp'],
      }));
    } catch (err) {
      if (err instanceof errors.JWTExpired)
        throw new GatewayError('token_expired', 'the JWT has expired (its exp is past)');
      throw new GatewayError('unauthorized', `the JWT was refused: ${reason(err)}`);
    }
    if (typeof payload.sub !== 'string' || payload.sub === '')
      throw new GatewayError('unauthorized', 'the JWT has no sub: it names no workload');
    const expMs = (payload.exp as number) * 1000; // required above: jose checked it is a number
    if (this.#remembered.size >= REMEMBERED) {
      const oldest = this.#remembered.keys().next().value;
      if (oldest !== undefined) this.#remembered.delete(oldest);
    }
    this.#remembered.set(token, { sub: payload.sub, expMs });
    return payload.sub;
  }
}

/**
 * Whether a bearer token is a JWT (three base64url parts, the first a JSON header with `alg`),
 * rather than an opaque token that the topology knows by its hash.
 */
export function looksLikeJwt(token: string): boolean {
  const dot = token.indexOf('.');
  if (dot < 1 || !/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$/.test(token)) return false;
  try {
    const header = JSON.parse(Buffer.from(token.slice(0, dot), 'base64url').toString('utf8'));
    return typeof header === 'object' && header !== null && typeof header.alg === 'string';
  } catch {
    return false;
  }
}

function loadKeySet(path: string): ReturnType<typeof createLocalJWKSet> {
  const fail = (problem: string): never => {
    throw new SettingsError(`AGW_JWT_JWKS: ${path}: ${problem}`);
  };
  let text = '';
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    fail(`cannot read: ${firstLine((err as Error).message)}`);
  }
  let set: JSONWebKeySet | undefined;
  try {
    set = JSON.parse(text) as JSONWebKeySet;
  } catch (err) {
    fail(`not JSON: ${firstLine((err as Error).message)}`);
  }
  if (typeof set !== 'object' || set === null || !Array.isArray(set.keys))
    return fail('not a JWKS: it needs a "keys" list');
  if (set.keys.length === 0) fail('the key set is empty: no token could be verified');
  set.keys.forEach((k, i) => {
    if (typeof k !== 'object' || k === null) fail(`keys.${i}: not a key`);
    if (k.kty === 'oct')
      fail(`keys.${i}: a symmetric (oct) key: only public keys (RSA, EC, OKP) are taken`);
    if (k.kty !== 'RSA' && k.kty !== 'EC' && k.kty !== 'OKP')
      fail(`keys.${i}: kty ${JSON.stringify(k.kty)}: only RSA, EC and OKP keys are taken`);
    if ('d' in k) fail(`keys.${i}: holds a private key part ("d"): give the public key set only`);
    // imported now, not at the first token (jose imports lazily): a key whose material is
    // broken is refused at start or at the reload, not discovered by every agent's 401
    try {
      createPublicKey({ key: k as JsonWebKey, format: 'jwk' });
    } catch (err) {
      fail(`keys.${i}: cannot be imported: ${firstLine((err as Error).message)}`);
    }
  });
  try {
    return createLocalJWKSet(set);
  } catch (err) {
    return fail(`not a usable JWKS: ${firstLine((err as Error).message)}`);
  }
}

function reason(err: unknown): string {
  if (err instanceof errors.JWTClaimValidationFailed)
    return `${err.claim} ${err.reason === 'check_failed' ? 'does not match' : err.reason}`;
  if (err instanceof errors.JOSEAlgNotAllowed) return 'its algorithm is not RS256, ES256 or EdDSA';
  if (err instanceof errors.JWSSignatureVerificationFailed) return 'its signature does not verify';
  if (err instanceof errors.JWKSNoMatchingKey) return 'no key of AGW_JWT_JWKS matches it';
  return (err as Error).message ?? String(err);
}

/** A message on one line: the settings line is one line, whatever a parser quoted. */
function firstLine(text: string): string {
  return text.split(/\r?\n/, 1)[0] ?? '';
}
