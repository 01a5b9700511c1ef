/**
 * `agent-gateway wait-ready --url URL [--timeout S] [--insecure]`: exits 0 once URL answers
 * 2xx, 1 at the timeout (default 60 s). For init containers, entrypoints and Podman: `wait-ready
 * --url http://127.0.0.1:7070/readyz && exec agent`. `--insecure` takes an https:// URL's
 * certificate unchecked, as the kubelet's HTTPS probes do: for a process probing its own
 * loopback port (the adapter's image HEALTHCHECK when it serves TLS), where a check proves
 * nothing.
 */
import { SettingsError } from '../settings.js';
import { type ArgSpec, flagList, takeArgs } from './args.js';
import type { CommandHelp } from './help.js';

/** Its flags: what it parses, and what --help lists. */
export const WAIT_READY_ARGS = {
  url: {
    flag: '--url',
    value: 'URL',
    required: true,
    doc: 'the http:// or https:// URL to ask (a /readyz, a /healthz)',
  },
  timeout: { flag: '--timeout', value: 'S', default: '60', doc: 'seconds to keep asking' },
  insecure: {
    flag: '--insecure',
    doc: "take an https:// URL's certificate unchecked (a process probing its own loopback port)",
  },
} as const satisfies Record<string, ArgSpec>;

export const HELP: CommandHelp = {
  about:
    'Asks every 0.1 s, backing off to 1 s, each try bounded by 2 s; at the timeout one line ' +
    'on stderr, exit 1; exit 2 for a bad flag. In an entrypoint: `agent-gateway wait-ready ' +
    '--url http://127.0.0.1:7070/readyz && exec agent`.',
  args: WAIT_READY_ARGS,
};

export async function runWaitReady(argv: readonly string[]): Promise<number> {
  const { args, rest } = takeArgs(argv, WAIT_READY_ARGS);
  if (rest.length > 0)
    throw new SettingsError(
      `${rest[0]}: unknown argument (wait-ready takes ${flagList(WAIT_READY_ARGS)})`,
    );
  const { url, insecure = false } = args;
  const timeoutS = Number(args.timeout ?? WAIT_READY_ARGS.timeout.default);
  if (!Number.isFinite(timeoutS) || timeoutS <= 0)
    throw new SettingsError('--timeout: must be a positive number of seconds');
  if (url === undefined || !/^https?:\/\//.test(url))
    throw new SettingsError('--url: needs an http:// or https:// URL');
  // undici's own fetch with its Agent (loaded only for --insecure: a probe starts fast)
  const { Agent, fetch: undiciFetch } = insecure
    ? await import('undici')
    : { Agent: undefined, fetch: undefined };
  const dispatcher =
    Agent === undefined ? undefined : new Agent({ connect: { rejectUnauthorized: false } });
  const get = (u: string, signal: AbortSignal) =>
    undiciFetch === undefined ? fetch(u, { signal }) : undiciFetch(u, { signal, dispatcher });
  const deadline = Date.now() + timeoutS * 1000;
  let delay = 100;
  for (;;) {
    try {
      const res = await get(url, AbortSignal.timeout(2000));
      await res.arrayBuffer();
      if (res.ok) return 0;
    } catch {
      // not up yet
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      process.stderr.write(
        `agent-gateway wait-ready: ${url} did not answer 2xx within ${timeoutS} s\n`,
      );
      return 1;
    }
    await new Promise((r) => setTimeout(r, Math.min(delay, left)));
    delay = Math.min(delay * 2, 1000);
  }
}
