// The local stack behind `npm start`: the adapter on examples/topology.yaml and one sidecar per
// agent on consecutive loopback ports, SQLite files under ./data, a table of who listens where.
// Ctrl-C (or SIGTERM) stops them all. The development tokens are `dev-token-<agent>`, as the
// comment in examples/topology.yaml says; the adapter accepts them only with
// AGW_ALLOW_DEV_TOKENS=1, set here.
// STACK_ADAPTER_PORT (8080) and STACK_SIDECAR_PORT (7071, the first sidecar's) move it; 0 puts
// each on a free port (the table says which). STACK_DATA moves ./data (test/cli's run of the
// README's quick start uses all three).
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

const root = fileURLToPath(new URL('..', import.meta.url));
const cli = `${root}dist/cli/main.js`;
const topologyPath = `${root}examples/topology.yaml`;
const adapterPort = Number(process.env.STACK_ADAPTER_PORT ?? 8080);
const firstSidecarPort = Number(process.env.STACK_SIDECAR_PORT ?? 7071);
const data = process.env.STACK_DATA ?? `${root}data`;
mkdirSync(data, { recursive: true });
const agents = parse(readFileSync(topologyPath, 'utf8')).agents.map((a) => a.id);

const children = [];
function start(name, args, env, readyWhen) {
  const child = spawn(process.execPath, [cli, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      let e;
      try {
        e = JSON.parse(line);
      } catch {
        return;
      }
      if (e.level >= 40) console.error(`[${name}] ${e.msg}`);
      if (readyWhen(e)) resolve(e.url);
    });
    child.once('exit', (code) => reject(new Error(`${name} exited (${code})`)));
  });
}

try {
  const adapterUrl = await start(
    'adapter',
    [
      'adapter',
      '--topology',
      topologyPath,
      '--db',
      `${data}/adapter.db`,
      '--listen',
      `127.0.0.1:${adapterPort}`,
    ],
    // examples/topology.yaml holds the public development tokens' hashes, which the adapter
    // refuses unless told that this is a local stack
    { AGW_ALLOW_DEV_TOKENS: '1' },
    (e) => e.msg?.startsWith('adapter ready'),
  );
  const rows = [['adapter', adapterUrl]];
  for (const [i, id] of agents.entries()) {
    const url = await start(
      id,
      ['sidecar', '--listen', `127.0.0.1:${firstSidecarPort === 0 ? 0 : firstSidecarPort + i}`],
      {
        AGW_ADAPTER_URL: adapterUrl,
        AGW_AGENT_ID: id,
        AGW_AGENT_TOKEN: `dev-token-${id}`,
        AGW_OUTBOX: `${data}/${id}.outbox.db`,
      },
      (e) => e.msg?.includes('listening on'),
    );
    rows.push([`sidecar ${id}`, url]);
  }
  console.log('\nagent-gateway local stack (Ctrl-C stops it)\n');
  for (const [who, where] of rows) console.log(`  ${who.padEnd(22)} ${where}`);
  // --json (curl 7.82+) says Content-Type: application/json, which the sidecar requires of a
  // POST; a bare -d is a form post, refused 415 not_json
  console.log(`
  try:  curl -s --json '{"to":"product","kind":"status","payload":{"text":"hello"}}' ${rows[2][1]}/v1/messages
        curl -s '${rows[4][1]}/v1/inbox?wait=5'
  console:  ${adapterUrl}/console  (token: dev-token-operator:alice)
`);
} catch (err) {
  console.error(`local stack failed to start: ${err.message}`);
  stop(1);
}

let stopping = false;
function stop(code = 0) {
  if (stopping) return;
  stopping = true;
  for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
  Promise.all(
    children.map((c) => (c.exitCode === null ? new Promise((r) => c.once('exit', r)) : null)),
  ).then(() => process.exit(code));
}
process.once('SIGINT', () => stop(0));
process.once('SIGTERM', () => stop(0));
