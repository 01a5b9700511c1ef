/**
 * The official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
 * package.json) against a real sidecar's `/mcp` in front of a real adapter on loopback
 * (docs/reference/mcp.md, "Conformance"). The suite needs Node 22 or later (it imports
 * fs.globSync): on an older Node it runs on the pinned Node 24 of test/node24 (installed there
 * on first use, as test/node24.sh does).
 *
 * Every scenario the suite has for servers is run. Most are written against its own fixture
 * server ("everything server": tools named test_simple_text, prompts, logging, sampling...): this
 * server offers none of those, and the suite's own baseline mechanism (`--expected-failures`)
 * lists them, each with why. The suite fails the run on a failure not listed and on a listed
 * one that passes (a stale entry), so the list stays exact. What applies to any server passes:
 * initialization, ping, the tools' and the resources' lists, and the DNS-rebinding check (a
 * Host and Origin of another name refused, `http://127.0.0.1:<port>` as both taken). The
 * session streams scenario only warns that a stateless server has no session to test.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { tempDir } from '../helpers/topology.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

const root = fileURLToPath(new URL('../..', import.meta.url));
const suite = (() => {
  const pkg = createRequire(import.meta.url).resolve(
    '@modelcontextprotocol/conformance/package.json',
  );
  const { bin } = JSON.parse(readFileSync(pkg, 'utf8')) as { bin: { conformance: string } };
  return join(dirname(pkg), bin.conformance);
})();

/** The scenarios that must pass: what the suite asks of any MCP server over Streamable HTTP. */
const PASSING = [
  'server-initialize',
  'ping',
  'tools-list',
  'resources-list',
  'dns-rebinding-protection',
];

/** The scenarios of the suite's fixture server, each with what it asks that is not here. */
const NOT_OURS: Record<string, string> = {
  // a WARNING, which the baseline counts as a failure: it tests a session's streams
  'server-sse-multiple-streams': 'stateless: no session, so no session streams to test',
  'logging-set-level': 'no logging capability: the sidecar logs to its own log',
  'completion-complete': 'no prompts, no completions',
  'tools-call-simple-text': 'the fixture tool test_simple_text',
  'tools-call-image': 'the fixture tool test_image_content',
  'tools-call-audio': 'the fixture tool test_audio_content',
  'tools-call-embedded-resource': 'the fixture tool test_embedded_resource',
  'tools-call-mixed-content': 'the fixture tool test_multiple_content_types',
  'tools-call-with-logging': 'the fixture tool test_tool_with_logging',
  'tools-call-error': 'the fixture tool test_error_handling',
  'tools-call-with-progress': 'the fixture tool test_tool_with_progress',
  'tools-call-sampling': 'the fixture tool test_sampling: the server asks nothing of the client',
  'tools-call-elicitation': 'the fixture tool test_elicitation',
  'elicitation-sep1034-defaults': 'the fixture tool test_elicitation_sep1034_defaults',
  'elicitation-sep1330-enums': 'the fixture tool test_elicitation_sep1330_enums',
  'resources-read-text': 'the fixture resource test://static-text',
  'resources-read-binary': 'the fixture resource test://static-binary',
  'resources-templates-read': 'the fixture template test://template/{id}/data',
  'resources-subscribe': 'no subscriptions: stateless, nothing to notify on',
  'resources-unsubscribe': 'no subscriptions: stateless, nothing to notify on',
  'prompts-list': 'no prompts',
  'prompts-get-simple': 'no prompts',
  'prompts-get-with-args': 'no prompts',
  'prompts-get-embedded-resource': 'no prompts',
  'prompts-get-with-image': 'no prompts',
};

function run(
  file: string,
  args: string[],
  cwd: string,
): Promise<{ code: number; stdout: string; out: string }> {
  return new Promise((resolve) => {
    // asynchronous: the sidecar under test answers from this process's event loop
    execFile(file, args, { cwd, encoding: 'utf8', timeout: 90_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1;
      const failure = err === null ? '' : `${err.message}\n`;
      resolve({ code, stdout, out: `${failure}${stdout}${stderr}` });
    });
  });
}

/** A Node of 22 or later: this one, or the pinned Node 24 of test/node24. */
async function node22(): Promise<string> {
  if (Number(process.versions.node.split('.')[0]) >= 22) return process.execPath;
  const found = await run('bash', [join(root, 'test/node24/node24-dir.sh')], root);
  expect(found.code, found.out).toBe(0);
  // its folder is its one line on stdout (what installing it said is on stderr)
  return join(found.stdout.trim(), 'bin', 'node');
}

it('passes the official MCP conformance suite, but for the fixture server scenarios', {
  timeout: 180_000, // the pinned Node 24 is installed on first use; the suite then takes ~3 s
}, async () => {
  const node = await node22();
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await startTestSidecar('pm', adapter.url);
  stops.push(pm.stop);
  const { dir, cleanup } = tempDir('agw-conformance-');
  stops.push(cleanup);
  const baseline = join(dir, 'expected-failures.yml');
  writeFileSync(
    baseline,
    `server:\n${Object.entries(NOT_OURS)
      .map(([s, why]) => `  - ${s} # ${why}\n`)
      .join('')}`,
  );
  const out = join(dir, 'results');
  const r = await run(
    node,
    [suite, 'server', '--url', `${pm.url}/mcp`, '--expected-failures', baseline, '-o', out],
    dir,
  );
  // what the suite said, when it wrote no results (it could not run)
  expect(existsSync(out), r.out).toBe(true);
  // each scenario's checks, by scenario (its results folder is server-<scenario>-<time>)
  const checks = new Map<string, { id: string; status: string; errorMessage?: string }[]>();
  for (const d of readdirSync(out)) {
    const scenario = /^server-(.+)-\d{4}-\d\d-\d\dT/.exec(d)?.[1];
    if (scenario !== undefined)
      checks.set(scenario, JSON.parse(readFileSync(join(out, d, 'checks.json'), 'utf8')));
  }
  // every scenario the suite has is one of ours or one of its fixture server's
  expect([...checks.keys()].sort()).toEqual([...PASSING, ...Object.keys(NOT_OURS)].sort());
  for (const scenario of PASSING) {
    const failed = checks.get(scenario)!.filter((c) => c.status === 'FAILURE');
    expect(failed, scenario).toEqual([]);
  }
  // its one check: no session to test with (each request stands alone, mcp.md "Stateless")
  expect(checks.get('server-sse-multiple-streams')!.map((c) => [c.id, c.status])).toEqual([
    ['server-sse-multiple-streams-session', 'WARNING'],
  ]);
  expect(checks.get('dns-rebinding-protection')!.map((c) => [c.id, c.status])).toEqual([
    ['localhost-host-rebinding-rejected', 'SUCCESS'],
    ['localhost-host-valid-accepted', 'SUCCESS'],
  ]);
  // no failure outside the baseline, no stale entry in it
  expect(r.code, r.out).toBe(0);
});
