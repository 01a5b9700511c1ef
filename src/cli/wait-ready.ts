/**
 * `agent-gateway wait-ready --url URL [--timeout S] [--insecure]`: exits 0 once URL answers
 * 2xx, 1 at the timeout (default 60 s). For init containers, entrypoints and Podman: `wait-ready
 * --url http://127.0.0.1:7070/readyz && exec agent`. `--insecure` takes an https:// URL's
 * certificate unchecked, as the kubelet's HTTPS probes do: for a process probing its own
 * loopback port (the adapter's image HEALTHCHECK when it serves TLS), where a check proves
 * nothing.
 */
import { SettingsError } from '../settings.js';

export async function runWaitReady(argv: readonly string[]): Promise<number> {
  let url: string | undefined;
  let timeoutS = 60;
  let insecure = false;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--insecure') {
      insecure = true;
      continue;
    }
    const m = /^--(url|timeout)(?:=(.*))?$/.exec(argv[i]!);
    if (m === null)
      throw new SettingsError(
        `${argv[i]}: unknown argument (wait-ready takes --url, --timeout and --insecure)`,
      );
    const value = m[2] ?? argv[++i];
    if (value === undefined) throw new SettingsError(`--${m[1]}: needs a value`);
    if (m[1] === 'url') url = value;
    else {
      timeoutS = Number(value);
      if (!Number.isFinite(timeoutS) || timeoutS <= 0)
        throw new SettingsError('--timeout: must be a positive number of seconds');
    }
  }
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
