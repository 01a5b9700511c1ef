/**
 * @agent-gateway/client installs alone (docs/reference/client.md): `npm pack` of src/client/
 * (its prepack builds it), then `npm install` of the tarball into a fresh project, offline and
 * with an empty npm cache, so that any dependency it named would fail the install. The project
 * then holds that one package, with no native module and no install script; its type
 * declarations check without zod or anything else of the gateway's; and a script there, using
 * the installed client alone, sends through one real sidecar and receives through another.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { tempDir } from '../helpers/topology.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLIENT = join(ROOT, 'src/client');

let stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.reverse()) await stop();
  stops = [];
});

/** Every file under dir, relative to it. */
function walk(dir: string, base = ''): string[] {
  return readdirSync(join(dir, base), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(dir, join(base, e.name)) : [join(base, e.name)],
  );
}

const PROBE = `
import { GatewayClient } from '@agent-gateway/client';
const [sendUrl, receiveUrl] = process.argv.slice(2);
const pm = new GatewayClient({ url: sendUrl });
const qa = new GatewayClient({ url: receiveUrl });
const sent = await pm.send({
  to: '@qa',
  kind: 'task/request',
  payload: { task_id: 'T-standalone', description: 'from the installed client' },
});
const controller = new AbortController();
const giveUp = setTimeout(() => controller.abort(), 20_000);
let received = null;
await qa.receive(
  async (m) => {
    received = m;
    controller.abort();
  },
  { waitS: 5, signal: controller.signal },
);
clearTimeout(giveUp);
console.log(JSON.stringify({
  resolved: import.meta.resolve('@agent-gateway/client'),
  sent,
  received,
  after: await qa.heartbeat(),
}));
`;

/** The same calls, for the type check of the installed declarations. */
const PROBE_TS = `
import { GatewayClient, type Message, PermanentError, type SendResult } from '@agent-gateway/client';
const gw = new GatewayClient({ url: 'http://127.0.0.1:7070' });
const sent: SendResult = await gw.send({ to: 'product', kind: 'status', priority: 'critical' });
await gw.receive(async (m: Message) => {
  if (m.priority === 'normal' && sent.status === 'queued') throw new PermanentError('no');
});
`;

it('installs as one package with no dependency, no native module and no install script, and carries a message', {
  timeout: 240_000,
}, async () => {
  const { dir, cleanup } = tempDir('agw-client-install-');
  stops.push(cleanup);
  // an npm of its own: an empty cache (offline, nothing can come from it) and no user config
  const env = {
    ...process.env,
    npm_config_cache: join(dir, 'npm-cache'),
    npm_config_userconfig: join(dir, 'npmrc'),
    npm_config_update_notifier: 'false',
    npm_config_fund: 'false',
    npm_config_audit: 'false',
  };

  const packed = await run('npm', ['pack', '--json', '--pack-destination', dir], {
    cwd: CLIENT,
    env,
  });
  const [pack] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('['))) as {
    filename: string;
    size: number;
    unpackedSize: number;
    files: { path: string }[];
  }[];
  const files = pack!.files.map((f) => f.path).sort();
  expect(files).toContain('dist/client/index.js');
  expect(files).toContain('dist/client/index.d.ts');
  expect(files.filter((f) => !/^(README\.md|package\.json|dist\/.+\.(js|d\.ts))$/.test(f))).toEqual(
    [],
  );
  console.log(
    `@agent-gateway/client tarball: ${pack!.size} bytes, ${pack!.unpackedSize} unpacked, ${files.length} files`,
  );

  // published beside the root package, with the same version
  const version = (file: string) =>
    (JSON.parse(readFileSync(join(ROOT, file), 'utf8')) as { version: string }).version;
  expect(version('src/client/package.json')).toBe(version('package.json'));

  const project = join(dir, 'project');
  mkdirSync(project);
  writeFileSync(
    join(project, 'package.json'),
    JSON.stringify({ name: 'probe', version: '1.0.0', private: true, type: 'module' }),
  );
  await run('npm', ['install', '--offline', join(dir, pack!.filename)], { cwd: project, env });

  const lock = JSON.parse(readFileSync(join(project, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { hasInstallScript?: boolean; dependencies?: object }>;
  };
  const installed = Object.keys(lock.packages).filter((k) => k !== '');
  expect(installed).toEqual(['node_modules/@agent-gateway/client']);
  const entry = lock.packages['node_modules/@agent-gateway/client']!;
  expect(entry.hasInstallScript).toBeUndefined();
  expect(entry.dependencies).toBeUndefined();

  const modules = join(project, 'node_modules');
  const onDisk = walk(modules);
  // the package's files and npm's own record of the tree, nothing else
  expect(onDisk.filter((f) => !f.startsWith('@agent-gateway/client/'))).toEqual([
    '.package-lock.json',
  ]);
  expect(onDisk.filter((f) => f.endsWith('.node') || f.endsWith('binding.gyp'))).toEqual([]);
  const manifest = JSON.parse(
    readFileSync(join(modules, '@agent-gateway/client/package.json'), 'utf8'),
  ) as { scripts?: Record<string, string>; dependencies?: object };
  expect(manifest.dependencies).toBeUndefined();
  expect(Object.keys(manifest.scripts ?? {}).filter((s) => /install$/.test(s))).toEqual([]);
  // what the installed JavaScript imports: its own files and Node's built-ins only
  const specifiers = onDisk
    .filter((f) => f.endsWith('.js') || f.endsWith('.d.ts'))
    .flatMap((f) => [
      ...readFileSync(join(modules, f), 'utf8').matchAll(
        /(?:^|\n)\s*(?:import|export)[^'";]*?from\s+'([^']+)'/g,
      ),
    ])
    .map((m) => m[1]!);
  expect(specifiers.length).toBeGreaterThan(0);
  expect(specifiers.filter((s) => !s.startsWith('.') && !s.startsWith('node:'))).toEqual([]);

  // the declarations check on their own (skipLibCheck off), with Node's types only
  writeFileSync(join(project, 'probe.ts'), PROBE_TS);
  writeFileSync(
    join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        types: ['node'],
        typeRoots: [join(ROOT, 'node_modules/@types')],
      },
      files: ['probe.ts'],
    }),
  );
  await run(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', project], {
    cwd: project,
  });

  // a message through real sidecars, from a script that has only the installed client
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const pm = await startTestSidecar('pm', adapter.url);
  stops.push(pm.stop);
  const qa = await startTestSidecar('qa', adapter.url);
  stops.push(qa.stop);
  writeFileSync(join(project, 'probe.mjs'), PROBE);
  const out = await run(process.execPath, ['probe.mjs', pm.url, qa.url], { cwd: project });
  const result = JSON.parse(out.stdout) as {
    resolved: string;
    sent: { status: string; message_id: string };
    received: { message_id: string; sender: string; payload: { task_id: string } } | null;
    after: { pending: number };
  };
  expect(fileURLToPath(result.resolved)).toBe(
    join(modules, '@agent-gateway/client/dist/client/index.js'),
  );
  expect(result.sent.status).toBe('delivered');
  expect(result.received).toMatchObject({
    message_id: result.sent.message_id,
    sender: 'pm',
    payload: { task_id: 'T-standalone' },
  });
  expect(result.after.pending).toBe(0);
});
