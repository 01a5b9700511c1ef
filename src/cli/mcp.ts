/**
 * `agent-gateway mcp`: the gateway's MCP tools on stdio, for agent runtimes that start their
 * tools as a command. The tools call the local sidecar's HTTP API (AGW_SIDECAR_URL, default
 * http://127.0.0.1:7070, its only setting); the sidecar's `POST /mcp` offers the same tools.
 * stdout carries MCP messages only: everything else goes to stderr. Exits 0 when stdin closes
 * (the runtime is done with it) or on SIGTERM / SIGINT.
 *
 * Both protocol eras (docs/reference/mcp.md, "Protocol versions"): the SDK's `serveStdio` takes
 * the era from the connection's first message (`initialize`: the 2025 era; `server/discover`, or
 * a request whose `_meta` names 2026-07-28: that one) and serves the connection in it.
 */
import {
  isJSONRPCRequest,
  type JSONRPCMessage,
  type RequestId,
  type Transport,
} from '@modelcontextprotocol/server';
import { StdioServerTransport, serveStdio } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';
import { agentApiOverHttp } from '../sidecar/agent-api-over-http.js';
import { resourceNotFoundOf2025 } from '../sidecar/mcp-resources.js';
import { mcpServer, ofEra2025, refuseInvalidParams } from '../sidecar/mcp-tools.js';
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
  const say = (line: string) => process.stderr.write(`agent-gateway mcp: ${line}\n`);
  const transport = new GatewayStdio();
  const done = new Promise<void>((resolve) => {
    void transport.closed.then(resolve);
    process.stdin.once('end', resolve);
    process.stdin.once('close', resolve);
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  const served = serveStdio(
    () =>
      mcpServer(ops, {
        onError: (err, tool) =>
          say(`the tool ${tool} failed: ${(err as Error)?.stack ?? String(err)}`),
      }),
    { transport, onerror: (err) => say(err.message) },
  );
  say(`serving the gateway's tools on stdio for the sidecar at ${ops.url}`);
  await done;
  await served.close();
  await ops.close();
  return 0;
}

/**
 * The SDK's stdio transport, and what this server answers its own way on it, as the sidecar's
 * /mcp does (mcp-endpoint.ts): params that do not fit their method are -32602, never the SDK's
 * -32603 (refuseInvalidParams), and a missing resource asked for by a request of the 2025 era
 * (no protocol version in its `_meta`) is that era's -32002 (resourceNotFoundOf2025).
 */
class GatewayStdio implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  /** Resolves when stdin has ended or the transport was closed. */
  readonly closed: Promise<void>;
  private readonly wire = new StdioServerTransport();
  /** The ids of the requests of the 2025 era not answered yet. */
  private readonly era2025 = new Set<RequestId>();

  constructor() {
    this.closed = new Promise((resolve) => {
      this.wire.onclose = () => {
        this.onclose?.();
        resolve();
      };
    });
  }

  start(): Promise<void> {
    this.wire.onerror = (error) => this.onerror?.(error);
    this.wire.onmessage = (message) => {
      const refused = refuseInvalidParams(message);
      if (refused !== undefined) {
        for (const answer of [refused].flat()) void this.wire.send(answer);
        return;
      }
      if (isJSONRPCRequest(message) && ofEra2025(message)) {
        this.era2025.add(message.id);
      }
      this.onmessage?.(message);
    };
    return this.wire.start();
  }

  send(message: JSONRPCMessage): Promise<void> {
    const answers =
      !('method' in message) && message.id !== undefined && this.era2025.delete(message.id);
    return this.wire.send(answers ? resourceNotFoundOf2025(message) : message);
  }

  close(): Promise<void> {
    return this.wire.close();
  }
}
