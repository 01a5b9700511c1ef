/**
 * The body of the sidecar's POST /v1/emergency (docs/reference/sidecar.md, "Emergencies, status,
 * metrics"), shared by the endpoint and the MCP tool raise_emergency: a short lower-case reason,
 * the sentence for the operator, and a few fields of the agent's own (journald caps them:
 * src/journald/emergency.ts).
 */
import { z } from 'zod';

type FieldValue = string | number | boolean;

/**
 * The agent's fields, passed on as parsed. z.record would build a copy key by key, and assigning
 * an own `__proto__` key (JSON.parse makes them) sets the copy's prototype instead: the field
 * vanished from the entry without a word, not even counted among those dropped.
 */
const fields = z.custom<Record<string, FieldValue>>(
  (v) =>
    typeof v === 'object' &&
    v !== null &&
    !Array.isArray(v) &&
    Object.values(v).every((x) => ['string', 'number', 'boolean'].includes(typeof x)),
  { error: 'must be an object of strings, numbers and booleans' },
);

export const EmergencyRequestSchema = z.strictObject({
  reason: z.string().regex(/^[a-z][a-z0-9_]{0,63}$/, 'must be a short lower-case reason'),
  message: z.string().min(1).max(8192),
  fields: fields.optional(),
});
