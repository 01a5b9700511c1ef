/**
 * AGW_ADAPTER_CA, AGW_TLS_CLIENT_CERT and AGW_TLS_CLIENT_KEY at start: a file that cannot be
 * used stops the sidecar with one line naming the variable and the problem (the program prints
 * it and exits 2, as for every SettingsError), before anything is opened.
 */
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runSidecar } from '../../src/cli/sidecar.js';
import { SettingsError } from '../../src/settings.js';
import { agentCert, makeCa, serverCert } from '../helpers/certs.js';
import { tempDir } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-sidecar-tls-settings-');
afterAll(cleanup);
const caDir = join(dir, 'ca');
mkdirSync(caDir);
const ca = makeCa(caDir);
const pm = agentCert(ca, 'pm');
const other = serverCert(ca, 'other');
const token = join(dir, 'token');
writeFileSync(token, 'a-token\n');
const notPem = join(dir, 'not.pem');
writeFileSync(notPem, 'this is not a certificate\n');
const keyAsCert = join(dir, 'key-as-cert.pem');
copyFileSync(pm.key, keyAsCert);

/** The line the program would print (before its exit 2), or 'started' if it got past settings. */
async function lineFor(env: Record<string, string>): Promise<string> {
  try {
    await runSidecar([], {
      AGW_ADAPTER_URL: 'https://127.0.0.1:9',
      AGW_AGENT_ID: 'pm',
      AGW_AGENT_TOKEN_FILE: token,
      // a folder where the outbox cannot be made: a run that gets past its settings stops there
      AGW_OUTBOX: join(notPem, 'outbox.db'),
      AGW_JOURNAL_SOCKET: join(dir, 'no-journal.sock'),
      AGW_LOG_LEVEL: 'silent',
      ...env,
    });
    return 'started';
  } catch (err) {
    if (err instanceof SettingsError) return err.message;
    return `started (${(err as Error).message})`;
  }
}

describe('the TLS settings towards the adapter, at start', () => {
  it('refuses an unreadable or non-PEM CA file, naming AGW_ADAPTER_CA', async () => {
    const missing = join(dir, 'missing.pem');
    expect(await lineFor({ AGW_ADAPTER_CA: missing })).toBe(
      `AGW_ADAPTER_CA: cannot be read (ENOENT); got "${missing}"`,
    );
    expect(await lineFor({ AGW_ADAPTER_CA: notPem })).toBe(
      `AGW_ADAPTER_CA: holds no PEM certificate (-----BEGIN CERTIFICATE-----); got "${notPem}"`,
    );
  });

  it('refuses a client certificate without its key, a key without its certificate, and a key that is not PEM', async () => {
    expect(await lineFor({ AGW_TLS_CLIENT_CERT: pm.cert })).toBe(
      'AGW_TLS_CLIENT_KEY (--tls-client-key): is required with AGW_TLS_CLIENT_CERT: the certificate is shown with its key; it is not set',
    );
    expect(await lineFor({ AGW_TLS_CLIENT_KEY: pm.key })).toBe(
      'AGW_TLS_CLIENT_CERT (--tls-client-cert): is required with AGW_TLS_CLIENT_KEY: the key is shown with its certificate; it is not set',
    );
    expect(await lineFor({ AGW_TLS_CLIENT_CERT: keyAsCert, AGW_TLS_CLIENT_KEY: pm.key })).toBe(
      `AGW_TLS_CLIENT_CERT: holds no PEM certificate (-----BEGIN CERTIFICATE-----); got "${keyAsCert}"`,
    );
    expect(await lineFor({ AGW_TLS_CLIENT_CERT: pm.cert, AGW_TLS_CLIENT_KEY: notPem })).toBe(
      `AGW_TLS_CLIENT_KEY: holds no PEM private key (-----BEGIN PRIVATE KEY-----); got "${notPem}"`,
    );
  });

  it('refuses a key that is not the certificate’s', async () => {
    expect(await lineFor({ AGW_TLS_CLIENT_CERT: pm.cert, AGW_TLS_CLIENT_KEY: other.key })).toBe(
      `AGW_TLS_CLIENT_KEY: is not the key of the certificate in AGW_TLS_CLIENT_CERT (${pm.cert}); got "${other.key}"`,
    );
  });

  it('refuses TLS files with an http:// adapter rather than send the token in clear', async () => {
    expect(await lineFor({ AGW_ADAPTER_URL: 'http://127.0.0.1:9', AGW_ADAPTER_CA: ca.cert })).toBe(
      `AGW_ADAPTER_CA: applies to an https:// adapter only, and AGW_ADAPTER_URL is http://127.0.0.1:9: make it https://, or unset this (the token would go in clear); got "${ca.cert}"`,
    );
  });

  it('takes a good set (the run gets past its settings)', async () => {
    expect(
      await lineFor({
        AGW_ADAPTER_CA: ca.cert,
        AGW_TLS_CLIENT_CERT: pm.cert,
        AGW_TLS_CLIENT_KEY: pm.key,
      }),
    ).toMatch(/^started/);
  });
});
