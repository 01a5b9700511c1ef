// What transport security and workload identity cost on the agent's path (docs/design/
// identity.md): acked sends through pm's sidecar at 1 and 16 in flight, with the sidecar and
// the adapter speaking plain HTTP with a static token (`plain`), mutual TLS with that token
// (`mtls`), and mutual TLS with a JWT as a projected service-account token would be (`mtls-jwt`:
// ES256, verified once and remembered); with --before DIR, also another checkout's build
// (plain) for "the door's new code costs nothing". Each stack runs at once and the measurements
// alternate between them, so drift on a noisy machine spreads evenly. CPU per message is the
// adapter's and the sidecar's user+system time over the measurement, from /proc. One JSON line
// per measurement.
//
//   node bench/path/security.mjs [--seconds 4] [--inflight 1,16] [--before DIR] [--rounds 2]

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import {
  AGENTS,
  benchDir,
  CLI,
  closedLoop,
  round,
  startAdapter,
  startProcess,
  tokenOf,
  uuidv7,
} from '../lib/lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '4' },
    inflight: { type: 'string', default: '1,16' },
    before: { type: 'string' },
    rounds: { type: 'string', default: '2' },
  },
});
const seconds = Number(values.seconds);
const levels = values.inflight.split(',').map(Number);
const ISSUER = 'https://bench.example';
const SUB = 'system:serviceaccount:agents:pm';

function openssl(args) {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}
/** A CA, the adapter's certificate (127.0.0.1) and pm's client certificate, in `dir`. */
function certificates(dir) {
  const p = (n) => join(dir, n);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl([
    'req',
    '-x509',
    ...ec,
    '-keyout',
    p('ca.key'),
    '-out',
    p('ca.crt'),
    '-days',
    '2',
    '-subj',
    '/CN=bench-ca',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
  ]);
  for (const [name, san] of [
    ['adapter', 'IP:127.0.0.1'],
    ['pm', 'URI:spiffe://bench/agent/pm'],
  ]) {
    writeFileSync(p(`${name}.ext`), `subjectAltName=${san}\n`);
    openssl([
      'req',
      '-new',
      ...ec,
      '-keyout',
      p(`${name}.key`),
      '-out',
      p(`${name}.csr`),
      '-subj',
      `/CN=${name}`,
    ]);
    openssl([
      'x509',
      '-req',
      '-in',
      p(`${name}.csr`),
      '-CA',
      p('ca.crt'),
      '-CAkey',
      p('ca.key'),
      '-CAcreateserial',
      '-days',
      '2',
      '-extfile',
      p(`${name}.ext`),
      '-out',
      p(`${name}.crt`),
    ]);
  }
  return p;
}

const key = await generateKeyPair('ES256');
const jwk = { ...(await exportJWK(key.publicKey)), kid: 'bench', alg: 'ES256' };
const jwt = await new SignJWT({})
  .setProtectedHeader({ alg: 'ES256', kid: 'bench' })
  .setIssuer(ISSUER)
  .setAudience('agent-gateway')
  .setSubject(SUB)
  .setIssuedAt()
  .setExpirationTime('2h')
  .sign(key.privateKey);

const modes = [
  ...(values.before ? [{ name: 'before', cli: `${values.before}/dist/cli/main.js` }] : []),
  { name: 'plain', cli: CLI },
  { name: 'mtls', cli: CLI, tls: true },
  { name: 'mtls-jwt', cli: CLI, tls: true, jwt: true },
];

const cpuMs = (pid) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime + stime, in ticks of 10 ms
};

const stacks = [];
for (const mode of modes) {
  const { dir, topology, cleanup } = benchDir();
  const p = certificates(dir);
  const adapterEnv = {};
  const sidecarEnv = {};
  if (mode.tls) {
    Object.assign(adapterEnv, {
      AGW_TLS_CERT: p('adapter.crt'),
      AGW_TLS_KEY: p('adapter.key'),
      AGW_TLS_CLIENT_CA: p('ca.crt'),
    });
    Object.assign(sidecarEnv, {
      AGW_ADAPTER_CA: p('ca.crt'),
      AGW_TLS_CLIENT_CERT: p('pm.crt'),
      AGW_TLS_CLIENT_KEY: p('pm.key'),
    });
  }
  let token = tokenOf('pm');
  if (mode.jwt) {
    const sha = (s) => createHash('sha256').update(s).digest('hex');
    writeFileSync(
      topology,
      JSON.stringify({
        agents: AGENTS.map((id) =>
          id === 'pm' ? { id, subject: SUB } : { id, token_sha256: sha(tokenOf(id)) },
        ),
        channels: [{ name: 'product', members: AGENTS.slice(1) }],
        alerts_to: 'orchestrator',
      }),
    );
    writeFileSync(p('jwks.json'), JSON.stringify({ keys: [jwk] }));
    Object.assign(adapterEnv, { AGW_JWT_JWKS: p('jwks.json'), AGW_JWT_ISSUER: ISSUER });
    token = jwt;
  }
  writeFileSync(p('token'), token);
  const adapter = await startAdapter(
    dir,
    topology,
    ['--queue-capacity', '1000000'],
    adapterEnv,
    mode.cli,
  );
  const sidecar = await startProcess(
    [mode.cli, 'sidecar', '--listen', '127.0.0.1:0'],
    {
      AGW_ADAPTER_URL: adapter.url,
      AGW_AGENT_ID: 'pm',
      AGW_AGENT_TOKEN_FILE: p('token'),
      AGW_OUTBOX: join(dir, 'outbox.db'),
      ...sidecarEnv,
    },
    (e) => e.msg?.includes('listening on'),
  );
  stacks.push({ mode, adapter, sidecar, cleanup });
}

const text = 'x'.repeat(1000);
for (let r = 0; r < Number(values.rounds); r++) {
  for (const inflight of levels) {
    const order = r % 2 === 0 ? stacks : [...stacks].reverse();
    for (const s of order) {
      const cpu0 = [cpuMs(s.adapter.pid), cpuMs(s.sidecar.pid)];
      const res = await closedLoop(s.sidecar.url, {
        inflight,
        seconds,
        warmupSeconds: 1,
        makeRequest: () => ({
          method: 'POST',
          path: '/v1/messages',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            idempotency_key: uuidv7(),
            to: '@qa',
            kind: 'status',
            payload: { text },
          }),
        }),
        check: (st) => st === 201,
      });
      const cpu1 = [cpuMs(s.adapter.pid), cpuMs(s.sidecar.pid)];
      // warm-up and measurement both spent CPU: per message of the whole run (sends/s × time)
      const sent = res.n * ((seconds + 1) / seconds);
      console.log(
        JSON.stringify({
          bench: 'security',
          round: r,
          mode: s.mode.name,
          inflight,
          ...res,
          adapter_cpu_us_per_msg: round(((cpu1[0] - cpu0[0]) * 1000) / sent, 0),
          sidecar_cpu_us_per_msg: round(((cpu1[1] - cpu0[1]) * 1000) / sent, 0),
        }),
      );
    }
  }
}
for (const s of stacks) {
  await s.sidecar.stop();
  await s.adapter.stop();
  s.cleanup();
}
