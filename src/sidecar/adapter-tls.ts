/**
 * The TLS files the sidecar reaches an `https://` adapter with (CONTRACT.md, "Security of a
 * deployment"): AGW_ADAPTER_CA, certificates trusted beside the system's roots, and
 * AGW_TLS_CLIENT_CERT with AGW_TLS_CLIENT_KEY, the agent's client identity for mTLS. Loaded
 * whole and checked here, once at start (a bad file is a bad setting: one line, exit 2) and at
 * each change (credential-files.ts: a bad file is refused, the set before stays). Also what a
 * failed handshake means, in a sentence an operator can act on (tlsProblem).
 */
import { createHash, createPrivateKey, type KeyObject, type X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls';
import { pemCertificates } from '../protocol/pem.js';

/** The files, each a path (none set: the system's roots, no client certificate). */
export interface AdapterTlsFiles {
  /** AGW_ADAPTER_CA: one or more PEM certificates, trusted in addition to the system's. */
  readonly ca?: string | undefined;
  /** AGW_TLS_CLIENT_CERT: the client certificate (PEM), its chain after it if any. */
  readonly cert?: string | undefined;
  /** AGW_TLS_CLIENT_KEY: its private key (PEM, unencrypted). */
  readonly key?: string | undefined;
}

/** The variable of each file, for the lines that name one. */
export const TLS_FILE_ENV = {
  ca: 'AGW_ADAPTER_CA',
  cert: 'AGW_TLS_CLIENT_CERT',
  key: 'AGW_TLS_CLIENT_KEY',
} as const satisfies Record<keyof AdapterTlsFiles, string>;

/**
 * What new connections to the adapter are made with (undici's `connect` options, passed to
 * tls.connect): one context built from the files, shared by every connection. Given the files'
 * text instead, tls.connect would build a context per connection, parsing the system's 144 roots
 * each time: 27 ms of CPU per connection (1.8 ms without a `ca`), measured on Node 20.
 */
export interface AdapterTls {
  readonly secureContext: SecureContext;
}

export interface LoadedTls {
  readonly options: AdapterTls;
  /** The client certificate's serial number (hex) and end of validity, when there is one. */
  readonly client?: { readonly serial: string; readonly validTo: string };
  /** SHA-256 of the three files' text: a change of time alone (a touch) is not a new set. */
  readonly digest: string;
}

/** A file of the set that cannot be used: which one, and why, in words. */
export class TlsFileError extends Error {
  override name = 'TlsFileError';
  constructor(
    readonly file: keyof AdapterTlsFiles,
    readonly path: string,
    problem: string,
  ) {
    super(problem);
  }

  /** `AGW_TLS_CLIENT_KEY /etc/agw/tls.key: does not match ...`: the log line's start. */
  get line(): string {
    return `${TLS_FILE_ENV[this.file]} ${this.path}: ${this.message}`;
  }
}

const KEY_BLOCK = /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----/;

/**
 * Reads and checks the set: every file readable and PEM, every certificate parseable, the key
 * the certificate's, and OpenSSL willing to build a context of them. Throws TlsFileError
 * naming the first file that fails. A certificate without its key (or the reverse) is the
 * caller's to refuse: here the two are checked together when both are given.
 */
export function loadAdapterTls(files: AdapterTlsFiles): LoadedTls {
  const texts: string[] = [];
  let ca: string[] | undefined;
  if (files.ca !== undefined) {
    const text = read('ca', files.ca);
    certificates('ca', files.ca, text);
    texts.push(text);
    // in addition to the system's: an adapter behind a public CA's certificate still works
    ca = [...rootCertificates, text];
  }
  let cert: string | undefined;
  let key: string | undefined;
  let leaf: X509Certificate | undefined;
  if (files.cert !== undefined) {
    cert = read('cert', files.cert);
    leaf = certificates('cert', files.cert, cert)[0]!;
    texts.push(cert);
  }
  if (files.key !== undefined) {
    key = read('key', files.key);
    const keyObject = privateKey(files.key, key);
    if (leaf !== undefined && !leaf.checkPrivateKey(keyObject))
      throw new TlsFileError(
        'key',
        files.key,
        `is not the key of the certificate in AGW_TLS_CLIENT_CERT (${files.cert})`,
      );
    texts.push(key);
  }
  let secureContext: SecureContext;
  try {
    secureContext = createSecureContext({
      ...(ca === undefined ? {} : { ca }),
      ...(cert === undefined ? {} : { cert }),
      ...(key === undefined ? {} : { key }),
    });
  } catch (err) {
    const file = files.cert !== undefined ? 'cert' : 'ca';
    throw new TlsFileError(file, files[file]!, `is refused by OpenSSL: ${(err as Error).message}`);
  }
  const digest = createHash('sha256').update(texts.join('\0')).digest('hex');
  return {
    options: { secureContext },
    ...(leaf === undefined ? {} : { client: { serial: leaf.serialNumber, validTo: leaf.validTo } }),
    digest,
  };
}

function read(file: keyof AdapterTlsFiles, path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new TlsFileError(file, path, `cannot be read (${e.code ?? e.message})`);
  }
}

function certificates(file: 'ca' | 'cert', path: string, text: string): X509Certificate[] {
  try {
    return pemCertificates(text);
  } catch (err) {
    throw new TlsFileError(file, path, (err as Error).message);
  }
}

function privateKey(path: string, text: string): KeyObject {
  if (!KEY_BLOCK.test(text))
    throw new TlsFileError('key', path, 'holds no PEM private key (-----BEGIN PRIVATE KEY-----)');
  try {
    return createPrivateKey(text);
  } catch (err) {
    throw new TlsFileError(
      'key',
      path,
      `cannot be read as a private key (${(err as Error).message}); an encrypted key is not taken`,
    );
  }
}

/** OpenSSL's verdicts on the adapter's certificate that AGW_ADAPTER_CA answers. */
const UNTRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'INVALID_CA',
]);

/**
 * What a failed call's error says about TLS, as a sentence that names the setting to look at;
 * undefined when it is no TLS failure (refused, reset, a timeout). A client certificate the
 * adapter refuses often shows only as a connection it closed (TLS 1.3 checks it after the
 * client's side of the handshake is done), so that case is told when OpenSSL reports an alert.
 */
export function tlsProblem(err: unknown): { code: string; sentence: string } | undefined {
  const e = (err as { code?: unknown; cause?: { code?: unknown } } | null) ?? {};
  const code = typeof e.code === 'string' ? e.code : e.cause?.code;
  if (typeof code !== 'string') return undefined;
  const what = `${(err as Error).message} (${code})`;
  if (UNTRUSTED.has(code))
    return {
      code,
      sentence: `its certificate is not signed by a CA the sidecar trusts: ${what}; AGW_ADAPTER_CA must name the CA that signed it`,
    };
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID')
    return { code, sentence: `its certificate is not valid now: ${what}` };
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID')
    return {
      code,
      sentence: `its certificate does not name the host of AGW_ADAPTER_URL: ${what}`,
    };
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER')
    return {
      code,
      sentence: `it does not speak TLS on that port (an http:// adapter at an https:// AGW_ADAPTER_URL?): ${what}`,
    };
  if (/^ERR_SSL_.*ALERT/.test(code))
    return {
      code,
      sentence: `it refused the handshake: ${what}; check AGW_TLS_CLIENT_CERT and AGW_TLS_CLIENT_KEY against the CA it requires`,
    };
  if (/^ERR_(SSL|TLS)_|CERT/.test(code))
    return { code, sentence: `the TLS handshake failed: ${what}` };
  return undefined;
}
