/**
 * The bodies that name deliveries, for both programs: acks `{"delivery_ids": [...]}`, nacks
 * (with `retry` and `reason`), lease extensions (with `extend_ms`); 1 to 1000 ids. The
 * adapter's ids are positive; the sidecar also hands out negative ones of its own (replayed
 * copies), so it accepts those too.
 */
import { z } from 'zod';
import { GatewayError } from './errors.js';
import { parseJson } from './http.js';
import { MAX_DELIVERY_IDS } from './limits.js';

// Each schema is built once: zod compiles a schema at its first parse, which per request cost
// the adapter 7% of its CPU on the ack path.
const ids = (negativeToo: boolean) =>
  z
    .array(negativeToo ? z.int().refine((n) => n !== 0) : z.int().positive())
    .min(1)
    .max(MAX_DELIVERY_IDS);

const idsBody = (negativeToo: boolean) => z.strictObject({ delivery_ids: ids(negativeToo) });
const ID_BODIES = { adapter: idsBody(false), sidecar: idsBody(true) };

const nackBody = (negativeToo: boolean) =>
  z.strictObject({
    delivery_ids: ids(negativeToo),
    retry: z.boolean().optional(),
    reason: z.string().max(1000).optional(),
  });
const NACK_BODIES = { adapter: nackBody(false), sidecar: nackBody(true) };

const extensionBody = (negativeToo: boolean, maxLeaseMs: number) =>
  z.strictObject({
    delivery_ids: ids(negativeToo),
    extend_ms: z
      .int(`must be an integer number of ms from 1 to ${maxLeaseMs}`)
      .min(1, `must be from 1 to ${maxLeaseMs} ms`)
      .max(maxLeaseMs, `must be at most ${maxLeaseMs} ms (AGW_MAX_LEASE_MS)`),
  });
/** By program and AGW_MAX_LEASE_MS (one value per process in practice). */
const EXTENSION_BODIES = new Map<string, ReturnType<typeof extensionBody>>();

const whose = (opts: IdsOptions) => (opts.negativeToo === true ? 'sidecar' : 'adapter');

export interface IdsOptions {
  /** The sidecar's own (negative) ids are allowed too. */
  readonly negativeToo?: boolean;
}

export function parseDeliveryIds(body: Buffer, opts: IdsOptions = {}): number[] {
  return parse(ID_BODIES[whose(opts)], body).delivery_ids;
}

export interface Nack {
  readonly ids: number[];
  /** false: the agent can never handle them; dead-letter at once. Default true. */
  readonly retry: boolean;
  readonly reason: string | null;
}

export function parseNack(body: Buffer, opts: IdsOptions = {}): Nack {
  const v = parse(NACK_BODIES[whose(opts)], body);
  return { ids: v.delivery_ids, retry: v.retry ?? true, reason: v.reason ?? null };
}

export interface LeaseExtension {
  readonly ids: number[];
  readonly extendMs: number;
}

export function parseLeaseExtension(
  body: Buffer,
  maxLeaseMs: number,
  opts: IdsOptions = {},
): LeaseExtension {
  const v = parse(leaseExtensionSchema(maxLeaseMs, opts), body);
  return { ids: v.delivery_ids, extendMs: v.extend_ms };
}

/** The schemas of these bodies, for the MCP tools, which take the same fields. */
export function deliveryIdsSchema(opts: IdsOptions = {}) {
  return ID_BODIES[whose(opts)];
}

export function nackSchema(opts: IdsOptions = {}) {
  return NACK_BODIES[whose(opts)];
}

export function leaseExtensionSchema(maxLeaseMs: number, opts: IdsOptions = {}) {
  const key = `${whose(opts)}:${maxLeaseMs}`;
  let schema = EXTENSION_BODIES.get(key);
  if (schema === undefined) {
    schema = extensionBody(opts.negativeToo === true, maxLeaseMs);
    EXTENSION_BODIES.set(key, schema);
  }
  return schema;
}

function parse<T>(schema: z.ZodType<T>, body: Buffer): T {
  return checkRequest(schema, parseJson(body));
}

/** A parsed value checked against one of these schemas; a 400 `invalid_request` naming the field. */
export function checkRequest<T>(schema: z.ZodType<T>, value: unknown): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const field =
    issue?.code === 'unrecognized_keys'
      ? (issue.keys[0] ?? 'body')
      : String(issue?.path[0] ?? 'delivery_ids');
  const message =
    field === 'delivery_ids'
      ? `must be an array of 1 to ${MAX_DELIVERY_IDS} delivery ids`
      : issue?.code === 'unrecognized_keys'
        ? 'is not a field of this request'
        : (issue?.message ?? 'invalid');
  throw new GatewayError('invalid_request', `${field}: ${message}`, { field });
}
