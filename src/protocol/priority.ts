/**
 * A message's priorities (docs/reference/adapter-api.md, "POST /v1/messages"). Kept apart from
 * envelope.ts, which checks envelopes with zod: wire.ts and the client need only the names, and
 * the client package (`@agent-gateway/client`, docs/reference/client.md) must build from
 * zod-free files alone.
 */
export const PRIORITIES = ['normal', 'critical'] as const;
export type Priority = (typeof PRIORITIES)[number];
