/**
 * No development tokens in production: `agent-gateway adapter` refuses to start (one line naming
 * the agent and AGW_ALLOW_DEV_TOKENS, exit 2) when a token hash of the topology is that of a
 * public development token `dev-token-<id>`, and starts with AGW_ALLOW_DEV_TOKENS=1, where that
 * token then authenticates. The shipped topologies: examples/ holds development hashes (npm start
 * allows them), and k8s/'s topology, which holds no token at all (its agents are known by their
 * service accounts' subjects), refused without the key set that would let them prove it.
 */
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { type ChildAdapter, CLI, spawnAdapter } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { sha256Hex, tempDir, topologyObject, writeTopology } from '../helpers/topology.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const { dir, cleanup } = tempDir('agw-devtokens-');
const started: ChildAdapter[] = [];
afterAll(async () => {
  for (const c of started) c.child.kill('SIGKILL');
  await Promise.all(started.map((c) => c.exited));
  cleanup();
});

/** The test topology with `agent`'s hash replaced by that of the development token `token`. */
function withDevHash(agent: string, token: string, name: string): string {
  const t = topologyObject();
  const a = t.agents.find((x) => x.id === agent)!;
  a.token_sha256 = sha256Hex(token);
  const sub = join(dir, name);
  mkdirSync(sub, { recursive: true });
  return writeTopology(sub, t);
}

/**
 * `agent-gateway adapter ARGS` to its exit; one that starts after all (the check broken) is
 * killed after 10 s rather than left running, and fails the test.
 */
function runAdapter(args: string[], env: Record<string, string> = {}) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      [CLI, 'adapter', '--listen', '127.0.0.1:0', ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 10_000, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : null;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

function expectRefused(res: { code: number | null; stderr: string; stdout: string }) {
  expect(res.code, res.stderr).toBe(2);
  const lines = res.stderr.trim().split('\n');
  expect(lines, res.stderr).toHaveLength(1);
  expect(res.stdout).toBe('');
  return lines[0]!;
}

describe('development tokens', { timeout: 30_000 }, () => {
  it("refuses the hash of an agent's own development token, naming the agent and the setting", async () => {
    const topology = withDevHash('qa', 'dev-token-qa', 'own');
    const line = expectRefused(
      await runAdapter(['--topology', topology, '--db', join(dir, 'own.db')]),
    );
    expect(line).toContain('agents.3.token_sha256');
    expect(line).toContain('"qa" has the hash of the public development token "dev-token-qa"');
    expect(line).toContain('AGW_ALLOW_DEV_TOKENS=1');
  });

  it("refuses another agent's development token too", async () => {
    const topology = withDevHash('pm', 'dev-token-orchestrator', 'other');
    const line = expectRefused(
      await runAdapter(['--topology', topology, '--db', join(dir, 'other.db')]),
    );
    expect(line).toContain(
      '"pm" has the hash of the public development token "dev-token-orchestrator"',
    );
  });

  it('refuses examples/topology.yaml (npm start) unless AGW_ALLOW_DEV_TOKENS=1', async () => {
    const examples = join(root, 'examples/topology.yaml');
    const line = expectRefused(
      await runAdapter(['--topology', examples, '--db', join(dir, 'ex.db')]),
    );
    expect(line).toContain('"orchestrator" has the hash of the public development token');
    expect(
      expectRefused(
        await runAdapter(['--topology', examples, '--db', join(dir, 'ex.db')], {
          AGW_ALLOW_DEV_TOKENS: 'yes',
        }),
      ),
    ).toContain('AGW_ALLOW_DEV_TOKENS: must be 0 or 1; got "yes"');
    expectRefused(
      await runAdapter(['--topology', examples, '--db', join(dir, 'ex.db')], {
        AGW_ALLOW_DEV_TOKENS: '0',
      }),
    );
  });

  it('starts with AGW_ALLOW_DEV_TOKENS=1 (or its flag), and the development token then authenticates', {
    timeout: 30_000,
  }, async () => {
    const examples = join(root, 'examples/topology.yaml');
    const byEnv = await spawnAdapter(['--topology', examples, '--db', join(dir, 'env.db')], {
      AGW_ALLOW_DEV_TOKENS: '1',
    });
    started.push(byEnv);
    const me = await call(byEnv.url, 'GET', '/v1/me', {
      headers: { authorization: 'Bearer dev-token-pm' },
    });
    expect(me.status).toBe(200);
    expect(me.body.agent).toBe('pm');
    const byFlag = await spawnAdapter([
      '--topology',
      examples,
      '--db',
      join(dir, 'flag.db'),
      '--allow-dev-tokens',
      '1',
    ]);
    started.push(byFlag);
    expect((await call(byFlag.url, 'GET', '/healthz')).status).toBe(200);
  });

  it('starts on a topology of random tokens without the setting', { timeout: 30_000 }, async () => {
    const adapter = await spawnAdapter([
      '--topology',
      writeTopology(dir),
      '--db',
      join(dir, 'random.db'),
    ]);
    started.push(adapter);
    expect((await call(adapter.url, 'GET', '/v1/me', { agent: 'qa' })).body.agent).toBe('qa');
  });
});

describe('k8s/base/topology.yaml', { timeout: 30_000 }, () => {
  it('ships agents known only by their service accounts: no token, and no start without a key set', async () => {
    const k8s = join(root, 'k8s/base/topology.yaml');
    for (const env of [{}, { AGW_ALLOW_DEV_TOKENS: '1' }] as Record<string, string>[]) {
      const line = expectRefused(
        await runAdapter(['--topology', k8s, '--db', join(dir, 'k8s.db')], env),
      );
      expect(line).toContain('agent "orchestrator" has only a subject');
      expect(line).toContain('neither AGW_JWT_JWKS nor AGW_TLS_CLIENT_CA is set');
    }
  });
});
