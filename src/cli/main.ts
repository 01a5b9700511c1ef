#!/usr/bin/env node
/**
 * The agent-gateway command: one program, a subcommand per role
 * (docs/reference/configuration.md). Each command's module is loaded only when it runs: a
 * sidecar does not load the adapter's store and metrics, and a probe (`wait-ready`, run by the
 * kubelet every few seconds) loads almost nothing.
 */
import { SettingsError } from '../settings.js';

const USAGE = `usage: agent-gateway <command> [flags]

commands:
  adapter     run the central adapter (AGW_TOPOLOGY or --topology is required)
  sidecar     run the per-agent gateway sidecar (AGW_ADAPTER_URL, AGW_AGENT_ID, AGW_AGENT_TOKEN)
  wait-ready  --url URL [--timeout S]: exit 0 once URL answers 2xx, 1 at the timeout
  emergency   --reason R MESSAGE: one priority=CRIT journald entry, bypassing the adapter
  watch       [--namespace NS] [--since T] [--forward URL]: follow the gateway's CRIT entries
  mcp         the MCP tools on stdio, over the local sidecar (AGW_SIDECAR_URL)
  explain     ID [--url URL] [--token-file F] [--json]: why a message did or did not arrive
  migrate-store --from FILE --to URL: copy a stopped SQLite adapter's store into PostgreSQL
  audit       verify [--db FILE|URL]: check the audit log's hash chain (exit 1: broken)

Every setting is an AGW_* variable or the flag spelled from it; see README.md.`;

const COMMANDS: Record<
  string,
  (argv: readonly string[], env: NodeJS.ProcessEnv) => Promise<number>
> = {
  adapter: async (argv, env) => (await import('./adapter.js')).runAdapter(argv, env),
  audit: async (argv, env) => (await import('./audit.js')).runAudit(argv, env),
  emergency: async (argv, env) => (await import('./emergency.js')).runEmergency(argv, env),
  explain: async (argv, env) => (await import('./explain.js')).runExplain(argv, env),
  mcp: async (argv, env) => (await import('./mcp.js')).runMcp(argv, env),
  'migrate-store': async (argv) => (await import('./migrate-store.js')).runMigrateStore(argv),
  sidecar: async (argv, env) => (await import('./sidecar.js')).runSidecar(argv, env),
  'wait-ready': async (argv) => (await import('./wait-ready.js')).runWaitReady(argv),
  watch: async (argv, env) => (await import('./watch.js')).runWatch(argv, env),
};

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return command === undefined ? 2 : 0;
  }
  // own keys only: `agent-gateway constructor` found Object and crashed with a stack
  const run = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (run === undefined) {
    process.stderr.write(`agent-gateway: unknown command "${command}"\n${USAGE}\n`);
    return 2;
  }
  try {
    return await run(rest, process.env);
  } catch (err) {
    // a bad setting or topology file (TopologyError is one): one line, exit 2
    if (err instanceof SettingsError) {
      process.stderr.write(`agent-gateway ${command}: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`agent-gateway: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exitCode = 1;
  },
);
