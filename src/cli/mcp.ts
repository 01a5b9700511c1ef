/**
 * `agent-gateway mcp`: the gateway's MCP tools on stdio, for agent runtimes that start their
 * tools as a command. The tools call the local sidecar's HTTP API (AGW_SIDECAR_URL, default
 * http://127.0.0.1:7070, its only setting); the sidecar's `POST /mcp` offers the same tools.
 * stdout carries MCP messages only: everything else goes to stderr. Exits 0 when stdin closes
 * (the runtime is done with it) or on SIGTERM / SIGINT.
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import { agentApiOverHttp } from '../sidecar/agent-api-over-http.js';
import { mcpServer, refuseInvalidParams } from '../sidecar/mcp-tools.js';
import type { CommandHelp } from './help.js';
import { MCP_SETTINGS, readSettings, SettingsError } from './settings.js';

const Schema = z.strictObject({
  sidecarUrl: z
    .string()
    .regex(
      /^https?:\/\/[^/]+/,
      'must be an http:// or https:// URL, such as http://127.0.0.1:7070',
    ),
});

export const HELP: CommandHelp = {
  about:
    "The same tools as the sidecar's POST /mcp, each a call to the sidecar's HTTP API; for " +
    'agent runtimes that start their tools as a command (`claude mcp add agent-gateway -- ' +
    'agent-gateway mcp`). stdout carries MCP messages only; everything else goes to stderr. ' +
    'Exit 0 when stdin closes or on SIGTERM or SIGINT, 2 for a bad setting.',
  settings: MCP_SETTINGS,
  schema: Schema,
};

export async function runMcp(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const { settings, positionals } = readSettings(MCP_SETTINGS, Schema, argv, env);
  if (positionals.length > 0) throw new SettingsError(`unexpected argument "${positionals[0]}"`);
  const ops = agentApiOverHttp(settings.sidecarUrl);
  const server = mcpServer(ops, {
    onError: (err, tool) =>
      process.stderr.write(
        `agent-gateway mcp: the tool ${tool} failed: ${(err as Error)?.stack ?? String(err)}\n`,
      ),
  });
  const done = new Promise<void>((resolve) => {
    server.onclose = resolve;
    process.stdin.once('end', resolve);
    process.stdin.once('close', resolve);
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  const transport = new StdioServerTransport();
  await server.connect(transport);
  // as the sidecar's /mcp: params that do not fit their method are -32602, not the SDK's -32603
  const handle = transport.onmessage;
  transport.onmessage = (message) => {
    const refused = refuseInvalidParams(message);
    if (refused === undefined) handle?.(message);
    else for (const answer of [refused].flat()) void transport.send(answer);
  };
  process.stderr.write(
    `agent-gateway mcp: serving the gateway's tools on stdio for the sidecar at ${ops.url}\n`,
  );
  await done;
  await server.close();
  await ops.close();
  return 0;
}
