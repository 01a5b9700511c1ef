/**
 * Certificates made by the tests with the machine's openssl: a CA, and leaves it signs with the
 * subject alternative names a test asks for (a server's 127.0.0.1 and localhost, a client's
 * `spiffe://…/agent/<id>` URI). P-256 keys; PEM files in a folder of the test's own.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface CertFiles {
  /** The certificate's PEM file. */
  readonly cert: string;
  /** Its private key's PEM file (unencrypted). */
  readonly key: string;
}

export interface Ca extends CertFiles {
  readonly dir: string;
  readonly name: string;
}

export interface LeafOptions {
  /** Its common name (and the files' base name). */
  readonly cn: string;
  /** DNS names, IP addresses and URIs it is valid for. */
  readonly dns?: readonly string[];
  readonly ip?: readonly string[];
  readonly uri?: readonly string[];
  /** Days valid from now (default 30); a negative number makes one that expired. */
  readonly days?: number;
}

function openssl(args: readonly string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A self-signed CA named `name`, its files in `dir`. */
export function makeCa(dir: string, name = 'test-ca'): Ca {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  openssl([
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    key,
    '-out',
    cert,
    '-days',
    '30',
    '-subj',
    `/CN=${name}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  return { dir, name, cert, key };
}

/** A certificate `ca` signs for `o`'s names, in `ca.dir` (`<cn>.crt`, `<cn>.key`). */
export function issue(ca: Ca, o: LeafOptions): CertFiles {
  const base = join(ca.dir, o.cn.replace(/[^A-Za-z0-9_.-]/g, '_'));
  const key = `${base}.key`;
  const csr = `${base}.csr`;
  const cert = `${base}.crt`;
  const ext = `${base}.ext`;
  const names = [
    ...(o.dns ?? []).map((n) => `DNS:${n}`),
    ...(o.ip ?? []).map((n) => `IP:${n}`),
    ...(o.uri ?? []).map((n) => `URI:${n}`),
  ];
  writeFileSync(
    ext,
    [
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature',
      'extendedKeyUsage=serverAuth,clientAuth',
      ...(names.length > 0 ? [`subjectAltName=${names.join(',')}`] : []),
    ].join('\n'),
  );
  openssl([
    'req',
    '-new',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    key,
    '-out',
    csr,
    '-subj',
    `/CN=${o.cn}`,
  ]);
  const days = o.days ?? 30;
  // openssl x509 takes no negative -days: an expired one is dated in the past instead
  const validity =
    days > 0
      ? ['-days', String(days)]
      : ['-not_before', '20200101000000Z', '-not_after', '20200102000000Z'];
  try {
    openssl([
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      ca.cert,
      '-CAkey',
      ca.key,
      '-CAcreateserial',
      '-out',
      cert,
      '-extfile',
      ext,
      ...validity,
    ]);
  } catch (err) {
    // OpenSSL 3.0's x509 has no -not_before: sign with `ca` for a past validity then
    if (days > 0) throw err;
    pastDated(ca, csr, ext, cert);
  }
  return { cert, key };
}

/** A server certificate for loopback: 127.0.0.1, ::1 and localhost. */
export function serverCert(ca: Ca, cn = 'adapter'): CertFiles {
  return issue(ca, { cn, dns: ['localhost'], ip: ['127.0.0.1', '::1'] });
}

/** An agent's client certificate: its URI SAN `spiffe://agent-gateway.test/agent/<id>`. */
export function agentCert(ca: Ca, id: string, uri = spiffeId(id)): CertFiles {
  return issue(ca, { cn: `agent-${id}`, uri: [uri] });
}

export function spiffeId(id: string): string {
  return `spiffe://agent-gateway.test/agent/${id}`;
}

export function pem(path: string): string {
  return readFileSync(path, 'utf8');
}

function pastDated(ca: Ca, csr: string, ext: string, cert: string): void {
  const dir = ca.dir;
  const conf = join(dir, 'past-ca.cnf');
  writeFileSync(join(dir, 'index.txt'), '');
  writeFileSync(join(dir, 'serial'), '1000\n');
  writeFileSync(
    conf,
    [
      '[ca]',
      'default_ca=past',
      '[past]',
      `dir=${dir}`,
      `database=${join(dir, 'index.txt')}`,
      `serial=${join(dir, 'serial')}`,
      `new_certs_dir=${dir}`,
      'default_md=sha256',
      'policy=any',
      'unique_subject=no',
      '[any]',
      'commonName=supplied',
    ].join('\n'),
  );
  openssl([
    'ca',
    '-batch',
    '-config',
    conf,
    '-cert',
    ca.cert,
    '-keyfile',
    ca.key,
    '-in',
    csr,
    '-out',
    cert,
    '-extfile',
    ext,
    '-startdate',
    '20200101000000Z',
    '-enddate',
    '20200102000000Z',
    '-notext',
  ]);
}
