/**
 * The systemd units (k8s/systemd/) run the installed command with what it needs and little
 * more: they set only known AGW_* variables; the adapter unit is Type=notify with the seed
 * restart policy; ExecStart names the command package.json links, without a folder, and
 * systemd finds it where `npm install -g` puts it under this machine's npm prefix, /usr/local and
 * /usr alike (`systemd-analyze verify --root` with the command there, and not without it);
 * `systemd-analyze security --offline=yes` rates each unit at most 4.0
 * ("OK"), the adapter with its TLS drop-in too; W^X stays off (V8's JIT writes the code it runs);
 * the TLS drop-in points at the files themselves, so renewals are read again without a
 * restart; the watch unit may reach only the loopback, where its forward URL points; and each unit, with
 * the drop-in, passes `systemd-analyze verify` without a warning (verify runs offline: it needs
 * no running systemd, only the binary).
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ADAPTER_SETTINGS } from '../../src/adapter/settings.js';
import { CLI } from '../helpers/cli.js';
import { K8S } from '../helpers/rendered.js';
import { tempDir } from '../helpers/topology.js';

const UNIT_DIR = join(K8S, 'systemd');
const UNITS = readdirSync(UNIT_DIR).filter((f) => f.endsWith('.service'));
/** The adapter's TLS drop-in, installed as agent-gateway-adapter.service.d/tls.conf. */
const TLS_DROP_IN = 'agent-gateway-adapter-tls.conf';
const ADAPTER_ENV = new Set<string>(Object.values(ADAPTER_SETTINGS).map((s) => s.env));
/**
 * The command `npm install -g agent-gateway` links (package.json's bin), as ExecStart names it:
 * without a folder, so systemd looks it up in its own search path.
 */
const COMMAND = Object.keys(
  (JSON.parse(readFileSync(join(K8S, '..', 'package.json'), 'utf8')) as { bin: object }).bin,
)[0]!;
/** systemd-analyze's line between "OK" and "MEDIUM": the most exposure we accept. */
const MAX_EXPOSURE = 4.0;

const text = (file: string) => readFileSync(join(UNIT_DIR, file), 'utf8');
const values = (unit: string, key: string) =>
  [...unit.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1]!);
const ANALYZE = existsSync('/usr/bin/systemd-analyze') ? '/usr/bin/systemd-analyze' : undefined;

/**
 * The units in a folder of their own, the adapter's with its drop-in beside it (where
 * systemd-analyze finds drop-ins of a unit it is given by path); `execStart` replaces the
 * installed command (verify checks that it is an executable).
 */
function install(dir: string, execStart = COMMAND): void {
  mkdirSync(join(dir, 'agent-gateway-adapter.service.d'), { recursive: true });
  for (const u of UNITS)
    writeFileSync(
      join(dir, u),
      text(u).replace(`ExecStart=${COMMAND} `, `ExecStart=${execStart} `),
    );
  writeFileSync(join(dir, 'agent-gateway-adapter.service.d', 'tls.conf'), text(TLS_DROP_IN));
}

/** `systemd-analyze security --offline=yes FILE`: its overall exposure, and the table. */
function exposure(file: string): { level: number; table: string } {
  const out = spawnSync(ANALYZE!, ['security', '--offline=yes', '--no-pager', file], {
    encoding: 'utf8',
  });
  const m = /Overall exposure level for \S+: (\d+(?:\.\d+)?) /.exec(out.stdout);
  if (m === null) throw new Error(`no exposure in: ${out.stdout}${out.stderr}`);
  return { level: Number(m[1]), table: out.stdout };
}

describe('systemd units (k8s/systemd/)', () => {
  const { dir, cleanup } = tempDir('agw-units-');
  afterAll(cleanup);

  it('set only known AGW_* variables, and the adapter unit is Type=notify with the seed restart policy', () => {
    expect(UNITS.sort()).toEqual(['agent-gateway-adapter.service', 'agent-gateway-watch.service']);
    for (const f of [...UNITS, TLS_DROP_IN])
      for (const m of text(f).matchAll(/^Environment=(AGW_[A-Z_]+)=/gm))
        expect(ADAPTER_ENV.has(m[1]!), `${f}: ${m[1]}`).toBe(true);
    const adapter = text('agent-gateway-adapter.service');
    for (const line of [
      'Type=notify',
      'Restart=always',
      'RestartSec=2',
      'StartLimitIntervalSec=300',
      'StartLimitBurst=5',
    ])
      expect(adapter).toContain(line);
    expect(adapter).toMatch(/^WatchdogSec=\d+/m);
    // the drop-in's TLS files are read where they are (so a renewal is read again, with no
    // restart: a LoadCredential= copy would be taken once, at start), the key through a group
    const dropIn = text(TLS_DROP_IN);
    expect(values(dropIn, 'LoadCredential')).toEqual([]);
    expect(values(dropIn, 'SupplementaryGroups')).toEqual(['ssl-cert']);
    for (const v of ['AGW_TLS_CERT', 'AGW_TLS_KEY', 'AGW_TLS_CLIENT_CA']) {
      const [file] = values(dropIn, 'Environment')
        .filter((e) => e.startsWith(`${v}=`))
        .map((e) => e.slice(v.length + 1));
      expect(file, v).toMatch(/^\/etc\/agent-gateway\/tls\/[a-z-]+\.(crt|key)$/);
    }
  });

  it('name the command without a folder, for systemd to find in its search path', () => {
    for (const u of UNITS) {
      const [execStart] = values(text(u), 'ExecStart');
      expect(execStart?.split(' ')[0], u).toBe(COMMAND);
    }
  });

  it.runIf(ANALYZE !== undefined)(
    "run the command where `npm install -g` puts it: this machine's npm prefix, /usr/local and /usr",
    () => {
      // where this machine's npm links a global command, and where systemd looks
      const prefix = spawnSync('npm', ['prefix', '-g'], { encoding: 'utf8' }).stdout.trim();
      expect(prefix).toMatch(/^\//);
      const searched = spawnSync('systemd-path', ['search-binaries-default'], { encoding: 'utf8' })
        .stdout.trim()
        .split(':');
      expect(searched).toContain(join(prefix, 'bin'));
      // verify, run on a root holding the command where each prefix links it, finds it there;
      // on a root without it, it names the command it could not find (so the check can fail)
      for (const p of new Set([prefix, '/usr/local', '/usr'])) {
        for (const linked of [true, false]) {
          const root = join(dir, `root-${p.replaceAll('/', '_')}-${linked}`);
          const units = join(root, 'etc/systemd/system');
          install(units);
          // what verify loads with a unit: systemd's own units, and ExecReload's kill
          cpSync('/lib/systemd/system', join(root, 'usr/lib/systemd/system'), { recursive: true });
          for (const exe of [...(linked ? [join(p, 'bin', COMMAND)] : []), '/bin/kill']) {
            mkdirSync(join(root, dirname(exe)), { recursive: true });
            writeFileSync(join(root, exe), '#!/bin/sh\n', { mode: 0o755 });
          }
          for (const u of UNITS) {
            const out = spawnSync(ANALYZE!, ['verify', `--root=${root}`, u], { encoding: 'utf8' });
            if (linked) {
              expect(out.status, `${p} ${u}: ${out.stderr}`).toBe(0);
              expect(out.stderr, `${p} ${u}`).toBe('');
            } else {
              expect(out.stderr, `${p} ${u}`).toContain(`Command ${COMMAND} is not executable`);
            }
          }
        }
      }
    },
  );

  it('leave writable-executable memory allowed: Node dies at start without it', () => {
    // V8 writes machine code and then makes it executable; MemoryDenyWriteExecute=yes refuses
    // that (docs/deploy.md, "systemd", says how this was checked)
    for (const u of UNITS) expect(values(text(u), 'MemoryDenyWriteExecute'), u).toEqual(['no']);
  });

  it('let the watch unit reach the loopback only, where its forward URL points', () => {
    const watch = text('agent-gateway-watch.service');
    expect(values(watch, 'IPAddressDeny')).toEqual(['any']);
    expect(values(watch, 'IPAddressAllow')).toEqual(['localhost']);
    const [execStart] = values(watch, 'ExecStart');
    const forward = /--forward (\S+)/.exec(execStart!)?.[1];
    expect(['127.0.0.1', 'localhost', '[::1]']).toContain(new URL(forward!).hostname);
    expect(values(watch, 'SupplementaryGroups')).toEqual(['systemd-journal']);
  });

  it.runIf(ANALYZE !== undefined)(
    `are rated at most ${MAX_EXPOSURE} by systemd-analyze security, the adapter's TLS drop-in included`,
    () => {
      const plain = join(dir, 'plain');
      mkdirSync(plain);
      for (const u of UNITS) {
        writeFileSync(join(plain, u), text(u));
        const { level, table } = exposure(join(plain, u));
        expect(level, `${u}:\n${table}`).toBeLessThanOrEqual(MAX_EXPOSURE);
      }
      const withDropIn = join(dir, 'drop-in');
      install(withDropIn);
      const { level, table } = exposure(join(withDropIn, 'agent-gateway-adapter.service'));
      expect(level, `with ${TLS_DROP_IN}:\n${table}`).toBeLessThanOrEqual(MAX_EXPOSURE);
    },
  );

  it.runIf(ANALYZE !== undefined)('pass systemd-analyze verify without a warning', () => {
    // verify checks that ExecStart is executable: point it at this checkout's build
    const here = join(dir, 'verify');
    install(here, `${process.execPath} ${CLI}`);
    for (const u of UNITS) {
      const out = spawnSync(ANALYZE!, ['verify', join(here, u)], { encoding: 'utf8' });
      // verify exits 0 on an unknown key or system call group: it only warns, on stderr
      expect(out.status, `${u}: ${out.stderr}`).toBe(0);
      expect(out.stderr, u).toBe('');
    }
    // and a unit it would warn about is caught: the check above can fail
    const bad = join(dir, 'bad');
    mkdirSync(bad);
    writeFileSync(
      join(bad, 'bad.service'),
      `[Service]\nExecStart=${process.execPath}\nProtectSystm=strict\nSystemCallFilter=@no-such-group\n`,
    );
    const out = spawnSync(ANALYZE!, ['verify', join(bad, 'bad.service')], { encoding: 'utf8' });
    expect(out.stderr).toMatch(/Unknown key .*ProtectSystm/);
    expect(out.stderr).toMatch(/Unknown system call group/);
  });
});
