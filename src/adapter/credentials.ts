/**
 * Who is calling (CONTRACT.md, "Security of a deployment"; docs/design/identity.md): one door for
 * every guarded request. A caller proves itself by a bearer token the topology knows by its
 * SHA-256, or by a JWT (jwt.ts) whose `sub` is an agent's `subject`; with mTLS its client
 * certificate must also be valid, and when the certificate names an agent (a URI SAN) the token
 * must be that agent's (403 identity_mismatch).
 *
 * The credentials are reloaded without a restart (SIGHUP, a change of the topology or JWKS file):
 * new token hashes, subjects and operators are taken at once for the next request; a file that
 * cannot be used, or whose agents or channels differ from those running, is refused with one log
 * line and the old credentials stay. Each reload, taken or refused, is an audit entry, and so are
 * failed authentications, counted per source address and minute.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { Logger } from 'pino';
import { GatewayError } from '../protocol/errors.js';
import type { AuditDraft } from '../store/store.js';
import { type JwtVerifier, looksLikeJwt } from './jwt.js';
import {
  agentForSubject,
  agentForUris,
  loadTopology,
  operatorName,
  type Principal,
  principalForTokenHash,
  shapeChange,
  type Topology,
  TopologyError,
  type TopologyOptions,
} from './topology.js';

export interface CredentialsOptions {
  /** The topology running, as loaded at start. */
  readonly topology: Topology;
  /** Its file, re-read at a reload; none: reloads take only the JWKS. */
  readonly topologyPath?: string;
  readonly topologyOptions?: TopologyOptions;
  readonly jwt?: JwtVerifier;
  /** mTLS (AGW_TLS_CLIENT_CA): every guarded request needs a valid client certificate. */
  readonly mtls: boolean;
  /** Appends to the audit log (after the fact; a failure is logged, never thrown). */
  readonly audit: (entry: AuditDraft) => void;
  readonly logger: Logger;
  readonly now: () => number;
}

export interface ReloadResult {
  readonly taken: boolean;
  /** Why it was refused, in one line. */
  readonly reason?: string;
}

/** Failed authentications of one source address within the current minute. */
interface Failures {
  count: number;
  readonly codes: Record<string, number>;
}

const MINUTE_MS = 60_000;
/** Source addresses counted apart in a minute's failed authentications. */
export const MAX_SOURCES = 10_000;
/** The audit target of the failures of the addresses past MAX_SOURCES in a minute. */
export const OTHER_SOURCES = 'other addresses';

export class Credentials {
  readonly #o: CredentialsOptions;
  #topology: Topology;
  /**
   * The agent each TLS connection's certificate names (or null: none), read once per socket and
   * topology: a reload that gives a subject to another agent is seen by open connections too.
   */
  readonly #peers = new WeakMap<
    object,
    { readonly topology: Topology; readonly agent: string | null }
  >();
  #failures = new Map<string, Failures>();
  #minute: number;
  #flushTimer: NodeJS.Timeout | undefined;

  constructor(o: CredentialsOptions) {
    this.#o = o;
    this.#topology = o.topology;
    this.#minute = Math.floor(o.now() / MINUTE_MS);
    this.#flushTimer = setInterval(() => this.flushFailures(), MINUTE_MS);
    this.#flushTimer.unref();
  }

  /** The credentials in force (the topology's agents and channels never change). */
  get topology(): Topology {
    return this.#topology;
  }

  /**
   * Who made `req`, or a GatewayError: unauthorized, token_expired, identity_mismatch. Each
   * failure is counted for the audit log. Synchronous but for a JWT not verified before (its
   * signature is checked by WebCrypto).
   */
  authenticate(req: IncomingMessage): Principal | Promise<Principal> {
    const failed = (err: unknown): never => {
      if (err instanceof GatewayError) this.#failed(req, err.code);
      throw err;
    };
    try {
      const who = this.#authenticate(req);
      return who instanceof Promise ? who.catch(failed) : who;
    } catch (err) {
      return failed(err);
    }
  }

  #authenticate(req: IncomingMessage): Principal | Promise<Principal> {
    const certified = this.#o.mtls ? this.#certified(req.socket as TLSSocket) : null;
    const header = req.headers.authorization;
    const token = header?.startsWith('Bearer ') ? header.slice(7).trim() : '';
    if (token === '')
      throw new GatewayError('unauthorized', 'an Authorization: Bearer <token> header is required');
    const topology = this.#topology;
    if (this.#o.jwt !== undefined && looksLikeJwt(token)) {
      return this.#o.jwt.subject(token).then((sub) => {
        const agent = agentForSubject(topology, sub);
        if (agent === undefined)
          throw new GatewayError('unauthorized', `the JWT's sub "${sub}" is no agent's subject`);
        return bound({ kind: 'agent', agent }, certified);
      });
    }
    const who = principalForTokenHash(topology, createHash('sha256').update(token).digest());
    if (who === undefined)
      throw new GatewayError('unauthorized', 'the bearer token belongs to no agent or operator');
    return bound(who, certified);
  }

  /** The agent the connection's client certificate names, null for none; 401 without one. */
  #certified(socket: TLSSocket): string | null {
    const known = this.#peers.get(socket);
    if (known !== undefined && known.topology === this.#topology) return known.agent;
    // `authorized` alone is not enough: a connection that resumes the TLS session of one that
    // showed no certificate is reported authorized (OpenSSL keeps the session's verify result,
    // which is "ok" when nothing was verified), so a certificate must be there too
    const peer = socket.getPeerCertificate();
    if (!socket.authorized || peer === null || peer.raw === undefined)
      throw new GatewayError(
        'unauthorized',
        `a client certificate signed by AGW_TLS_CLIENT_CA is required${
          socket.authorizationError ? ` (${String(socket.authorizationError)})` : ''
        }`,
      );
    const san = peer.subjectaltname ?? '';
    const uris = san
      .split(', ')
      .filter((n) => n.startsWith('URI:'))
      .map((n) => n.slice(4));
    const agent = agentForUris(this.#topology, uris)?.id ?? null;
    this.#peers.set(socket, { topology: this.#topology, agent });
    return agent;
  }

  /**
   * Re-reads the topology file (its credentials) and the JWKS. Refused, with the old credentials
   * kept: a file that cannot be read or validated, one whose agents or channels differ, a key set
   * that does not parse. Logged and audited either way.
   */
  reload(cause: string): ReloadResult {
    const o = this.#o;
    const result = this.#load();
    const target = o.topologyPath ?? 'credentials';
    if (result.taken) {
      o.logger.info({ cause }, `credentials reloaded (${cause}) from ${target}`);
    } else {
      o.logger.error(
        { cause },
        `credentials reload refused (${cause}): ${result.reason}; the old credentials stay`,
      );
    }
    o.audit({
      at: o.now(),
      actor: 'adapter',
      action: 'reload',
      target,
      detail: { cause, taken: result.taken, ...(result.reason ? { reason: result.reason } : {}) },
    });
    return result;
  }

  #load(): ReloadResult {
    const o = this.#o;
    let next: Topology | undefined;
    try {
      if (o.topologyPath !== undefined) {
        next = loadTopology(o.topologyPath, o.topologyOptions);
        const change = shapeChange(this.#topology, next);
        if (change !== undefined)
          return {
            taken: false,
            reason: `${o.topologyPath}: ${change}: membership changes need a restart`,
          };
        // a subject-only agent needs a way to prove itself, as at start
        checkProvable(next, o.jwt !== undefined, o.mtls);
      }
      o.jwt?.reload();
    } catch (err) {
      return { taken: false, reason: (err as Error).message };
    }
    if (next !== undefined) this.#topology = next;
    return { taken: true };
  }

  #failed(req: IncomingMessage, code: string): void {
    const minute = Math.floor(this.#o.now() / MINUTE_MS);
    if (minute !== this.#minute) this.flushFailures();
    this.#minute = minute;
    const address = req.socket.remoteAddress ?? 'unknown';
    // bounded: one entry per address a minute, up to MAX_SOURCES of them; the failures of
    // addresses past that are counted together in one more entry, never dropped
    const source =
      this.#failures.has(address) || this.#failures.size < MAX_SOURCES ? address : OTHER_SOURCES;
    let f = this.#failures.get(source);
    if (f === undefined) {
      f = { count: 0, codes: {} };
      this.#failures.set(source, f);
    }
    f.count++;
    f.codes[code] = (f.codes[code] ?? 0) + 1;
  }

  /** Writes the failed authentications counted so far: one audit entry per source address. */
  flushFailures(): void {
    if (this.#failures.size === 0) return;
    const failures = this.#failures;
    const minute = new Date(this.#minute * MINUTE_MS).toISOString();
    this.#failures = new Map();
    for (const [source, f] of failures) {
      this.#o.audit({
        at: this.#o.now(),
        actor: 'adapter',
        action: 'auth_failed',
        target: source,
        detail: { minute, count: f.count, codes: f.codes },
      });
    }
  }

  /** Writes what is counted and stops the minute timer. */
  close(): void {
    clearInterval(this.#flushTimer);
    this.flushFailures();
  }
}

/** `who`, when the connection's certificate names no agent or names it; identity_mismatch else. */
function bound(who: Principal, certified: string | null): Principal {
  if (certified === null) return who;
  const named = who.kind === 'agent' ? who.agent.id : operatorName(who.operator.id);
  if (named !== certified)
    throw new GatewayError(
      'identity_mismatch',
      `the client certificate is ${certified}'s, the token ${named}'s`,
    );
  return who;
}

/**
 * Every agent can prove who it is: one with only a `subject` needs AGW_JWT_JWKS or mTLS. A
 * TopologyError otherwise (exit 2 at start; refused at a reload).
 */
export function checkProvable(topology: Topology, jwt: boolean, mtls: boolean): void {
  if (jwt || mtls) return;
  for (const a of topology.agents.values()) {
    if (a.tokenHashes.length === 0)
      throw new TopologyError(
        `topology: agent "${a.id}" has only a subject ("${a.subject}"), but neither AGW_JWT_JWKS nor AGW_TLS_CLIENT_CA is set: it could never prove who it is`,
      );
  }
}
