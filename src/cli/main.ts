#!/usr/bin/env node
/**
 * The agent-gateway command: one program, a subcommand per role
 * (docs/reference/configuration.md). Each command's module is loaded only when it runs (or its
 * --help is asked for: rendered from the declarations it parses with, help.ts): a
 * sidecar does not load the adapter's store and metrics, and a probe (`wait-ready`, run by the
 * kubelet every few seconds) loads almost nothing.
 */
import { SettingsError } from '../settings.js';
import { type CommandHelp, renderCommands, renderHelp } from './help.js';

type Run = (argv: readonly string[], env: NodeJS.ProcessEnv) => Promise<number>;

interface Command {
  /** One line: the list of commands, and the head of the command's --help. */
  readonly summary: string;
  /** Its module, loaded only when it runs or its --help is asked for. */
  readonly load: () => Promise<{ run: Run; help: CommandHelp }>;
}

/** Every command, in the order the usage lists them (CONTRACT.md's). */
const COMMANDS: Record<string, Command> = {
  adapter: {
    summary: 'run the central adapter: durable store, routing, delivery',
    load: async () => {
      const m = await import('./adapter.js');
      return { run: m.runAdapter, help: m.HELP };
    },
  },
  sidecar: {
    summary: "run the per-agent gateway sidecar, on localhost in the agent's pod",
    load: async () => {
      const m = await import('./sidecar.js');
      return { run: m.runSidecar, help: m.HELP };
    },
  },
  'wait-ready': {
    summary: 'exit 0 once a URL answers 2xx, 1 at a timeout: for init containers and probes',
    load: async () => {
      const m = await import('./wait-ready.js');
      return { run: m.runWaitReady, help: m.HELP };
    },
  },
  emergency: {
    summary: 'write one priority=CRIT journald entry, bypassing the adapter',
    load: async () => {
      const m = await import('./emergency.js');
      return { run: m.runEmergency, help: m.HELP };
    },
  },
  watch: {
    summary: "follow journald for the gateway's CRIT entries, one JSON line each",
    load: async () => {
      const m = await import('./watch.js');
      return { run: m.runWatch, help: m.HELP };
    },
  },
  mcp: {
    summary: "serve the gateway's MCP tools on stdio, over the local sidecar",
    load: async () => {
      const m = await import('./mcp.js');
      return { run: m.runMcp, help: m.HELP };
    },
  },
  explain: {
    summary: 'say why a message did or did not arrive: its journey, per recipient',
    load: async () => {
      const m = await import('./explain.js');
      return { run: m.runExplain, help: m.HELP };
    },
  },
  'migrate-store': {
    summary: "copy a stopped SQLite adapter's store into PostgreSQL",
    load: async () => {
      const m = await import('./migrate-store.js');
      return { run: m.runMigrateStore, help: m.HELP };
    },
  },
  audit: {
    summary: "check the audit log's hash chain (audit verify)",
    load: async () => {
      const m = await import('./audit.js');
      return { run: m.runAudit, help: m.HELP };
    },
  },
};

const USAGE = renderCommands(COMMANDS);
const isHelp = (arg: string | undefined) => arg === '--help' || arg === '-h';

async function main(argv: readonly string[]): Promise<number> {
  let [command, ...rest] = argv;
  // `agent-gateway help watch` is `agent-gateway watch --help`
  if (command === 'help' && rest.length > 0) [command, rest] = [rest[0], ['--help']];
  if (command === undefined || isHelp(command) || command === 'help') {
    process.stdout.write(USAGE);
    return command === undefined ? 2 : 0;
  }
  // own keys only: `agent-gateway constructor` found Object and crashed with a stack
  const entry = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (entry === undefined) {
    process.stderr.write(`agent-gateway: unknown command "${command}"\n${USAGE}`);
    return 2;
  }
  const { run, help } = await entry.load();
  // before any setting is read: --help answers whatever the environment holds
  if (rest.some(isHelp)) {
    process.stdout.write(renderHelp(command, entry.summary, help));
    return 0;
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
