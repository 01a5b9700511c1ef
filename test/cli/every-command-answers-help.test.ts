/**
 * Every command answers `--help` and `-h` (issue 37): on stdout, exit 0, nothing on stderr, its
 * usage line, each of its own flags and each AGW_* setting it reads with that setting's flag and
 * default, within 100 columns; checked against the declarations the commands parse with (the
 * programs' SettingSpec tables and each command's flag table), so a setting or flag added there
 * and missing from the help fails here. `--help` answers whatever the environment holds (a
 * misspelled AGW_* variable included), and an unknown flag is still one line and exit 2. Runs the
 * built CLI (dist/).
 */
import { describe, expect, it } from 'vitest';
import { ADAPTER_SETTINGS } from '../../src/adapter/settings.js';
import type { ArgSpec } from '../../src/cli/args.js';
import { AUDIT_SETTINGS } from '../../src/cli/audit.js';
import { EMERGENCY_ARGS } from '../../src/cli/emergency.js';
import { EXPLAIN_ARGS } from '../../src/cli/explain.js';
import { MIGRATE_STORE_ARGS } from '../../src/cli/migrate-store.js';
import {
  EMERGENCY_SETTINGS,
  EXPLAIN_SETTINGS,
  MCP_SETTINGS,
  WATCH_SETTINGS,
} from '../../src/cli/settings.js';
import { WAIT_READY_ARGS } from '../../src/cli/wait-ready.js';
import { WATCH_ARGS } from '../../src/cli/watch.js';
import { flagFor, type SettingSpec } from '../../src/settings.js';
import { SIDECAR_SETTINGS } from '../../src/sidecar/settings.js';
import { runCli } from '../helpers/cli.js';

/** The commands of CONTRACT.md, each with what it parses. */
const COMMANDS: Record<
  string,
  { args?: Record<string, ArgSpec>; settings?: Record<string, SettingSpec> }
> = {
  adapter: { settings: ADAPTER_SETTINGS },
  sidecar: { settings: SIDECAR_SETTINGS },
  'wait-ready': { args: WAIT_READY_ARGS },
  emergency: { args: EMERGENCY_ARGS, settings: EMERGENCY_SETTINGS },
  watch: { args: WATCH_ARGS, settings: WATCH_SETTINGS },
  mcp: { settings: MCP_SETTINGS },
  explain: { args: EXPLAIN_ARGS, settings: EXPLAIN_SETTINGS },
  'migrate-store': { args: MIGRATE_STORE_ARGS },
  audit: { settings: AUDIT_SETTINGS },
};

/** `s` as a regular expression that matches it literally. */
const literal = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** What every --help answer must be, whatever it says. */
function expectPlain(r: { code: number | null; stdout: string; stderr: string }, what: string) {
  expect([r.code, r.stderr], what).toEqual([0, '']);
  for (const line of r.stdout.split('\n'))
    expect(line.length, `${what}: "${line}" is wider than 100 columns`).toBeLessThanOrEqual(100);
}

describe('--help', () => {
  it('agent-gateway --help (and -h, help) lists every command', { timeout: 30_000 }, async () => {
    for (const flag of ['--help', '-h', 'help']) {
      const r = await runCli([flag]);
      expectPlain(r, flag);
      expect(r.stdout.split('\n')[0]).toBe('usage: agent-gateway <command> [flags]');
      for (const name of Object.keys(COMMANDS))
        expect(r.stdout, `${flag}: ${name}`).toMatch(new RegExp(`^  ${literal(name)}  `, 'm'));
    }
  });

  for (const [name, { args = {}, settings = {} }] of Object.entries(COMMANDS)) {
    it(`agent-gateway ${name} --help names its flags and settings`, {
      timeout: 30_000,
    }, async () => {
      const [long, short, unknown, badEnv] = await Promise.all([
        runCli([name, '--help']),
        runCli([name, '-h']),
        runCli([name, '--no-such-flag', 'x']),
        // a misspelled variable stops the command, not its help
        runCli([name, '--help'], { AGW_QUEUE_CAPACITI: '1' }),
      ]);
      expectPlain(long, `${name} --help`);
      expect(short.stdout, `${name} -h`).toBe(long.stdout);
      expectPlain(short, `${name} -h`);
      expect(badEnv.stdout, `${name} --help with a bad AGW_*`).toBe(long.stdout);
      expectPlain(badEnv, `${name} --help with a bad AGW_*`);

      const help = long.stdout;
      expect(help.split('\n')[0]).toMatch(new RegExp(`^usage: agent-gateway ${literal(name)}\\b`));
      for (const a of Object.values(args)) {
        const shown = a.value === undefined ? a.flag : `${a.flag} ${a.value}`;
        expect(help, `${name}: ${a.flag}`).toMatch(new RegExp(`^  ${literal(shown)}  `, 'm'));
      }
      for (const s of Object.values(settings)) {
        // one row: the flag, the variable, the default ("(required)" or "(none)" without one)
        const flag = s.flag ?? flagFor(s.env);
        const value = s.default === undefined ? '\\((required|none)\\)' : literal(s.default);
        expect(help, `${name}: ${s.env}`).toMatch(
          new RegExp(`^  ${literal(flag)} +${literal(s.env)}(?: +${value}|\n {6}${value})$`, 'm'),
        );
      }

      // an unknown flag: one line naming it, exit 2, nothing on stdout
      expect([unknown.code, unknown.stdout], `${name} --no-such-flag`).toEqual([2, '']);
      expect(unknown.stderr).toMatch(
        new RegExp(`^agent-gateway ${literal(name)}: [^\n]*--no-such-flag`),
      );
      expect(unknown.stderr.trimEnd().split('\n'), unknown.stderr).toHaveLength(1);
    });
  }

  it('says which settings are required, from the schemas', { timeout: 30_000 }, async () => {
    const [adapter, sidecar, emergency] = await Promise.all(
      ['adapter', 'sidecar', 'emergency'].map((c) => runCli([c, '--help'])),
    );
    expect(adapter!.stdout).toMatch(/^ {2}--topology +AGW_TOPOLOGY +\(required\)$/m);
    expect(adapter!.stdout).toMatch(/^ {2}--tls-cert +AGW_TLS_CERT +\(none\)$/m);
    expect(sidecar!.stdout).toMatch(/^ {2}--adapter-url +AGW_ADAPTER_URL +\(required\)$/m);
    expect(sidecar!.stdout).toMatch(/^ {2}--agent-id +AGW_AGENT_ID +\(required\)$/m);
    expect(emergency!.stdout).toMatch(/^ {2}--agent-id +AGW_AGENT_ID +\(required\)$/m);
  });
});
