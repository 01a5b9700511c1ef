/**
 * The topology file: agents with their token hashes and subjects, static channels with their
 * members, the agent that receives alerts, the operators. Validated whole at start; membership is
 * fixed until a restart, credentials are reloaded (credentials.ts; docs/reference/configuration.md,
 * "Topology file").
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { ADAPTER_SENDER, NAME_PATTERN } from '../protocol/envelope.js';
import { SettingsError } from '../settings.js';

const name = z
  .string()
  .regex(NAME_PATTERN, 'must be 1-64 of A-Z a-z 0-9 _ . - (not starting with . _ -)');

/** One hex SHA-256, or a non-empty list of them (both valid while a token is rotated). */
function tokenHashes(message: string) {
  const one = z.string().regex(/^[0-9a-fA-F]{64}$/, message);
  return z.union([one.transform((h) => [h]), z.array(one).min(1, 'must list at least one hash')], {
    error: `${message}, or a list of them`,
  });
}

const TopologySchema = z.strictObject({
  agents: z
    .array(
      z.strictObject({
        id: name.refine((id) => id !== ADAPTER_SENDER, `"${ADAPTER_SENDER}" is reserved`),
        role: z.string().min(1).max(64).optional(),
        /** The SHA-256 of its token, or a list of them while a token is rotated. */
        token_sha256: tokenHashes(
          'must be the hex SHA-256 of the token (64 hex digits; docs/deploy.md, "Tokens", makes one)',
        ).optional(),
        /**
         * The `sub` of a JWT that proves its workload identity (a Kubernetes service account's
         * `system:serviceaccount:NS:NAME`), and the URI SAN its client certificate may carry.
         */
        subject: z.string().min(1).max(512).optional(),
        /** Its own AGW_SEND_RATE (messages a second; 0: no limit), for an agent that needs more. */
        send_rate: z.number().int().min(0).max(1_000_000).optional(),
        /** Its own AGW_SEND_BURST. */
        send_burst: z.number().int().min(1).max(1_000_000).optional(),
      }),
    )
    .min(1, 'must list at least one agent'),
  channels: z.array(z.strictObject({ name, members: z.array(name).min(1) })).default([]),
  alerts_to: name,
  /** People who run the deployment: the console and the operator endpoints. */
  operators: z
    .array(
      z.strictObject({
        id: name,
        token_sha256: tokenHashes('must be the hex SHA-256 of the token (64 hex digits)'),
      }),
    )
    .default([]),
});

export interface Agent {
  readonly id: string;
  readonly role: string | undefined;
  /** The SHA-256 of each token it may use (several while one is rotated); none: JWT only. */
  readonly tokenHashes: readonly Buffer[];
  /** The `sub` of its JWTs and a URI SAN of its client certificate (topology `subject`). */
  readonly subject: string | undefined;
  /** Its own send rate and burst (topology `send_rate`, `send_burst`), where it sets them. */
  readonly sendRate?: number;
  readonly sendBurst?: number;
}

export interface Channel {
  readonly name: string;
  readonly members: ReadonlySet<string>;
}

/** A person who runs the deployment (topology `operators`); acts as `operator:<id>`. */
export interface Operator {
  readonly id: string;
  readonly tokenHashes: readonly Buffer[];
}

export interface Topology {
  readonly agents: ReadonlyMap<string, Agent>;
  readonly channels: ReadonlyMap<string, Channel>;
  readonly alertsTo: string;
  readonly operators: ReadonlyMap<string, Operator>;
}

/** Who a bearer token belongs to: an agent, or an operator. */
export type Principal =
  | { readonly kind: 'agent'; readonly agent: Agent }
  | { readonly kind: 'operator'; readonly operator: Operator };

/** How an operator is named where an agent's id would be (a sender, an actor). */
export const OPERATOR_PREFIX = 'operator:';

export function operatorName(id: string): string {
  return `${OPERATOR_PREFIX}${id}`;
}

/** A topology that cannot be used; `message` is the one line the adapter prints before exit 2. */
export class TopologyError extends SettingsError {
  override name = 'TopologyError';
}

export interface TopologyOptions {
  /**
   * Accept the hash of a public development token (`dev-token-<id>`, examples/topology.yaml)
   * for a local stack (AGW_ALLOW_DEV_TOKENS=1, which `npm start` sets). Default false: such a
   * topology is refused, since anyone who has read the examples could act as that agent.
   */
  readonly allowDevTokens?: boolean;
}

/** The development token of agent `id`: public, written in examples/ and docs. */
export function devToken(id: string): string {
  return `dev-token-${id}`;
}

export function loadTopology(path: string, opts: TopologyOptions = {}): Topology {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new TopologyError(`topology ${path}: cannot read: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = /\.json$/i.test(path) ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new TopologyError(
      `topology ${path}: not valid ${/\.json$/i.test(path) ? 'JSON' : 'YAML'}: ${firstLine(err)}`,
    );
  }
  return compileTopology(raw, path, opts);
}

/** Validates a parsed topology; `source` names it in errors. */
export function compileTopology(
  raw: unknown,
  source = 'topology',
  opts: TopologyOptions = {},
): Topology {
  const parsed = TopologySchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const at = issue?.path.map(String).join('.') || '(root)';
    throw new TopologyError(
      `topology ${source}: ${at}: ${issue?.message ?? 'invalid'}${agentNamed(raw, issue?.path)}`,
    );
  }
  const fail = (msg: string): never => {
    throw new TopologyError(`topology ${source}: ${msg}`);
  };
  const agents = new Map<string, Agent>();
  const hashes = new Map<string, string>();
  // every agent's development token, by its hash: one agent holding another's is refused too
  const devHashes = new Map(
    parsed.data.agents.map((a) => [sha256Hex(devToken(a.id)), devToken(a.id)] as const),
  );
  const subjects = new Map<string, string>();
  parsed.data.agents.forEach((a, i) => {
    if (agents.has(a.id)) fail(`agents.${i}.id: duplicate agent id "${a.id}"`);
    if (a.token_sha256 === undefined && a.subject === undefined)
      fail(
        `agents.${i}: "${a.id}" has neither token_sha256 nor subject: nothing could prove it is "${a.id}"`,
      );
    const own = (a.token_sha256 ?? []).map((h) => h.toLowerCase());
    own.forEach((hash, j) => {
      const at = own.length > 1 ? `agents.${i}.token_sha256.${j}` : `agents.${i}.token_sha256`;
      const other = hashes.get(hash);
      if (other !== undefined)
        fail(
          other === a.id
            ? `${at}: "${a.id}" lists the same hash twice`
            : `${at}: "${a.id}" has the same token as "${other}"`,
        );
      hashes.set(hash, a.id);
      const dev = devHashes.get(hash);
      if (dev !== undefined && opts.allowDevTokens !== true)
        fail(
          `${at}: "${a.id}" has the hash of the public development token "${dev}" (anyone could act as "${a.id}"): put the SHA-256 of a random token there (docs/deploy.md, "Tokens"), or set AGW_ALLOW_DEV_TOKENS=1 for local development`,
        );
    });
    if (a.subject !== undefined) {
      const other = subjects.get(a.subject);
      if (other !== undefined)
        fail(`agents.${i}.subject: "${a.id}" has the same subject as "${other}" ("${a.subject}")`);
      subjects.set(a.subject, a.id);
    }
    agents.set(a.id, {
      id: a.id,
      role: a.role,
      tokenHashes: own.map((h) => Buffer.from(h, 'hex')),
      subject: a.subject,
      ...(a.send_rate === undefined ? {} : { sendRate: a.send_rate }),
      ...(a.send_burst === undefined ? {} : { sendBurst: a.send_burst }),
    });
  });
  const channels = new Map<string, Channel>();
  parsed.data.channels.forEach((c, i) => {
    if (channels.has(c.name)) fail(`channels.${i}.name: duplicate channel "${c.name}"`);
    const members = new Set<string>();
    c.members.forEach((m, j) => {
      if (!agents.has(m))
        fail(`channels.${i}.members.${j}: unknown agent "${m}" in channel "${c.name}"`);
      if (members.has(m)) fail(`channels.${i}.members.${j}: "${m}" is listed twice in "${c.name}"`);
      members.add(m);
    });
    channels.set(c.name, { name: c.name, members });
  });
  if (!agents.has(parsed.data.alerts_to))
    fail(`alerts_to: unknown agent "${parsed.data.alerts_to}"`);
  const operators = new Map<string, Operator>();
  parsed.data.operators.forEach((o, i) => {
    if (operators.has(o.id)) fail(`operators.${i}.id: duplicate operator id "${o.id}"`);
    const own = o.token_sha256.map((h) => h.toLowerCase());
    own.forEach((hash, j) => {
      const at =
        own.length > 1 ? `operators.${i}.token_sha256.${j}` : `operators.${i}.token_sha256`;
      const other = hashes.get(hash);
      if (other !== undefined) fail(`${at}: operator "${o.id}" has the same token as "${other}"`);
      hashes.set(hash, operatorName(o.id));
      if (hash === sha256Hex(devToken(operatorName(o.id))) && opts.allowDevTokens !== true)
        fail(
          `${at}: operator "${o.id}" has the hash of the public development token "${devToken(operatorName(o.id))}": put the SHA-256 of a random token there (docs/operators.md), or set AGW_ALLOW_DEV_TOKENS=1 for local development`,
        );
    });
    operators.set(o.id, { id: o.id, tokenHashes: own.map((h) => Buffer.from(h, 'hex')) });
  });
  return { agents, channels, alertsTo: parsed.data.alerts_to, operators };
}

/**
 * Whose token this SHA-256 is: an agent's or an operator's. Found by the hash in a map made once
 * per topology, then compared with timingSafeEqual. The lookup's time can depend on the hash
 * (how a map bucket's keys compare), never on the token: the hash is SHA-256 of a secret, and
 * learning how a guess's hash compares with a stored one gives no way to a token whose hash
 * matches. Before, every hash of every agent was compared on every request, so that the time
 * said nothing about which one matched: 0.2 ms of CPU per request at 1,000 agents and 0.6 ms at
 * 4,000 (bench/AGENTS-RESULTS.md), for a secrecy the hash already gives.
 */
export function principalForTokenHash(
  topology: Topology,
  tokenHash: Buffer,
): Principal | undefined {
  let byHash = principals.get(topology);
  if (byHash === undefined) {
    byHash = new Map();
    // hashes are unique across agents and operators (loadTopology); an agent's wins regardless
    for (const o of topology.operators.values())
      for (const h of o.tokenHashes)
        byHash.set(h.toString('hex'), { hash: h, who: { kind: 'operator', operator: o } });
    for (const a of topology.agents.values())
      for (const h of a.tokenHashes)
        byHash.set(h.toString('hex'), { hash: h, who: { kind: 'agent', agent: a } });
    principals.set(topology, byHash);
  }
  const found = byHash.get(tokenHash.toString('hex'));
  if (found === undefined || found.hash.length !== tokenHash.length) return undefined;
  return timingSafeEqual(found.hash, tokenHash) ? found.who : undefined;
}

/** Each topology's principals by the hex of their token hashes (principalForTokenHash). */
const principals = new WeakMap<
  Topology,
  Map<string, { readonly hash: Buffer; readonly who: Principal }>
>();

/** The agent whose topology `subject` is `subject` (a JWT's `sub`, a certificate's URI SAN). */
export function agentForSubject(topology: Topology, subject: string): Agent | undefined {
  for (const a of topology.agents.values()) if (a.subject === subject) return a;
  return undefined;
}

/**
 * The agent a client certificate's URI SANs name: one equal to an agent's `subject`, or a
 * SPIFFE id whose path ends in `/agent/<id>` (any trust domain: the CA decides who may hold it).
 */
export function agentForUris(topology: Topology, uris: readonly string[]): Agent | undefined {
  for (const uri of uris) {
    const bySubject = agentForSubject(topology, uri);
    if (bySubject !== undefined) return bySubject;
    const m = /^spiffe:\/\/[^/]+(?:\/[^/]+)*\/agent\/([^/]+)$/.exec(uri);
    const agent = m === null ? undefined : topology.agents.get(m[1]!);
    if (agent !== undefined) return agent;
  }
  return undefined;
}

/**
 * What differs between two topologies other than their credentials (token hashes, subjects,
 * operators), in one line; undefined when nothing does. A reload takes new credentials only:
 * membership and the agents are fixed until a restart.
 */
export function shapeChange(running: Topology, next: Topology): string | undefined {
  const ids = (t: Topology) => [...t.agents.keys()].sort().join(',');
  if (ids(running) !== ids(next))
    return `its agents differ (running: ${ids(running)}; file: ${ids(next)})`;
  for (const [id, a] of running.agents) {
    const b = next.agents.get(id)!;
    if (a.role !== b.role || a.sendRate !== b.sendRate || a.sendBurst !== b.sendBurst)
      return `agent "${id}" differs in its role, send_rate or send_burst`;
  }
  const channels = (t: Topology) =>
    [...t.channels.values()]
      .map((c) => `${c.name}:${[...c.members].sort().join('+')}`)
      .sort()
      .join(',');
  if (channels(running) !== channels(next)) return 'its channels or their members differ';
  if (running.alertsTo !== next.alertsTo)
    return `alerts_to differs (running: ${running.alertsTo}; file: ${next.alertsTo})`;
  return undefined;
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** ` (agent "id")` when a schema problem is inside an agent entry that has an id. */
function agentNamed(raw: unknown, path: readonly PropertyKey[] | undefined): string {
  if (path?.[0] !== 'agents' || typeof path[1] !== 'number' || path.length < 3) return '';
  const id = (raw as { agents?: { id?: unknown }[] }).agents?.[path[1]]?.id;
  return typeof id === 'string' ? ` (agent "${id}")` : '';
}

function firstLine(err: unknown): string {
  return String((err as Error).message ?? err).split('\n')[0] ?? '';
}
