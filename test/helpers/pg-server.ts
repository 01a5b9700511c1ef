/**
 * A PostgreSQL server of a test's own, to crash: initdb on a data directory in a temp folder,
 * `postgres` on a free loopback port, both as the `postgres` user (the tests run as root, and
 * PostgreSQL refuses to run as root). `crash()` SIGKILLs the postmaster by its pid and then
 * every process it had started (each is a session leader of its own, so no group signal reaches
 * them): the server dies as in an OOM kill of its container, with no shutdown checkpoint and
 * its WAL buffers lost. `start()` again runs crash recovery on the same directory. `stop()`
 * ends it (fast shutdown, then SIGKILL) and removes the folder.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

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

/** The pids of the processes whose parent is `pid` (from /proc). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid ...: comm may hold spaces, so read after its closing paren
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
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

export class PgServer {
  readonly dir: string;
  readonly data: string;
  readonly port: number;
  /** Settings given to `postgres -c` at every start. */
  readonly settings: readonly string[];
  #proc: ChildProcess | undefined;
  #exited: Promise<void> | undefined;
  /** The postmaster's pid while it runs. */
  postmasterPid: number | undefined;
  /** Its log (stderr), every start appended. */
  log = '';
  /** Processes SIGKILLed by crash(), for the report. */
  killed = 0;

  private constructor(dir: string, port: number, settings: readonly string[]) {
    this.dir = dir;
    this.data = join(dir, 'data');
    this.port = port;
    this.settings = settings;
  }

  /** initdb on a new temp folder, then start(). `settings`: `name=value`, as `-c` takes them. */
  static async create(settings: readonly string[] = []): Promise<PgServer> {
    const dir = mkdtempSync(join(tmpdir(), 'agw-pgserver-'));
    chownSync(dir, uid('postgres'), uid('postgres', 'g'));
    const server = new PgServer(dir, await freePort(), settings);
    try {
      execFileSync(
        'runuser',
        ['-u', 'postgres', '--', join(binDir(), 'initdb'), '-D', server.data, '-A', 'trust'],
        { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LC_ALL: 'C' } },
      );
      await server.start();
    } catch (err) {
      await server.stop();
      throw err;
    }
    return server;
  }

  /** A URL of database `db` on this server. */
  url(db = 'postgres'): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${db}`;
  }

  /** Starts the server on its directory (crash recovery after crash()); resolves once it answers. */
  async start(): Promise<void> {
    if (this.#proc !== undefined) throw new Error('the server is already running');
    const args = ['-D', this.data, '-p', String(this.port), '-k', this.dir];
    for (const s of ['listen_addresses=127.0.0.1', ...this.settings]) args.push('-c', s);
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
    this.postmasterPid = this.#pidFile();
  }

  #pidFile(): number | undefined {
    try {
      return Number(readFileSync(join(this.data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    } catch {
      return undefined;
    }
  }

  async #answers(): Promise<boolean> {
    const c = new pg.Client({ connectionString: this.url(), connectionTimeoutMillis: 2000 });
    c.on('error', () => undefined);
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

  /** Creates database `name`; answers its URL. */
  async createDatabase(name: string): Promise<string> {
    const c = new pg.Client({ connectionString: this.url() });
    await c.connect();
    try {
      await c.query(`CREATE DATABASE ${name}`);
    } finally {
      await c.end();
    }
    return this.url(name);
  }

  /**
   * SIGKILLs the postmaster by its pid, then each process it had started (backends, WAL
   * writer, checkpointer...); resolves once every one is gone.
   */
  async crash(): Promise<void> {
    const pm = this.postmasterPid;
    if (pm === undefined || this.#proc === undefined) throw new Error('the server is not running');
    const children = childrenOf(pm);
    process.kill(pm, 'SIGKILL');
    for (const c of [...children, ...childrenOf(pm)]) {
      try {
        process.kill(c, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    this.killed += 1 + children.length;
    await this.#exited;
    while ([pm, ...children].some(alive)) await sleep(20);
    this.#proc = undefined;
    this.postmasterPid = undefined;
  }

  /** Ends the server (SIGINT: fast shutdown; SIGKILL after 10 s) and removes its folder. */
  async stop(): Promise<void> {
    // (a start that failed half-way left no postmasterPid: its pid file may still name it)
    const pm = this.postmasterPid ?? (this.#proc === undefined ? undefined : this.#pidFile());
    if (this.#proc !== undefined && pm !== undefined) {
      const children = childrenOf(pm);
      if (alive(pm)) process.kill(pm, 'SIGINT'); // fast shutdown
      const timer = setTimeout(() => {
        for (const p of [pm, ...children]) if (alive(p)) process.kill(p, 'SIGKILL');
      }, 10_000);
      await this.#exited;
      while ([pm, ...children].some(alive)) await sleep(20);
      clearTimeout(timer);
    }
    this.#proc = undefined;
    this.postmasterPid = undefined;
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function uid(user: string, which: 'u' | 'g' = 'u'): number {
  return Number(execFileSync('id', [`-${which}`, user], { encoding: 'utf8' }).trim());
}
