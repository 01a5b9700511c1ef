/**
 * A bearer token's owner is found by its hash in a map made once per topology
 * (topology.ts principalForTokenHash), not by comparing every agent's hash on each request: each
 * of many agents' tokens finds its own agent, an operator's its operator, every token of a
 * rotation list works, a hash written in upper case is found, and anything else finds no one. A
 * reloaded topology is a new object with its own map: a token it dropped finds no one there.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { loadTopology, principalForTokenHash } from '../../src/adapter/topology.js';
import { sha256Hex } from '../helpers/topology.js';

const digest = (token: string) => createHash('sha256').update(token).digest();
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function topologyFile(agents: { id: string; token_sha256: string | string[] }[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'agw-token-lookup-'));
  dirs.push(dir);
  const path = join(dir, 'topology.json');
  writeFileSync(
    path,
    JSON.stringify({
      agents,
      channels: [],
      alerts_to: agents[0]!.id,
      operators: [{ id: 'alice', token_sha256: sha256Hex('secret-alice') }],
    }),
  );
  return path;
}

it('finds each of 2,000 agents by its own token, and the operator by hers', () => {
  const agents = Array.from({ length: 2000 }, (_, i) => ({
    id: `a${i}`,
    token_sha256: sha256Hex(`secret-a${i}`),
  }));
  // one agent mid-rotation (two tokens), one whose hash is written in upper case
  agents[7]!.token_sha256 = [sha256Hex('secret-a7'), sha256Hex('secret-a7-next')] as never;
  agents[8]!.token_sha256 = sha256Hex('secret-a8').toUpperCase();
  const t = loadTopology(topologyFile(agents));
  for (let i = 0; i < 2000; i++) {
    const who = principalForTokenHash(t, digest(`secret-a${i}`));
    expect(who?.kind === 'agent' && who.agent.id).toBe(`a${i}`);
  }
  const next = principalForTokenHash(t, digest('secret-a7-next'));
  expect(next?.kind === 'agent' && next.agent.id).toBe('a7');
  const alice = principalForTokenHash(t, digest('secret-alice'));
  expect(alice?.kind === 'operator' && alice.operator.id).toBe('alice');
});

it('finds no one for an unknown token, a hash of another length, or the hex as text', () => {
  const t = loadTopology(topologyFile([{ id: 'pm', token_sha256: sha256Hex('secret-pm') }]));
  expect(principalForTokenHash(t, digest('secret-qa'))).toBeUndefined();
  expect(principalForTokenHash(t, digest('secret-pm').subarray(0, 16))).toBeUndefined();
  expect(principalForTokenHash(t, Buffer.alloc(0))).toBeUndefined();
  expect(principalForTokenHash(t, Buffer.from(sha256Hex('secret-pm')))).toBeUndefined();
});

it('answers from the topology it is given: a token a newer one dropped finds no one there', () => {
  const first = loadTopology(topologyFile([{ id: 'pm', token_sha256: sha256Hex('old') }]));
  expect(principalForTokenHash(first, digest('old'))).toBeDefined();
  const second = loadTopology(topologyFile([{ id: 'pm', token_sha256: sha256Hex('new') }]));
  expect(principalForTokenHash(second, digest('old'))).toBeUndefined();
  expect(principalForTokenHash(second, digest('new'))).toBeDefined();
  // the first, asked again, still answers as it did (its map is its own)
  expect(principalForTokenHash(first, digest('old'))).toBeDefined();
  expect(principalForTokenHash(first, digest('new'))).toBeUndefined();
});
