/**
 * A throwaway PostgreSQL that speaks only TLS, for the tests of a `postgres://` AGW_DB's
 * `sslmode`, `sslrootcert`, `sslcert` and `sslkey`. initdb (--no-sync) in a temp folder owned
 * by the `postgres` user (the tests run as root, and PostgreSQL refuses to run as root), then
 * `postgres` as that user on a free port of 127.0.0.1 and 127.0.0.2, with `ssl=on`, a server
 * certificate from certs.ts (SANs 127.0.0.1, ::1 and localhost: 127.0.0.2 is the same server
 * under a name its certificate does not carry) and this pg_hba:
 *
 *   local     all all      trust   (the helper's own administration, over its Unix socket)
 *   hostssl   all certuser cert    (a client certificate whose CN is `certuser`)
 *   hostssl   all postgres trust
 *   hostnossl all all      reject  (no connection without TLS)
 *
 * fsync is off: nothing here outlives the test. `stop()` ends the postmaster by its pid
 * (SIGQUIT: immediate shutdown; SIGKILL after 10 s) and removes the folder.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { type Ca, type CertFiles, issue, makeCa, serverCert } from './certs.js';

/** The role that may log in only with a client certificate (pg_hba `cert`). */
export const CERT_USER = 'certuser';

/** Debian's binaries: /usr/lib/postgresql/<version>/bin (the newest installed). */
function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = readdirSync(root)
    .filter((v) => /^\d+$/.test(v))
    .sort((a, b) => Number(b) - Number(a));
  if (versions.length === 0) throw new Error(`no PostgreSQL under ${root}`);
  return join(root, versions[0]!, 'bin');
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

function id(user: string, which: 'u' | 'g'): number {
  return Number(execFileSync('id', [`-${which}`, user], { encoding: 'utf8' }).trim());
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface UrlOptions {
  /** 127.0.0.1 unless told (localhost and 127.0.0.2 reach the same server). */
  readonly host?: string;
  /** `postgres` unless told. */
  readonly user?: string;
  readonly db?: string;
  /** The query: sslmode, sslrootcert, sslcert, sslkey, uselibpqcompat... */
  readonly params?: Record<string, string>;
}

export class PgTlsServer {
  readonly dir: string;
  readonly data: string;
  readonly port: number;
  /** The CA that signed the server's certificate (and the client's). */
  readonly ca: Ca;
  /** A CA that signed nothing of this server's. */
  readonly otherCa: Ca;
  /** A client certificate (CN `certuser`) signed by `ca`. */
  readonly client: CertFiles;
  /** The postmaster's stderr. */
  log = '';
  #proc: ChildProcess | undefined;
  #exited: Promise<void> | undefined;
  #pid: number | undefined;
  readonly #server: CertFiles;

  private constructor(dir: string, port: number) {
    this.dir = dir;
    this.data = join(dir, 'data');
    this.port = port;
    const certs = join(dir, 'certs');
    mkdirSync(certs, { mode: 0o755 });
    this.ca = makeCa(certs, 'pg-ca');
    this.otherCa = makeCa(certs, 'other-ca');
    const server = serverCert(this.ca, 'pg-server');
    // PostgreSQL refuses a key file others may read, or one it does not own (bar root's 0640)
    chownSync(server.key, id('postgres', 'u'), id('postgres', 'g'));
    chmodSync(server.key, 0o600);
    this.client = issue(this.ca, { cn: CERT_USER });
    this.#server = server;
  }

  /** Makes, starts and waits for a server; creates the role `certuser`. */
  static async start(): Promise<PgTlsServer> {
    const dir = mkdtempSync(join(tmpdir(), 'agw-pgtls-'));
    chownSync(dir, id('postgres', 'u'), id('postgres', 'g'));
    let server: PgTlsServer | undefined;
    try {
      server = new PgTlsServer(dir, await freePort());
      await server.#initAndRun();
      await server.admin(`CREATE ROLE ${CERT_USER} LOGIN`);
      return server;
    } catch (err) {
      if (server !== undefined) await server.stop();
      else rmSync(dir, { recursive: true, force: true });
      throw err;
    }
  }

  async #initAndRun(): Promise<void> {
    execFileSync(
      'runuser',
      [
        '-u',
        'postgres',
        '--',
        join(binDir(), 'initdb'),
        '-D',
        this.data,
        '-U',
        'postgres',
        '-A',
        'trust',
        '--no-sync',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LC_ALL: 'C' } },
    );
    // the file initdb wrote, so it stays the postgres user's
    writeFileSync(
      join(this.data, 'pg_hba.conf'),
      [
        'local     all all                   trust',
        `hostssl   all ${CERT_USER} 127.0.0.1/32 cert`,
        `hostssl   all ${CERT_USER} 127.0.0.2/32 cert`,
        'hostssl   all postgres 127.0.0.1/32 trust',
        'hostssl   all postgres 127.0.0.2/32 trust',
        'hostnossl all all      0.0.0.0/0    reject',
        'host      all all      0.0.0.0/0    reject',
        '',
      ].join('\n'),
    );
    const settings = [
      'listen_addresses=127.0.0.1,127.0.0.2',
      'ssl=on',
      `ssl_cert_file=${this.#server.cert}`,
      `ssl_key_file=${this.#server.key}`,
      // the CA a client certificate must chain to (pg_hba `cert`)
      `ssl_ca_file=${this.ca.cert}`,
      'fsync=off',
      'synchronous_commit=off',
      'full_page_writes=off',
      'max_connections=50',
    ];
    const args = ['-D', this.data, '-p', String(this.port), '-k', this.dir];
    for (const s of settings) args.push('-c', s);
    const proc = spawn('runuser', ['-u', 'postgres', '--', join(binDir(), 'postgres'), ...args], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    proc.stderr?.on('data', (b: Buffer) => {
      this.log += b.toString();
    });
    this.#proc = proc;
    this.#exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        this.#proc = undefined;
        throw new Error(`postgres exited at start:\n${this.log.slice(-2000)}`);
      }
      if (await this.#answers()) break;
      if (Date.now() > deadline) throw new Error(`postgres did not answer:\n${this.log}`);
      await sleep(50);
    }
    this.#pid = this.#pidFile();
  }

  #pidFile(): number | undefined {
    try {
      return Number(readFileSync(join(this.data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    } catch {
      return undefined;
    }
  }

  /** Over the Unix socket: the only way in without TLS. */
  #adminClient(db = 'postgres'): pg.Client {
    const c = new pg.Client({
      host: this.dir,
      port: this.port,
      user: 'postgres',
      database: db,
      ssl: false,
      connectionTimeoutMillis: 2000,
    });
    c.on('error', () => undefined);
    return c;
  }

  async #answers(): Promise<boolean> {
    const c = this.#adminClient();
    try {
      await c.connect();
      await c.query('SELECT 1');
      return true;
    } catch {
      return false;
    } finally {
      await c.end().catch(() => undefined);
    }
  }

  /** Runs `sql` as postgres over the Unix socket; answers its rows. */
  async admin<R extends object = Record<string, unknown>>(
    sql: string,
    values: unknown[] = [],
  ): Promise<R[]> {
    const c = this.#adminClient();
    await c.connect();
    try {
      return (await c.query<R>(sql, values)).rows;
    } finally {
      await c.end().catch(() => undefined);
    }
  }

  /** A `postgres://` URL of this server (over TCP: TLS or refused). */
  url(o: UrlOptions = {}): string {
    const u = new URL(`postgres://${o.host ?? '127.0.0.1'}:${this.port}/${o.db ?? 'postgres'}`);
    u.username = o.user ?? 'postgres';
    for (const [k, v] of Object.entries(o.params ?? {})) u.searchParams.set(k, v);
    return u.toString();
  }

  /** Ends the postmaster by its pid (immediate shutdown) and removes the folder. */
  async stop(): Promise<void> {
    // (a start that failed half-way left no #pid: its pid file may still name the postmaster)
    const pm = this.#pid ?? (this.#proc === undefined ? undefined : this.#pidFile());
    if (this.#proc !== undefined) {
      if (pm !== undefined && alive(pm)) process.kill(pm, 'SIGQUIT');
      else this.#proc.kill('SIGKILL'); // runuser, before the postmaster wrote its pid
      const timer = setTimeout(() => {
        if (pm !== undefined && alive(pm)) process.kill(pm, 'SIGKILL');
      }, 10_000);
      await this.#exited;
      while (pm !== undefined && alive(pm)) await sleep(20);
      clearTimeout(timer);
    }
    this.#proc = undefined;
    this.#pid = undefined;
    rmSync(this.dir, { recursive: true, force: true });
  }
}
