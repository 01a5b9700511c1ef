import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The seed's agents and channels; each agent's token is `token-<id>`. */
export const AGENTS = ['orchestrator', 'pm', 'engineering', 'qa', 'research', 'growth'] as const;
export type AgentId = (typeof AGENTS)[number];

export const CHANNELS: Record<string, readonly AgentId[]> = {
  'all-agents': AGENTS,
  product: ['pm', 'engineering', 'qa', 'research', 'growth'],
  platform: ['orchestrator'],
};

/** The operators of the test topology; each acts as `operator:<id>` with token `token-operator:<id>`. */
export const OPERATORS = ['alice'] as const;

export function tokenOf(agent: string): string {
  return `token-${agent}`;
}

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

export interface TopologyObject {
  agents: {
    id: string;
    role?: string;
    /** One hash, a list while a token is rotated, or none for an agent known by its subject. */
    token_sha256?: string | string[];
    subject?: string;
    send_rate?: number;
    send_burst?: number;
  }[];
  channels: { name: string; members: string[] }[];
  alerts_to: string;
  operators?: { id: string; token_sha256: string }[];
}

export function topologyObject(): TopologyObject {
  return {
    agents: AGENTS.map((id) => ({ id, role: id, token_sha256: sha256Hex(tokenOf(id)) })),
    channels: Object.entries(CHANNELS).map(([name, members]) => ({ name, members: [...members] })),
    alerts_to: 'orchestrator',
    operators: OPERATORS.map((id) => ({ id, token_sha256: sha256Hex(tokenOf(`operator:${id}`)) })),
  };
}

/** A temp folder removed by the returned cleanup. */
export function tempDir(prefix = 'agw-'): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Writes the test topology as JSON into dir and returns its path. */
export function writeTopology(dir: string, topology: unknown = topologyObject()): string {
  const path = join(dir, 'topology.json');
  writeFileSync(path, JSON.stringify(topology));
  return path;
}
