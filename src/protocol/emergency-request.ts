/**
 * The body of the sidecar's POST /v1/emergency (CONTRACT.md), shared by the endpoint and the MCP
 * tool raise_emergency: a short lower-case reason, the sentence for the operator, and a few
 * fields of the agent's own (journald caps them: src/journald/emergency.ts).
 */
import { z } from 'zod';

export const EmergencyRequestSchema = z.strictObject({
  reason: z.string().regex(/^[a-z][a-z0-9_]{0,63}$/, 'must be a short lower-case reason'),
  message: z.string().min(1).max(8192),
  fields: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).optional(),
});
