/**
 * The files the sidecar shows the adapter who it is with, re-read when they change (CONTRACT.md,
 * "Security of a deployment"): AGW_AGENT_TOKEN_FILE (a projected service-account token, rotated
 * hourly by the kubelet) and the TLS set, AGW_ADAPTER_CA, AGW_TLS_CLIENT_CERT and
 * AGW_TLS_CLIENT_KEY (renewed by cert-manager). Watched with protocol/watched-files.ts (stat
 * polling, which sees a Secret's `..data` swap).
 *
 * A change that loads is taken: the token is in every call made after it, the TLS set in every
 * connection opened after it, while calls in flight finish on what they started with
 * (AdapterClient.useTls). One that does not load (an empty or unreadable token file, a file
 * that is not PEM, a key that is not the certificate's) is refused with one warning naming the
 * file and the problem, and what was loaded before stays in use; the next change is tried
 * again, so a pair written one file at a time is taken once both have landed.
 *
 * A rotated token is the same agent's: the start check (GET /v1/me, server.ts) is not made
 * again. Nothing here reads the token: a JWT is the adapter's to verify.
 */
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { type FileWatch, type WatchOptions, watchFiles } from '../protocol/watched-files.js';
import type { AdapterClient } from './adapter-client.js';
import {
  type AdapterTlsFiles,
  type LoadedTls,
  loadAdapterTls,
  TlsFileError,
} from './adapter-tls.js';

export interface CredentialFilesOptions {
  /** Whose credentials change. */
  readonly client: Pick<AdapterClient, 'useToken' | 'useTls'>;
  readonly logger: Pick<Logger, 'info' | 'warn'>;
  /** AGW_AGENT_TOKEN_FILE and the token read from it at start; none: the token is fixed. */
  readonly token?: { readonly file: string; readonly value: string };
  /** The TLS files and the set loaded from them at start; none: nothing to re-read. */
  readonly tls?: { readonly files: AdapterTlsFiles; readonly loaded: LoadedTls };
  /** How often the files are looked at (default every second, 100 ms to settle). */
  readonly watch?: WatchOptions;
}

export class CredentialFiles {
  readonly #o: CredentialFilesOptions;
  readonly #watches: FileWatch[] = [];
  #token: string | undefined;
  #tls: LoadedTls | undefined;

  constructor(opts: CredentialFilesOptions) {
    this.#o = opts;
    this.#token = opts.token?.value;
    this.#tls = opts.tls?.loaded;
    if (opts.token !== undefined)
      this.#watches.push(watchFiles([opts.token.file], () => this.reloadToken(), opts.watch));
    if (opts.tls !== undefined) {
      const { ca, cert, key } = opts.tls.files;
      const paths = [ca, cert, key].filter((p) => p !== undefined);
      this.#watches.push(watchFiles(paths, () => this.reloadTls(), opts.watch));
    }
  }

  /** Reads the token file again; true when a new token was taken. */
  reloadToken(): boolean {
    const file = this.#o.token?.file;
    if (file === undefined) return false;
    let token: string;
    try {
      token = readFileSync(file, 'utf8').trim();
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      return this.#refuseToken(file, `cannot be read (${e.code ?? e.message})`);
    }
    if (token === '') return this.#refuseToken(file, 'is empty');
    if (token === this.#token) return false;
    this.#token = token;
    this.#o.client.useToken(token);
    this.#o.logger.info(
      { file },
      `AGW_AGENT_TOKEN_FILE ${file}: took the new token; calls to the adapter carry it from now on`,
    );
    return true;
  }

  /** Loads the TLS set again; true when a new one was taken. */
  reloadTls(): boolean {
    const files = this.#o.tls?.files;
    if (files === undefined) return false;
    let loaded: LoadedTls;
    try {
      loaded = loadAdapterTls(files);
    } catch (err) {
      // (from a timer: nothing may escape, an unforeseen failure is a refusal too)
      const line = err instanceof TlsFileError ? err.line : `TLS files: ${(err as Error).message}`;
      this.#o.logger.warn(
        { file: err instanceof TlsFileError ? err.path : undefined },
        `${line}; refused, the TLS files loaded before stay in use`,
      );
      return false;
    }
    if (loaded.digest === this.#tls?.digest) return false;
    this.#tls = loaded;
    void this.#o.client.useTls(loaded.options);
    const client =
      loaded.client === undefined
        ? ''
        : ` (client certificate serial ${loaded.client.serial}, valid to ${loaded.client.validTo})`;
    this.#o.logger.info(
      { files, serial: loaded.client?.serial },
      `took the new TLS files for the adapter${client}: new connections use them, calls in flight finish on the old ones`,
    );
    return true;
  }

  close(): void {
    for (const w of this.#watches) w.close();
  }

  #refuseToken(file: string, problem: string): false {
    this.#o.logger.warn(
      { file },
      `AGW_AGENT_TOKEN_FILE ${file}: ${problem}; refused, the token read before stays in use`,
    );
    return false;
  }
}
