#!/usr/bin/env node
/**
 * The agent-gateway command: one program, a subcommand per role (CONTRACT.md).
 */
import { TopologyError } from '../adapter/topology.js';
import { runAdapter } from './adapter.js';
import { runEmergency } from './emergency.js';
import { SettingsError } from './settings.js';
import { runSidecar } from './sidecar.js';
import { runWaitReady } from './wait-ready.js';
import { runWatch } from './watch.js';

const USAGE = `usage: agent-gateway <command> [flags]

commands:
  adapter     run the central adapter (AGW_TOPOLOGY or --topology is required)
  sidecar     run the per-agent gateway sidecar (AGW_ADAPTER_URL, AGW_AGENT_ID, AGW_AGENT_TOKEN)
  wait-ready  --url URL [--timeout S]: exit 0 once URL answers 2xx, 1 at the timeout
  emergency   --reason R MESSAGE: one priority=CRIT journald entry, bypassing the adapter
  watch       [--namespace NS] [--since T] [--forward URL]: follow the gateway's CRIT entries

Every setting is an AGW_* variable or the flag spelled from it; see README.md.`;

const COMMANDS: Record<
  string,
  (argv: readonly string[], env: NodeJS.ProcessEnv) => Promise<number>
> = {
  adapter: runAdapter,
  emergency: runEmergency,
  sidecar: runSidecar,
  'wait-ready': (argv) => runWaitReady(argv),
  watch: runWatch,
};

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return command === undefined ? 2 : 0;
  }
  const run = COMMANDS[command];
  if (run === undefined) {
    process.stderr.write(`agent-gateway: unknown command "${command}"\n${USAGE}\n`);
    return 2;
  }
  try {
    return await run(rest, process.env);
  } catch (err) {
    if (err instanceof SettingsError || err instanceof TopologyError) {
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
