/**
 * A bad setting or topology stops `agent-gateway adapter` at start with exit 2 and one line on
 * stderr naming the variable (or the topology entry) and the problem.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { sha256Hex, tempDir, topologyObject, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-cli-');
afterAll(cleanup);
const topology = writeTopology(dir);
const db = join(dir, 'a.db');

function expectOneLine(
  res: { code: number | null; stderr: string; stdout: string },
  ...parts: string[]
) {
  expect(res.code).toBe(2);
  const lines = res.stderr.trim().split('\n');
  expect(lines, res.stderr).toHaveLength(1);
  for (const p of parts) expect(lines[0]).toContain(p);
  expect(res.stdout).toBe('');
}

describe('bad settings', () => {
  it.each([
    [{ AGW_QUEUE_CAPACITY: 'lots' }, [], ['AGW_QUEUE_CAPACITY', 'integer', '"lots"']],
    [{ AGW_SYNC: 'off' }, [], ['AGW_SYNC', 'full or normal']],
    [{ AGW_LISTEN: 'localhost' }, [], ['AGW_LISTEN', 'host:port']],
    [{}, ['--lease-ms', '-5'], ['AGW_LEASE_MS (--lease-ms)', 'integer']],
    [
      { AGW_QUEUE_CAPACITI: '5' },
      [],
      ['AGW_QUEUE_CAPACITI', 'unknown setting', 'did you mean AGW_QUEUE_CAPACITY'],
    ],
    [{}, ['--lisen', '1.2.3.4:5'], ['--lisen', 'unknown flag', 'did you mean --listen']],
    [{}, ['--db'], ['--db', 'needs a value']],
    [{ AGW_MAX_LEASE_MS: '5000' }, [], ['AGW_MAX_LEASE_MS', 'at least AGW_LEASE_MS (30000)']],
    [{ AGW_SEND_BURST: '0' }, [], ['AGW_SEND_BURST', 'integer from 1 to 1000000']],
    [{}, ['--send-rate', '-1'], ['AGW_SEND_RATE (--send-rate)', 'integer from 0']],
    [{ AGW_CRITICAL_CAPACITY: '0' }, [], ['AGW_CRITICAL_CAPACITY', 'integer from 1']],
    [{ AGW_HOP_BUDGET: '0' }, [], ['AGW_HOP_BUDGET', 'integer from 1']],
    [{}, ['--thread-budget', 'many'], ['AGW_THREAD_BUDGET (--thread-budget)', 'integer']],
    [{ AGW_SENDER_SHARE_PERCENT: 'half' }, [], ['AGW_SENDER_SHARE_PERCENT', 'auto or an integer']],
    [
      { AGW_RETENTION_KEEP_DAYS: '10' },
      [],
      ['AGW_RETENTION_KEEP_DAYS', 'at least AGW_RETENTION_DAYS (30)'],
    ],
    [
      { AGW_RESERVED_CONNECTIONS_PERCENT: '95' },
      [],
      ['AGW_RESERVED_CONNECTIONS_PERCENT', 'integer from 0 to 90'],
    ],
    [{ AGW_MAX_CONNECTIONS_PER_ADDRESS: '0' }, [], ['AGW_MAX_CONNECTIONS_PER_ADDRESS', 'integer']],
    [{ AGW_UNAUTHENTICATED_IDLE_MS: '5s' }, [], ['AGW_UNAUTHENTICATED_IDLE_MS', '"5s"']],
    [{ AGW_MAX_READS_PER_AGENT: '0' }, [], ['AGW_MAX_READS_PER_AGENT', 'integer from 1']],
    [
      { AGW_MAX_RESPONSE_BYTES: '1048576' },
      [],
      ['AGW_MAX_RESPONSE_BYTES', 'at least AGW_MAX_PAGE_BYTES (8388608)'],
    ],
    [{}, ['--write-timeout-ms', '10'], ['AGW_WRITE_TIMEOUT_MS (--write-timeout-ms)', 'integer']],
  ] as const)('%o %o is refused', async (env, args, parts) => {
    expectOneLine(
      await runCli(['adapter', '--topology', topology, '--db', db, ...args], env),
      ...parts,
    );
  });

  it('names a missing topology', async () => {
    expectOneLine(await runCli(['adapter', '--db', db]), 'AGW_TOPOLOGY', 'required');
  });

  it('lets a flag win over the variable', async () => {
    // AGW_SYNC is bad but --sync overrides it: the next problem reported is the lease
    const res = await runCli(
      ['adapter', '--topology', topology, '--db', db, '--sync', 'normal', '--lease-ms', 'x'],
      {
        AGW_SYNC: 'bad',
      },
    );
    expectOneLine(res, 'AGW_LEASE_MS');
  });
});

describe('bad topology', () => {
  const base = topologyObject();
  const cases: [string, unknown, string[]][] = [
    [
      'an unknown member',
      { ...base, channels: [{ name: 'product', members: ['pm', 'qa2'] }] },
      ['channels.0.members.1', 'unknown agent "qa2"'],
    ],
    [
      'a duplicate id',
      { ...base, agents: [...base.agents, { ...base.agents[1]!, token_sha256: 'a'.repeat(64) }] },
      ['agents.6.id', 'duplicate agent id "pm"'],
    ],
    [
      'a bad hash',
      {
        ...base,
        agents: [{ ...base.agents[0]!, token_sha256: 'not-a-hash' }, ...base.agents.slice(1)],
      },
      ['agents.0.token_sha256', '64 hex digits'],
    ],
    [
      'a shared token',
      {
        ...base,
        agents: [...base.agents, { id: 'twin', token_sha256: base.agents[0]!.token_sha256 }],
      },
      ['agents.6.token_sha256', 'same token'],
    ],
    [
      'an unknown alerts_to',
      { ...base, alerts_to: 'nobody' },
      ['alerts_to', 'unknown agent "nobody"'],
    ],
    ['an unknown key', { ...base, chanels: [] }, ['chanels']],
    [
      "an operator with an agent's token",
      { ...base, operators: [{ id: 'bob', token_sha256: base.agents[2]!.token_sha256 }] },
      ['operators.0.token_sha256', 'operator "bob" has the same token as "engineering"'],
    ],
    [
      'a duplicate operator',
      {
        ...base,
        operators: [
          { id: 'bob', token_sha256: 'c'.repeat(64) },
          { id: 'bob', token_sha256: 'd'.repeat(64) },
        ],
      },
      ['operators.1.id', 'duplicate operator id "bob"'],
    ],
    [
      "an operator holding the public development token's hash",
      {
        ...base,
        operators: [{ id: 'carol', token_sha256: sha256Hex('dev-token-operator:carol') }],
      },
      ['operators.0.token_sha256', 'dev-token-operator:carol', 'AGW_ALLOW_DEV_TOKENS'],
    ],
    [
      'the reserved id',
      { ...base, agents: [...base.agents, { id: 'adapter', token_sha256: 'b'.repeat(64) }] },
      ['agents.6.id', 'reserved'],
    ],
  ];
  it.each(cases)('%s stops the adapter', async (_name, topo, parts) => {
    const path = join(dir, `bad-${Math.random()}.json`);
    writeFileSync(path, JSON.stringify(topo));
    expectOneLine(await runCli(['adapter', '--topology', path, '--db', db]), 'topology', ...parts);
  });

  it('reads YAML and says where it is broken', async () => {
    const path = join(dir, 'bad.yaml');
    writeFileSync(path, 'agents: [ {id: pm\n');
    expectOneLine(await runCli(['adapter', '--topology', path, '--db', db]), 'not valid YAML');
  });
});
