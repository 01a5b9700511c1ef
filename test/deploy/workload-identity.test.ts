/**
 * The Kubernetes manifests give every agent a workload identity and no static token
 * (docs/deploy.md, "Workload identity"): every overlay builds (k8s/, k8s/base, k8s/postgres,
 * k8s/cert-manager, and PostgreSQL with TLS as an operator's kustomization puts them together);
 * no Secret holds an agent's token; each agent pod runs as a ServiceAccount of its own and its
 * sidecar reads a projected token of it (audience agent-gateway, one hour) from
 * AGW_AGENT_TOKEN_FILE; each topology agent has no token hash and a `subject` that is its pod's
 * ServiceAccount; the adapter reads the key set from a ConfigMap it mounts, with an issuer and the
 * tokens' audience. And it works as built: the adapter's settings, read from the rendered env
 * with the files where the kubelet puts them (the key set replaced by a real one, as the
 * operator does), take a token like the kubelet's for the pod's ServiceAccount as that pod's
 * agent, and refuse one for another audience; the shipped placeholder key set is refused at start.
 */
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { JwtVerifier } from '../../src/adapter/jwt.js';
import { loadSecurity } from '../../src/adapter/security.js';
import { ADAPTER_SETTINGS, AdapterSettingsSchema } from '../../src/adapter/settings.js';
import { agentForSubject, devToken, loadTopology } from '../../src/adapter/topology.js';
import { readSettings } from '../../src/cli/settings.js';
import { SIDECAR_SETTINGS, SidecarSettingsSchema } from '../../src/sidecar/settings.js';
import {
  adapterContainer,
  agentPods,
  containersOf,
  type Doc,
  envValue,
  type FileSource,
  fileSource,
  find,
  K8S,
  KUBECTL,
  materialize,
  objectData,
  ofKind,
  parseBuild,
  ROOT,
  writeKustomization,
} from '../helpers/rendered.js';
import { tempDir } from '../helpers/topology.js';

const { dir: tmp, cleanup } = tempDir('agw-identity-');
afterAll(cleanup);

/** The overlays, and one of an operator's own: PostgreSQL with TLS. */
const OVERLAYS: Record<string, () => string> = {
  'k8s/': () => K8S,
  'k8s/base': () => join(K8S, 'base'),
  'k8s/postgres': () => join(K8S, 'postgres'),
  'k8s/cert-manager': () => join(K8S, 'cert-manager'),
  'k8s/postgres + k8s/cert-manager/tls': () => {
    const dir = join(tmp, 'postgres-tls');
    mkdirSync(dir, { recursive: true });
    writeKustomization(dir, {
      namespace: 'agents',
      resources: ['k8s/postgres'],
      components: ['k8s/cert-manager/tls'],
    });
    return dir;
  },
};
const built = new Map<string, Doc[]>();
const build = (name: string): Doc[] => {
  let objects = built.get(name);
  if (objects === undefined) {
    // as `kubectl apply -k` builds: no flag (no --load-restrictor)
    const text = execFileSync(KUBECTL!, ['kustomize', OVERLAYS[name]!()], { encoding: 'utf8' });
    objects = parseBuild(text);
    built.set(name, objects);
  }
  return objects;
};
const NAMESPACE = 'agents';
const AUDIENCE_DEFAULT = ADAPTER_SETTINGS.jwtAudience.default;

/** The topology the adapter mounts, from the built Secret, loaded as the adapter loads it. */
function topologyOf(objects: Doc[], name: string) {
  const text = objectData(objects, 'Secret', 'agent-gateway-topology', 'topology.yaml');
  const file = join(tmp, `${name.replace(/[^a-z]+/g, '-')}-topology.yaml`);
  writeFileSync(file, text);
  return { raw: parseYaml(text), topology: loadTopology(file) };
}

/** A key pair standing in for the cluster's service-account signing key, and its JWKS. */
const signing = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const JWKS = JSON.stringify({
  keys: [{ ...signing.publicKey.export({ format: 'jwk' }), kid: 'sa-1', alg: 'ES256', use: 'sig' }],
});
/** A token as the kubelet gets it for a pod's projected volume. */
const projectedToken = (o: { iss: string; aud: string; sub: string; expiresInS: number }) =>
  new SignJWT({ 'kubernetes.io': { namespace: NAMESPACE } })
    .setProtectedHeader({ alg: 'ES256', kid: 'sa-1' })
    .setIssuer(o.iss)
    .setAudience(o.aud)
    .setSubject(o.sub)
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + o.expiresInS)
    .sign(signing.privateKey);

/** File contents as the kubelet writes them: the built objects', the real key set for the JWKS. */
const contentFrom =
  (objects: Doc[]) =>
  (source: FileSource): string => {
    if (source.kind === 'ServiceAccountToken') return 'eyJhbGciOiJFUzI1NiJ9.e30.c2ln';
    if (source.kind === 'ConfigMap' && source.name === 'agent-gateway-jwks') return JWKS;
    const text = objectData(objects, source.kind, source.name, source.key);
    if (text === undefined) throw new Error(`${source.kind}/${source.name} has no ${source.key}`);
    return text;
  };

describe.runIf(KUBECTL !== undefined)('workload identity in k8s/ (every overlay)', () => {
  it('builds every overlay, and the namespaced objects land in one namespace', () => {
    for (const name of Object.keys(OVERLAYS)) {
      const objects = build(name);
      expect(objects.length, name).toBeGreaterThan(0);
      for (const o of objects)
        if (o.kind !== 'Namespace')
          expect(o.metadata.namespace, `${name}: ${o.kind}/${o.metadata.name}`).toBe(NAMESPACE);
    }
  });

  it('holds no agent token: no Secret of one, none generated, none mounted for the sidecar', () => {
    const devTokens = ['orchestrator', 'pm', 'engineering', 'qa', 'research', 'growth'].map(
      devToken,
    );
    for (const name of Object.keys(OVERLAYS)) {
      const objects = build(name);
      for (const secret of ofKind(objects, 'Secret')) {
        const where = `${name}: Secret/${secret.metadata.name}`;
        expect(Object.keys(secret.data ?? {}), where).not.toContain('token');
        expect(secret.metadata.name, where).not.toMatch(/token/);
        for (const [key, value] of Object.entries(secret.data ?? {})) {
          const text = Buffer.from(String(value), 'base64').toString('utf8');
          for (const t of devTokens) expect(text.includes(t), `${where} ${key}`).toBe(false);
        }
      }
      // the sidecar's token file is never a Secret's key
      for (const { pod, sidecar } of agentPods(objects)) {
        const source = fileSource(pod, sidecar, envValue(sidecar, 'AGW_AGENT_TOKEN_FILE'));
        expect(source?.kind, name).toBe('ServiceAccountToken');
        expect(envValue(sidecar, 'AGW_AGENT_TOKEN'), name).toBeUndefined();
      }
    }
    // nor does any kustomization under k8s/ generate one
    const kustomizations = (d: string): string[] =>
      readdirSync(d, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory()
          ? kustomizations(join(d, e.name))
          : e.name === 'kustomization.yaml'
            ? [join(d, e.name)]
            : [],
      );
    for (const file of kustomizations(K8S)) {
      const k = parseYaml(readFileSync(file, 'utf8'));
      for (const g of k.secretGenerator ?? [])
        for (const entry of [...(g.literals ?? []), ...(g.files ?? [])])
          expect(String(entry), `${file}: ${g.name}`).not.toMatch(/^token=|tokens\//);
    }
  });

  it('runs each agent pod as its own ServiceAccount, its sidecar reading a projected token of it', () => {
    for (const name of Object.keys(OVERLAYS)) {
      const objects = build(name);
      const pods = agentPods(objects);
      expect(pods.length, name).toBeGreaterThan(0);
      const { pod: adapterPod, adapter } = adapterContainer(objects);
      const audience = envValue(adapter, 'AGW_JWT_AUDIENCE') ?? AUDIENCE_DEFAULT;
      expect(adapterPod.automountServiceAccountToken, name).toBe(false);
      const accounts = new Set<string>();
      for (const { pod, sidecar, agent } of pods) {
        const where = `${name}: agent ${agent}`;
        // its own identity, never the namespace's default, and no API token in the pod
        expect(pod.serviceAccountName, where).toBeDefined();
        expect(pod.serviceAccountName, where).not.toBe('default');
        expect(accounts.has(pod.serviceAccountName), `${where} shares its ServiceAccount`).toBe(
          false,
        );
        accounts.add(pod.serviceAccountName);
        expect(pod.automountServiceAccountToken, where).toBe(false);
        const account = find(objects, 'ServiceAccount', pod.serviceAccountName);
        expect(account, `${where}: ServiceAccount ${pod.serviceAccountName}`).toBeDefined();
        expect(account.automountServiceAccountToken, where).toBe(false);
        // the token: for the adapter's audience, one hour, at AGW_AGENT_TOKEN_FILE
        const file = envValue(sidecar, 'AGW_AGENT_TOKEN_FILE');
        expect(fileSource(pod, sidecar, file), where).toEqual({
          kind: 'ServiceAccountToken',
          audience: 'agent-gateway',
          expirationSeconds: 3600,
        });
        expect(audience, where).toBe('agent-gateway');
        // only the sidecar mounts it: the agent's runtime never holds the credential
        const mount = sidecar.volumeMounts.find((m: Doc) => file.startsWith(`${m.mountPath}/`));
        expect(mount.readOnly, where).toBe(true);
        for (const c of containersOf(pod))
          if (c !== sidecar)
            expect(
              (c.volumeMounts ?? []).some((m: Doc) => m.name === mount.name),
              `${where}: ${c.name} mounts the token`,
            ).toBe(false);
      }
    }
  });

  it('names each topology agent by a subject, its pod ServiceAccount, and holds no token hash', () => {
    for (const name of Object.keys(OVERLAYS)) {
      const objects = build(name);
      const { raw, topology } = topologyOf(objects, name);
      for (const a of raw.agents) {
        expect(a.token_sha256, `${name}: ${a.id}`).toBeUndefined();
        // the convention a copy of the agent pod follows: ServiceAccount agent-<id>
        expect(a.subject, `${name}: ${a.id}`).toBe(
          `system:serviceaccount:${NAMESPACE}:agent-${a.id}`,
        );
      }
      for (const { pod, agent } of agentPods(objects)) {
        const sub = `system:serviceaccount:${NAMESPACE}:${pod.serviceAccountName}`;
        expect(agentForSubject(topology, sub)?.id, `${name}: ${sub}`).toBe(agent);
      }
    }
  });

  it('gives the adapter the key set from a ConfigMap, an issuer, and the topology from a Secret', () => {
    for (const name of Object.keys(OVERLAYS)) {
      const objects = build(name);
      const { pod, adapter } = adapterContainer(objects);
      const jwks = fileSource(pod, adapter, envValue(adapter, 'AGW_JWT_JWKS'));
      expect(jwks, name).toEqual({
        kind: 'ConfigMap',
        name: 'agent-gateway-jwks',
        key: 'jwks.json',
      });
      expect(
        objectData(objects, 'ConfigMap', 'agent-gateway-jwks', 'jwks.json'),
        name,
      ).toBeDefined();
      expect(new URL(envValue(adapter, 'AGW_JWT_ISSUER')).protocol, name).toBe('https:');
      expect(fileSource(pod, adapter, envValue(adapter, 'AGW_TOPOLOGY')), name).toEqual({
        kind: 'Secret',
        name: 'agent-gateway-topology',
        key: 'topology.yaml',
      });
    }
  });

  it('ships a placeholder key set, which the adapter refuses at start', () => {
    const objects = build('k8s/base');
    const text = objectData(objects, 'ConfigMap', 'agent-gateway-jwks', 'jwks.json');
    expect(text).toMatch(/^REPLACE-with-/);
    const file = join(tmp, 'placeholder-jwks.json');
    writeFileSync(file, text);
    const { adapter } = adapterContainer(objects);
    expect(
      () =>
        new JwtVerifier({
          jwks: file,
          issuer: envValue(adapter, 'AGW_JWT_ISSUER'),
          audience: envValue(adapter, 'AGW_JWT_AUDIENCE'),
        }),
    ).toThrow(/AGW_JWT_JWKS: .*not JSON/);
  });

  it('takes a projected token of the pod ServiceAccount as its agent, once the key set is real', async () => {
    for (const name of ['k8s/base', 'k8s/postgres']) {
      const objects = build(name);
      const { pod, adapter } = adapterContainer(objects);
      const dir = join(tmp, `adapter-${name.replace(/[^a-z]+/g, '-')}`);
      const env = materialize(pod, adapter, dir, contentFrom(objects));
      const { settings } = readSettings(ADAPTER_SETTINGS, AdapterSettingsSchema, [], env);
      const topology = loadTopology(settings.topology);
      const security = loadSecurity(settings, topology);
      expect(security.jwt, name).toBeDefined();
      for (const { pod: agentPod, sidecar, agent } of agentPods(objects)) {
        const source = fileSource(agentPod, sidecar, envValue(sidecar, 'AGW_AGENT_TOKEN_FILE'));
        if (source?.kind !== 'ServiceAccountToken') throw new Error('no projected token');
        const sub = `system:serviceaccount:${NAMESPACE}:${agentPod.serviceAccountName}`;
        const token = await projectedToken({
          iss: settings.jwtIssuer!,
          aud: source.audience!,
          sub,
          expiresInS: source.expirationSeconds,
        });
        const subject = await security.jwt!.subject(token);
        expect(agentForSubject(topology, subject)?.id, `${name}: ${agent}`).toBe(agent);
        // a token of the same account for another audience (the API server's) is refused
        const other = await projectedToken({
          iss: settings.jwtIssuer!,
          aud: 'https://kubernetes.default.svc.cluster.local',
          sub,
          expiresInS: 3600,
        });
        await expect(security.jwt!.subject(other)).rejects.toMatchObject({ code: 'unauthorized' });
        // and the sidecar reads its token from the file it is given, to re-read it as it turns
        const sidecarEnv = materialize(agentPod, sidecar, join(dir, agent), () => token);
        const s = readSettings(SIDECAR_SETTINGS, SidecarSettingsSchema, [], sidecarEnv).settings;
        expect(s.agentToken).toBe(token);
        expect(s.agentTokenFile).toBe(sidecarEnv.AGW_AGENT_TOKEN_FILE);
      }
    }
  });

  it('tells the operator how to fill the key set and the issuer', () => {
    const guide = readFileSync(join(ROOT, 'docs/deploy.md'), 'utf8');
    expect(guide).toContain('kubectl get --raw /openid/v1/jwks >k8s/base/jwks.json');
    expect(guide).toContain('kubectl get --raw /.well-known/openid-configuration');
    const k = parseYaml(readFileSync(join(K8S, 'base/kustomization.yaml'), 'utf8'));
    const jwks = k.configMapGenerator.find((g: Doc) => g.name === 'agent-gateway-jwks');
    expect(jwks.literals).toEqual([expect.stringMatching(/^jwks\.json=REPLACE-with-/)]);
  });
});
