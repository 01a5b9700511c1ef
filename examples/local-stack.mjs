// The local stack behind `npm start`: the adapter on examples/topology.yaml and one sidecar per
// agent on consecutive loopback ports, SQLite files under ./data, a table of who listens where.
// Ctrl-C (or SIGTERM) stops them all. The development tokens are `dev-token-<agent>`, as the
// comment in examples/topology.yaml says; the adapter accepts them only with
// AGW_ALLOW_DEV_TOKENS=1, set here.
// STACK_ADAPTER_PORT (8080) and STACK_SIDECAR_PORT (7071, the first sidecar's) move it; 0 puts
// each on a free port (the table says which). STACK_DATA moves ./data (test/cli's run of the
// README's quick start uses all three).
// Each agent gets a demo runtime (examples/demo-agents.mjs) that polls, acks and answers, so the
// stack raises no alert/stalled of its own making; the agents in STACK_HANDS_ON (default qa,
// whose inbox the README's quick start reads by hand; empty for none) are left to you, and their
// runtime takes over only what waited for half of AGW_STALL_S. AGW_* variables set here reach
// the adapter and the sidecars (AGW_STALL_S=10 to see a stall sooner).
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { ADAPTER_SETTINGS } from '../dist/adapter/settings.js';
import { startDemoAgents } from './demo-agents.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const cli = `${root}dist/cli/main.js`;
const topologyPath = `${root}examples/topology.yaml`;
const adapterPort = Number(process.env.STACK_ADAPTER_PORT ?? 8080);
const firstSidecarPort = Number(process.env.STACK_SIDECAR_PORT ?? 7071);
const data = process.env.STACK_DATA ?? `${root}data`;
mkdirSync(data, { recursive: true });
const topology = parse(readFileSync(topologyPath, 'utf8'));
const agents = topology.agents.map((a) => a.id);
const handsOn = new Set(
  (process.env.STACK_HANDS_ON ?? 'qa')
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== ''),
);
const stallS = Number(process.env.AGW_STALL_S ?? ADAPTER_SETTINGS.stallS.default);
const demo = new AbortController();
/** Set by stop(); up here, since a child may exit while the stack is still starting. */
let stopping = false;
process.once('SIGINT', () => stop(0));
process.once('SIGTERM', () => stop(0));

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
    child.once('exit', (code, signal) => {
      reject(new Error(`${name} exited (${code})`));
      // once it ran (a rejection after that is no-op): said, and the rest of the stack goes on
      if (!stopping) console.error(`[${name}] exited (${code ?? signal})`);
    });
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
  const sidecars = new Map(rows.slice(1).map(([who, url]) => [who.slice('sidecar '.length), url]));
  const driven = agents.filter((a) => !handsOn.has(a));
  console.log(
    `  demo agents (examples/demo-agents.mjs): ${driven.join(', ')} poll, ack and answer;` +
      (handsOn.size === 0
        ? ''
        : ` ${[...handsOn].join(', ')} ${handsOn.size === 1 ? 'is' : 'are'} yours (what waits ${stallS / 2} s is taken)`) +
      '\n',
  );
  startDemoAgents({
    sidecars,
    handsOn,
    alertsTo: topology.alerts_to,
    stallS,
    say: (line) => console.log(line),
    signal: demo.signal,
  }).catch((err) => console.error(`demo agents stopped: ${err.message}`));
} catch (err) {
  console.error(`local stack failed to start: ${err.message}`);
  stop(1);
}

function stop(code = 0) {
  if (stopping) return;
  stopping = true;
  // one killed by a signal has no exit code, only its signal
  const running = children.filter((c) => c.exitCode === null && c.signalCode === null);
  for (const c of running) c.kill('SIGTERM');
  // the demo's polls stay in flight until the sidecars are gone: a poll given up at a sidecar
  // just before it stops left the adapter waiting 30 s (AGW_WRITE_TIMEOUT_MS) to exit
  Promise.all(running.map((c) => new Promise((r) => c.once('exit', r)))).then(() => {
    demo.abort();
    process.exit(code);
  });
}
