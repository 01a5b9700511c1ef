/**
 * The settings of every command, in one list: each program declares its own (adapter/settings.ts,
 * sidecar/settings.ts); the small commands' are here. KNOWN_ENV is built from them all, so that
 * a misspelled AGW_* variable is caught by whichever program reads the environment.
 */
import type { z } from 'zod';
import { ADAPTER_SETTINGS } from '../adapter/settings.js';
import { readSettings as read, type SettingSpec } from '../settings.js';
import { SIDECAR_SETTINGS } from '../sidecar/settings.js';

export { SettingsError } from '../settings.js';

/** `agent-gateway emergency`: where journald listens and who speaks. */
export const EMERGENCY_SETTINGS = {
  journalSocket: { env: 'AGW_JOURNAL_SOCKET', default: '/run/systemd/journal/socket' },
  agentId: { env: 'AGW_AGENT_ID' },
} as const satisfies Record<string, SettingSpec>;

/** `agent-gateway watch`: the journal namespace to follow (flag --namespace). */
export const WATCH_SETTINGS = {
  namespace: { env: 'AGW_JOURNAL_NAMESPACE', flag: '--namespace' },
} as const satisfies Record<string, SettingSpec>;

/** `agent-gateway mcp`: the local sidecar whose HTTP API the tools call (its only setting). */
export const MCP_SETTINGS = {
  sidecarUrl: { env: 'AGW_SIDECAR_URL', default: 'http://127.0.0.1:7070' },
} as const satisfies Record<string, SettingSpec>;

/** `agent-gateway explain`: whom to ask (a sidecar, or the adapter with a token file). */
export const EXPLAIN_SETTINGS = {
  url: { env: 'AGW_SIDECAR_URL', default: 'http://127.0.0.1:7070', flag: '--url' },
  tokenFile: { env: 'AGW_AGENT_TOKEN_FILE', flag: '--token-file' },
} as const satisfies Record<string, SettingSpec>;

const ALL: readonly Record<string, SettingSpec>[] = [
  ADAPTER_SETTINGS,
  SIDECAR_SETTINGS,
  EMERGENCY_SETTINGS,
  WATCH_SETTINGS,
  MCP_SETTINGS,
  EXPLAIN_SETTINGS,
];

/** Every AGW_* variable of every command. */
export const KNOWN_ENV: ReadonlySet<string> = new Set(
  ALL.flatMap((specs) => Object.values(specs).map((s) => s.env)),
);

/** readSettings with every command's variables known. */
export function readSettings<S extends z.ZodType<unknown, Record<string, string>>>(
  specs: Record<string, SettingSpec>,
  schema: S,
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
) {
  return read(specs, schema, argv, env, KNOWN_ENV);
}
