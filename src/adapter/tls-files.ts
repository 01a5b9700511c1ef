/**
 * The adapter's TLS files (AGW_TLS_CERT, AGW_TLS_KEY, AGW_TLS_CLIENT_CA): read and checked as a
 * set (a key that is not the certificate's is refused, as is a file that is no PEM), and taken
 * again when they change (cert-manager renews them) through the server's setSecureContext:
 * connections open keep the context they began with, new ones get the new one; none is dropped.
 */
import { readFileSync } from 'node:fs';
import { createSecureContext, type Server as TlsServer } from 'node:tls';
import type { TlsOptions } from '../protocol/http-server.js';
import { pemCertificates } from '../protocol/pem.js';
import { SettingsError } from '../settings.js';

export interface TlsPaths {
  readonly cert: string;
  readonly key: string;
  /** Client certificates must chain to this CA (mTLS). */
  readonly clientCa?: string;
}

/** Reads and checks the set; a SettingsError naming the variable and the problem otherwise. */
export function loadTls(paths: TlsPaths): TlsOptions {
  const read = (variable: string, path: string): string => {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new SettingsError(`${variable}: ${path}: cannot read: ${(err as Error).message}`);
    }
    if (!text.includes('-----BEGIN '))
      throw new SettingsError(`${variable}: ${path}: not a PEM file`);
    return text;
  };
  const cert = read('AGW_TLS_CERT', paths.cert);
  const key = read('AGW_TLS_KEY', paths.key);
  const ca = paths.clientCa === undefined ? undefined : read('AGW_TLS_CLIENT_CA', paths.clientCa);
  try {
    createSecureContext({ cert, key });
  } catch (err) {
    throw new SettingsError(
      `AGW_TLS_CERT/AGW_TLS_KEY: ${paths.cert} and ${paths.key} cannot be used together: ${tlsProblem(err)}`,
    );
  }
  if (ca !== undefined) {
    // every certificate parsed: createSecureContext takes a truncated block or a file of keys
    // without a word, and then verifies no client (every agent locked out)
    try {
      pemCertificates(ca);
      createSecureContext({ ca });
    } catch (err) {
      throw new SettingsError(`AGW_TLS_CLIENT_CA: ${paths.clientCa}: ${tlsProblem(err)}`);
    }
  }
  return { cert, key, ...(ca === undefined ? {} : { ca }) };
}

/** The files' paths, for watching them. */
export function tlsFiles(paths: TlsPaths): string[] {
  return [paths.cert, paths.key, ...(paths.clientCa === undefined ? [] : [paths.clientCa])];
}

/**
 * Takes the files again into a listening server. Throws (a SettingsError naming the problem)
 * when the new set cannot be used; the server keeps the context it has.
 */
export function reloadTls(server: TlsServer, paths: TlsPaths): void {
  const tls = loadTls(paths);
  server.setSecureContext({ cert: tls.cert, key: tls.key, ...(tls.ca ? { ca: tls.ca } : {}) });
}

function tlsProblem(err: unknown): string {
  const e = err as { message?: string; code?: string };
  return e.message ?? String(err);
}
