/**
 * `agent-gateway explain ID [--url URL] [--token-file F] [--json]`: why a message did or did
 * not arrive (docs/reference/adapter-api.md, GET /v1/messages/{message_id}/journey). ID is a
 * message_id, or the idempotency_key of one of the agent's own sends. `--url` is the agent's
 * sidecar (AGW_SIDECAR_URL, default http://127.0.0.1:7070), or the adapter with the agent's
 * token in `--token-file`. Prints, per recipient, the sentence that says where the copy is, then
 * its timeline; `--json` prints the answer as it came. Exit 0; 1 for an unknown message or a
 * refusal (one line on stderr); 2 for a bad setting.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { type Journey, type RecipientJourney, renderRequest } from '../protocol/agent-api.js';
import { type ArgSpec, takeArgs } from './args.js';
import type { CommandHelp } from './help.js';
import { EXPLAIN_SETTINGS, readSettings, SettingsError } from './settings.js';

const Schema = z.strictObject({
  url: z
    .string()
    .regex(
      /^https?:\/\/[^/]+/,
      'must be an http:// or https:// URL, such as http://127.0.0.1:7070',
    ),
  tokenFile: z.string().min(1).optional(),
});

/** Its flags (arguments, not settings): what it parses, and what --help lists. */
export const EXPLAIN_ARGS = {
  json: { flag: '--json', doc: 'print the answer as it came (JSON), not the sentences' },
} as const satisfies Record<string, ArgSpec>;

export const HELP: CommandHelp = {
  positionals: 'ID',
  about:
    'ID is a message_id, or the idempotency_key of one of your own sends. Asks the sidecar at ' +
    "--url, or the adapter with the agent's token in --token-file, and prints per recipient " +
    'the sentence that says where its copy is, then its timeline. Exit 0; 1 for an unknown ' +
    'message or a refusal; 2 for a bad setting.',
  args: EXPLAIN_ARGS,
  settings: EXPLAIN_SETTINGS,
  schema: Schema,
};

export async function runExplain(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const { args, rest } = takeArgs(argv, EXPLAIN_ARGS);
  const json = args.json === true;
  const { settings, positionals } = readSettings(EXPLAIN_SETTINGS, Schema, rest, env);
  if (positionals.length !== 1) {
    throw new SettingsError('ID: give one message_id (or the idempotency_key of a send of yours)');
  }
  let token: string | undefined;
  if (settings.tokenFile !== undefined) {
    try {
      token = readFileSync(settings.tokenFile, 'utf8').trim();
    } catch (err) {
      throw new SettingsError(
        `--token-file: cannot read ${settings.tokenFile} (${(err as Error).message})`,
      );
    }
  }
  const { path } = renderRequest('journey', { message_id: positionals[0]! });
  const url = settings.url.replace(/\/+$/, '') + path;
  let res: Response;
  try {
    res = await fetch(url, {
      headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(15_000),
    });
  } catch (err) {
    process.stderr.write(
      `agent-gateway explain: no answer from ${settings.url} (${(err as Error).message})\n`,
    );
    return 1;
  }
  const text = await res.text();
  if (!res.ok) {
    let why = text.slice(0, 300);
    try {
      const e = JSON.parse(text) as { error?: string; message?: string };
      why = `${e.error}: ${e.message}`;
    } catch {}
    process.stderr.write(`agent-gateway explain: ${res.status} ${why}\n`);
    return 1;
  }
  process.stdout.write(json ? `${text}\n` : describe(JSON.parse(text) as Journey));
  return 0;
}

/** The journey as a person reads it: per recipient, the sentence, then the timeline. */
export function describe(j: Journey): string {
  if (!('message' in j)) return `${j.idempotency_key}: ${j.cause}\n  ${j.explanation}\n`;
  const m = j.message;
  const head =
    m === null
      ? `message (its stored bytes fail their checksum), accepted ${j.accepted_at}\n`
      : `message ${m.message_id}: ${m.kind} from ${m.sender} to ${m.to} (#${m.channel_sequence_id} of ${m.channel}), accepted ${j.accepted_at}\n`;
  return head + j.recipients.map(recipient).join('');
}

function recipient(r: RecipientJourney): string {
  const lines = [`\n${r.agent}: ${r.cause}\n  ${r.explanation}\n`];
  for (const e of r.events) {
    const fields = Object.entries(e.detail ?? {}).filter(([, v]) => v !== null);
    const detail = fields
      .map(([k, v]) => `  ${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
      .join('');
    const attempt = e.attempt > 0 ? `  attempt ${e.attempt}` : '';
    lines.push(`  ${e.at}  ${e.event}${attempt}${detail}\n`);
  }
  return lines.join('');
}
