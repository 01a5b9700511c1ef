/**
 * The deployment files agree with the code: every manifest parses, every AGW_* variable they
 * set is a setting of the program they run, probes point at endpoints that exist (and reach
 * them: no probe names a `host`, which the kubelet resolves on the node, and the loopback-only
 * sidecar is probed by exec of `agent-gateway wait-ready` inside its container), the native
 * sidecar fields are there, no pod mounts a service account token, the images build on one
 * pinnable base, and image names and ports agree across files, and k8s/ holds no token, only
 * placeholders the adapter refuses. The systemd units pass `systemd-analyze verify` where it is
 * available.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { ADAPTER_SETTINGS } from '../../src/adapter/settings.js';
import { devToken, loadTopology, TopologyError } from '../../src/adapter/topology.js';
import { runWaitReady } from '../../src/cli/wait-ready.js';
import { SIDECAR_SETTINGS } from '../../src/sidecar/settings.js';
import { CLI } from '../helpers/cli.js';
import { sha256Hex, tempDir } from '../helpers/topology.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const k8s = join(root, 'k8s');
// biome-ignore lint/suspicious/noExplicitAny: manifests are checked field by field below
type Doc = any;
const docs = (file: string): Doc[] =>
  parseAllDocuments(readFileSync(join(k8s, file), 'utf8')).map((d) => {
    expect(d.errors, `${file}: ${d.errors.map((e) => e.message).join('; ')}`).toEqual([]);
    return d.toJS();
  });
const envNames = (settings: Record<string, { env: string }>) =>
  new Set(Object.values(settings).map((s) => s.env));
const ADAPTER_ENV = envNames(ADAPTER_SETTINGS);
const SIDECAR_ENV = envNames(SIDECAR_SETTINGS);
const ENDPOINTS = {
  adapter: new Set(['/health', '/healthz', '/metrics']),
  sidecar: new Set(['/readyz', '/healthz', '/metrics']),
};
const program = (c: Doc): 'adapter' | 'sidecar' =>
  String(c.image).includes('sidecar') ? 'sidecar' : 'adapter';
const listenPort = (c: Doc) =>
  Number(String(c.env?.find((e: Doc) => e.name === 'AGW_LISTEN')?.value).split(':')[1]);
const gatewayContainers = (pod: Doc): Doc[] =>
  [...(pod.initContainers ?? []), ...pod.containers].filter((c: Doc) =>
    String(c.image).includes('agent-gateway'),
  );
const podSpecs = (file: string) =>
  docs(file)
    .map((d) => (d.kind === 'Pod' ? d.spec : d.spec?.template?.spec))
    .filter((s): s is Doc => s !== undefined);
const PROBES = ['startupProbe', 'readinessProbe', 'livenessProbe'] as const;
const probesOf = (c: Doc): [string, Doc][] =>
  PROBES.filter((k) => c[k] !== undefined).map((k) => [k, c[k]]);
/**
 * An exec probe of `agent-gateway wait-ready --url URL --timeout S`, as the pieces a check needs
 * (undefined when the probe is anything else).
 */
const waitReady = (probe: Doc) => {
  const cmd: unknown[] | undefined = probe?.exec?.command;
  if (cmd?.[0] !== 'agent-gateway' || cmd[1] !== 'wait-ready') return undefined;
  const args = cmd.slice(2).map(String);
  const flag = (name: string) => args[args.indexOf(name) + 1];
  const url = new URL(String(flag('--url')));
  return { args, url, timeoutS: Number(flag('--timeout')) };
};
const POD_FILES = ['adapter.yaml', 'agent-pod.yaml', 'podman/agent-pod.yaml'];

describe('k8s/ and k8s/podman/', () => {
  const files = [
    'kustomization.yaml',
    'namespace.yaml',
    'adapter.yaml',
    'agent-pod.yaml',
    'network-policy.yaml',
    'topology.yaml',
    'podman/agent-pod.yaml',
  ];

  it('every manifest parses, and the kustomization lists files that exist', () => {
    for (const f of files) expect(docs(f).length).toBeGreaterThan(0);
    const [k] = docs('kustomization.yaml');
    for (const r of k.resources) expect(existsSync(join(k8s, r)), r).toBe(true);
    for (const g of k.secretGenerator)
      for (const f of g.files ?? []) expect(existsSync(join(k8s, f)), f).toBe(true);
  });

  it('sets only AGW_* variables the program knows, and probes endpoints that exist on the right port', () => {
    for (const f of POD_FILES) {
      for (const pod of podSpecs(f)) {
        for (const c of gatewayContainers(pod)) {
          const p = program(c);
          for (const e of c.env ?? []) {
            if (String(e.name).startsWith('AGW_')) {
              expect(
                (p === 'adapter' ? ADAPTER_ENV : SIDECAR_ENV).has(e.name),
                `${f}: ${c.name} sets ${e.name}`,
              ).toBe(true);
            }
          }
          const port = listenPort(c);
          for (const [kind, probe] of probesOf(c)) {
            const where = `${f}: ${c.name} ${kind}`;
            const exec = waitReady(probe);
            if (exec !== undefined) {
              // run inside the container: the loopback is the pod's, the port the listen port
              expect(exec.url.hostname, where).toBe('127.0.0.1');
              expect(Number(exec.url.port), where).toBe(port);
              expect(ENDPOINTS[p].has(exec.url.pathname), `${where} probes ${exec.url}`).toBe(true);
              continue;
            }
            expect(probe.httpGet, `${where}: httpGet or exec of wait-ready`).toBeDefined();
            expect(
              ENDPOINTS[p].has(probe.httpGet.path),
              `${where} probes ${probe.httpGet.path}`,
            ).toBe(true);
            const named = c.ports?.find((x: Doc) => x.name === probe.httpGet.port)?.containerPort;
            expect(named ?? probe.httpGet.port, `${where} port`).toBe(port);
            // the kubelet connects to the pod's IP: the program must listen there
            expect(String(c.env?.find((e: Doc) => e.name === 'AGW_LISTEN')?.value), where).toMatch(
              /^0\.0\.0\.0:/,
            );
          }
        }
      }
    }
  });

  it('has no httpGet or tcpSocket probe that names a host (the kubelet resolves it on the node)', () => {
    for (const f of POD_FILES) {
      for (const pod of podSpecs(f)) {
        for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
          for (const [kind, probe] of probesOf(c)) {
            for (const handler of ['httpGet', 'tcpSocket'])
              expect(probe[handler]?.host, `${f}: ${c.name} ${kind}.${handler}.host`).toBe(
                undefined,
              );
          }
        }
      }
    }
  });

  it('probes the loopback-only sidecar by exec of wait-ready, with timeouts that fit', async () => {
    const [pod] = podSpecs('agent-pod.yaml');
    const sidecar = pod.initContainers.find((c: Doc) => c.name === 'gateway-sidecar');
    expect(listenPort(sidecar)).toBe(7070);
    expect(sidecar.env.find((e: Doc) => e.name === 'AGW_LISTEN').value).toMatch(/^127\.0\.0\.1:/);
    const startup = waitReady(sidecar.startupProbe);
    const liveness = waitReady(sidecar.livenessProbe);
    expect(startup?.url.href).toBe('http://127.0.0.1:7070/readyz');
    expect(liveness?.url.href).toBe('http://127.0.0.1:7070/healthz');
    expect(sidecar.readinessProbe).toBeUndefined();
    for (const [probe, exec] of [
      [sidecar.startupProbe, startup],
      [sidecar.livenessProbe, liveness],
    ] as const) {
      // node's start, the wait itself, and one last request (2 s) end before the kubelet's kill
      expect(exec!.timeoutS + 3).toBeLessThanOrEqual(probe.timeoutSeconds);
      expect(probe.timeoutSeconds).toBeLessThanOrEqual(probe.periodSeconds);
    }
    // the start gate leaves a slow adapter at least 5 minutes before the sidecar is restarted
    expect(
      sidecar.startupProbe.periodSeconds * sidecar.startupProbe.failureThreshold,
    ).toBeGreaterThanOrEqual(300);
    // Podman's pod: the same liveness command (Podman makes it the healthcheck)
    const [podman] = podSpecs('podman/agent-pod.yaml');
    const podmanSidecar = podman.containers.find((c: Doc) => c.name === 'gateway-sidecar');
    expect(podmanSidecar.livenessProbe.exec.command).toEqual(sidecar.livenessProbe.exec.command);
    // the arguments are ones wait-ready takes: each probe passes against a server that answers
    const server = createServer((_req, res) => res.end('ok'));
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    try {
      const { port } = server.address() as AddressInfo;
      for (const exec of [startup!, liveness!]) {
        const args = exec.args.map((a) => a.replace('127.0.0.1:7070', `127.0.0.1:${port}`));
        expect(await runWaitReady(args)).toBe(0);
      }
    } finally {
      server.close();
    }
  });

  it('mounts no service account token in the agent pod or the adapter', () => {
    // neither program speaks to the Kubernetes API (Podman mounts no token either way)
    for (const f of ['agent-pod.yaml', 'adapter.yaml'])
      for (const pod of podSpecs(f)) expect(pod.automountServiceAccountToken, f).toBe(false);
  });

  it('builds both images on one base, pinnable by digest, with agent-gateway on PATH', () => {
    const dockerfile = readFileSync(join(root, 'docker/Dockerfile'), 'utf8');
    const args = new Map(
      [...dockerfile.matchAll(/^ARG (\w+)=(\S+)$/gm)].map((m) => [m[1]!, m[2]!] as const),
    );
    expect(args.get('NODE_BASE')).toMatch(/^node:20-bookworm-slim(@sha256:[0-9a-f]{64})?$/);
    const stages = new Set<string>();
    for (const m of dockerfile.matchAll(/^FROM (\S+)(?: AS (\S+))?$/gm)) {
      // every base is the build arg (or a stage built on it), never a name written in place
      const arg = /^\$\{(\w+)\}$/.exec(m[1]!)?.[1];
      expect(arg === 'NODE_BASE' || arg === 'BUILD_BASE' || stages.has(m[1]!), m[0]).toBe(true);
      if (m[2]) stages.add(m[2]);
    }
    expect(stages).toEqual(new Set(['build', 'runtime', 'adapter', 'sidecar']));
    expect(args.get('BUILD_BASE')).toMatch(/^\$\{NODE_BASE\}$/);
    // the probes' `agent-gateway`: a link to main.js, which runs as a script
    expect(dockerfile).toMatch(/ln -s \/app\/dist\/cli\/main\.js \/usr\/local\/bin\/agent-gateway/);
    expect(dockerfile).toMatch(/chmod 0755 dist\/cli\/main\.js/);
    expect(readFileSync(join(root, 'src/cli/main.ts'), 'utf8')).toMatch(
      /^#!\/usr\/bin\/env node\n/,
    );
    expect(readFileSync(join(root, 'test/e2e/podman.sh'), 'utf8')).toContain(
      '--build-arg "NODE_BASE=$BASE"',
    );
  });

  it('runs the sidecar as a native sidecar gated on /readyz, and the agent behind it', () => {
    const [pod] = podSpecs('agent-pod.yaml');
    const sidecar = pod.initContainers.find((c: Doc) => c.name === 'gateway-sidecar');
    expect(sidecar.restartPolicy).toBe('Always');
    expect(waitReady(sidecar.startupProbe)?.url.pathname).toBe('/readyz');
    expect(pod.volumes.find((v: Doc) => v.name === 'journal').hostPath).toEqual({
      path: '/run/systemd/journal/socket',
      type: 'Socket',
    });
    const env = Object.fromEntries(sidecar.env.map((e: Doc) => [e.name, e]));
    expect(env.POD_NAME.valueFrom.fieldRef.fieldPath).toBe('metadata.name');
    expect(env.POD_NAMESPACE.valueFrom.fieldRef.fieldPath).toBe('metadata.namespace');
    // Podman: an ordinary container, and the agent waits for it
    const [podman] = podSpecs('podman/agent-pod.yaml');
    expect(podman.initContainers).toBeUndefined();
    expect(podman.containers.find((c: Doc) => c.name === 'agent').args.join(' ')).toContain(
      'wait-ready --url http://127.0.0.1:7070/readyz',
    );
    // the token as a host file (Podman 4.3 mangles secret volumes), where the sidecar reads it
    const podmanSidecar = podman.containers.find((c: Doc) => c.name === 'gateway-sidecar');
    const tokenFile = podmanSidecar.env.find((e: Doc) => e.name === 'AGW_AGENT_TOKEN_FILE').value;
    expect(podmanSidecar.volumeMounts.find((m: Doc) => m.name === 'token').mountPath).toBe(
      tokenFile,
    );
    expect(podman.volumes.find((v: Doc) => v.name === 'token').hostPath.type).toBe('File');
  });

  it('agrees on images, ports and the adapter address across files', () => {
    const adapterDeployment = docs('adapter.yaml').find((d) => d.kind === 'Deployment');
    const adapterService = docs('adapter.yaml').find((d) => d.kind === 'Service');
    expect(adapterDeployment.spec.strategy.type).toBe('Recreate');
    expect(adapterDeployment.spec.replicas).toBe(1);
    const adapter = adapterDeployment.spec.template.spec.containers[0];
    expect(adapter.image).toMatch(/^agent-gateway-adapter:/);
    expect(adapter.ports[0].containerPort).toBe(listenPort(adapter));
    expect(adapterService.spec.ports[0].port).toBe(listenPort(adapter));
    const [pod] = podSpecs('agent-pod.yaml');
    const sidecar = pod.initContainers[0];
    expect(sidecar.image).toMatch(/^agent-gateway-sidecar:/);
    const adapterUrl = sidecar.env.find((e: Doc) => e.name === 'AGW_ADAPTER_URL').value;
    expect(adapterUrl).toBe(
      `http://${adapterService.metadata.name}:${adapterService.spec.ports[0].port}`,
    );
    const [k] = docs('kustomization.yaml');
    expect(k.images.map((i: Doc) => i.name).sort()).toEqual([
      'agent-gateway-adapter',
      'agent-gateway-sidecar',
    ]);
    const dockerfile = readFileSync(join(root, 'docker/Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/FROM runtime AS adapter[\s\S]*EXPOSE 8080/);
    expect(dockerfile).toMatch(/FROM runtime AS sidecar[\s\S]*EXPOSE 7070/);
    const policy = docs('network-policy.yaml')[0];
    expect(policy.spec.ingress[0].ports[0].port).toBe(listenPort(adapter));
  });
});

describe('tokens in k8s/', () => {
  const [topology] = docs('topology.yaml');
  const ids: string[] = topology.agents.map((a: Doc) => a.id);
  const devHashes = new Set(ids.map((id) => sha256Hex(devToken(id))));

  it('ships placeholders in the topology, never a hash, and the adapter refuses them', () => {
    for (const a of topology.agents) {
      expect(a.token_sha256, a.id).toBe(`REPLACE-with-sha256-of-${a.id}-token`);
      expect(devHashes.has(String(a.token_sha256).toLowerCase()), a.id).toBe(false);
    }
    // not even AGW_ALLOW_DEV_TOKENS lets the shipped file through
    for (const allowDevTokens of [false, true]) {
      expect(() => loadTopology(join(k8s, 'topology.yaml'), { allowDevTokens })).toThrow(
        /agents\.0\.token_sha256: must be the hex SHA-256 .*\(agent "orchestrator"\)/,
      );
    }
  });

  it('generates no Secret from a literal token: placeholders only', () => {
    const [k] = docs('kustomization.yaml');
    const literals: string[] = k.secretGenerator.flatMap((g: Doc) => g.literals ?? []);
    expect(literals.length).toBeGreaterThan(0);
    for (const l of literals) expect(l, l).toMatch(/^token=REPLACE-with-[a-z0-9._-]+-token$/);
    // and nothing under k8s/ names a development token
    const files = (d: string): string[] =>
      readdirSync(d, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? files(join(d, e.name)) : [join(d, e.name)],
      );
    for (const f of files(k8s)) {
      const text = readFileSync(f, 'utf8');
      expect(text, f).not.toMatch(/dev-token-[a-z]/);
      for (const h of devHashes)
        expect(text.includes(h), `${f} holds a development hash`).toBe(false);
      // nor lets them through (a comment may say that it must not)
      const uncommented = text
        .split('\n')
        .filter((l) => !l.trimStart().startsWith('#'))
        .join('\n');
      expect(uncommented, f).not.toContain('AGW_ALLOW_DEV_TOKENS');
    }
  });

  it('keeps the tokens docs/deploy.md makes out of git, where kustomize may read them', () => {
    expect(readFileSync(join(k8s, '.gitignore'), 'utf8')).toMatch(/^\/tokens\/$/m);
    const guide = readFileSync(join(root, 'docs/deploy.md'), 'utf8');
    expect(guide).toContain('openssl rand -hex 32');
    expect(guide).toContain('sed -i "s/REPLACE-with-sha256-of-$id-token/$hash/" k8s/topology.yaml');
  });

  it('refuses the development hashes of examples/topology.yaml unless they are allowed', () => {
    const examples = join(root, 'examples/topology.yaml');
    expect(() => loadTopology(examples)).toThrow(TopologyError);
    expect(() => loadTopology(examples)).toThrow(/AGW_ALLOW_DEV_TOKENS=1/);
    expect(loadTopology(examples, { allowDevTokens: true }).agents.size).toBe(ids.length);
  });
});

describe('Quadlet units (k8s/podman/)', () => {
  const dir = join(k8s, 'podman');
  const unit = (f: string) => readFileSync(join(dir, f), 'utf8');
  const values = (text: string, key: string) =>
    [...text.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1]!);
  const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;

  it('run the adapter image of this version with known settings, on a network that is defined', () => {
    const adapter = unit('agent-gateway-adapter.container');
    expect(values(adapter, 'Image')).toEqual([`localhost/agent-gateway-adapter:${version}`]);
    expect(values(adapter, 'ContainerName')).toEqual(['agent-gateway-adapter']);
    for (const e of values(adapter, 'Environment')) {
      const name = e.split('=')[0]!;
      if (name.startsWith('AGW_')) expect(ADAPTER_ENV.has(name), name).toBe(true);
    }
    for (const line of ['Notify=true', 'ReadOnly=true', 'Restart=always', 'RestartSec=2'])
      expect(adapter).toContain(line);
    for (const f of ['agent-gateway-adapter.container', 'agent-engineering.kube'])
      for (const n of values(unit(f), 'Network'))
        expect(existsSync(join(dir, n)), `${f}: ${n}`).toBe(true);
    // the pod's sidecar finds the adapter by the container's name on that network
    const [pod] = podSpecs('podman/agent-pod.yaml');
    const sidecar = pod.containers.find((c: Doc) => c.name === 'gateway-sidecar');
    expect(sidecar.image).toBe(`localhost/agent-gateway-sidecar:${version}`);
    const listen = values(adapter, 'Environment').find((e) => e.startsWith('AGW_LISTEN='));
    const port = listen?.split(':').at(-1);
    expect(sidecar.env.find((e: Doc) => e.name === 'AGW_ADAPTER_URL').value).toBe(
      `http://agent-gateway-adapter:${port}`,
    );
  });
});

describe('systemd units', () => {
  const { dir, cleanup } = tempDir('agw-units-');
  afterAll(cleanup);
  const unitDir = join(k8s, 'systemd');
  const units = readdirSync(unitDir).filter((f) => f.endsWith('.service'));

  it('set only known AGW_* variables, and the adapter unit is Type=notify with the seed restart policy', () => {
    for (const u of units) {
      const text = readFileSync(join(unitDir, u), 'utf8');
      for (const m of text.matchAll(/^Environment=(AGW_[A-Z_]+)=/gm))
        expect(ADAPTER_ENV.has(m[1]!), `${u}: ${m[1]}`).toBe(true);
    }
    const adapter = readFileSync(join(unitDir, 'agent-gateway-adapter.service'), 'utf8');
    for (const line of [
      'Type=notify',
      'Restart=always',
      'RestartSec=2',
      'StartLimitIntervalSec=300',
      'StartLimitBurst=5',
    ]) {
      expect(adapter).toContain(line);
    }
    expect(adapter).toMatch(/^WatchdogSec=\d+/m);
  });

  it.runIf(existsSync('/usr/bin/systemd-analyze'))('pass systemd-analyze verify', () => {
    for (const u of units) {
      // verify checks that ExecStart is executable: point it at this checkout's build
      const text = readFileSync(join(unitDir, u), 'utf8').replace(
        /^ExecStart=\/usr\/bin\/agent-gateway/m,
        `ExecStart=${process.execPath} ${CLI}`,
      );
      const file = join(dir, u);
      writeFileSync(file, text);
      execFileSync('systemd-analyze', ['verify', file], { stdio: 'pipe' });
    }
  });
});
