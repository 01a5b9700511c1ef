/**
 * The Kubernetes manifests as the cluster gets them: the objects of `kubectl kustomize` (as
 * `kubectl apply -k` builds an overlay, no flag), and what a container's files are made of
 * (which Secret, ConfigMap or projected token a path in its env names), so that the tests can
 * check that a setting points at a file that is mounted, from the object that holds it. Shared
 * by test/deploy/*.test.ts; pure: each test runs kubectl itself.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const K8S = join(ROOT, 'k8s');

// biome-ignore lint/suspicious/noExplicitAny: manifests are checked field by field
export type Doc = any;

/** kubectl where it is installed (the build tests run only then). */
export const KUBECTL = ['/usr/bin/kubectl', '/usr/local/bin/kubectl'].find((p) => existsSync(p));

/**
 * The objects of `kubectl kustomize DIR`'s output. Each test file runs kubectl itself
 * (execFileSync), so that test/projects.ts, which reads a test's own text, counts it a system
 * test.
 */
export function parseBuild(text: string): Doc[] {
  return parseAllDocuments(text).map((d) => d.toJS());
}

/**
 * A kustomization of one's own in `dir` (outside the checkout), with `resources` and
 * `components` given as folders of the checkout: kustomize takes only relative paths, so they
 * are written relative to `dir`, as an operator's overlay beside k8s/ would name them.
 */
export function writeKustomization(
  dir: string,
  body: { namespace?: string; resources?: string[]; components?: string[] },
): void {
  const rel = (p: string) => relative(dir, join(ROOT, p));
  const lines = ['apiVersion: kustomize.config.k8s.io/v1beta1', 'kind: Kustomization'];
  if (body.namespace !== undefined) lines.push(`namespace: ${body.namespace}`);
  for (const key of ['resources', 'components'] as const)
    if (body[key] !== undefined) lines.push(`${key}:`, ...body[key].map((p) => `  - ${rel(p)}`));
  writeFileSync(join(dir, 'kustomization.yaml'), `${lines.join('\n')}\n`);
}

export const find = (objects: Doc[], kind: string, name: string): Doc =>
  objects.find((o) => o.kind === kind && o.metadata.name === name);

export const ofKind = (objects: Doc[], kind: string): Doc[] =>
  objects.filter((o) => o.kind === kind);

/** The Deployments (and Jobs) whose pods run a gateway container: the adapter's and agents'. */
export function gatewayPods(objects: Doc[]): { owner: Doc; pod: Doc }[] {
  return objects
    .filter((o) => o.spec?.template?.spec !== undefined)
    .map((owner) => ({ owner, pod: owner.spec.template.spec }))
    .filter(({ pod }) => containersOf(pod).some((c) => isGateway(c)));
}

export const containersOf = (pod: Doc): Doc[] => [...(pod.initContainers ?? []), ...pod.containers];
export const isGateway = (c: Doc) => String(c.image).includes('agent-gateway');
export const isSidecar = (c: Doc) => String(c.image).includes('agent-gateway-sidecar');
export const isAdapter = (c: Doc) => String(c.image).includes('agent-gateway-adapter');

/** The agent pods: a pod with the gateway sidecar, with it and its agent's id. */
export function agentPods(objects: Doc[]): { owner: Doc; pod: Doc; sidecar: Doc; agent: string }[] {
  return gatewayPods(objects).flatMap(({ owner, pod }) => {
    const sidecar = containersOf(pod).find(isSidecar);
    return sidecar === undefined
      ? []
      : [{ owner, pod, sidecar, agent: envValue(sidecar, 'AGW_AGENT_ID') }];
  });
}

export function adapterContainer(objects: Doc[]): { pod: Doc; adapter: Doc } {
  const deployment = find(objects, 'Deployment', 'agent-gateway-adapter');
  const pod = deployment.spec.template.spec;
  return { pod, adapter: pod.containers.find(isAdapter) };
}

export const envOf = (c: Doc, name: string): Doc => c.env?.find((e: Doc) => e.name === name);
export const envValue = (c: Doc, name: string): string => envOf(c, name)?.value;

/** What a file in a container is made of: a key of a Secret or ConfigMap, or a projected token. */
export type FileSource =
  | { kind: 'Secret' | 'ConfigMap'; name: string; key: string }
  | { kind: 'ServiceAccountToken'; audience: string | undefined; expirationSeconds: number };

/**
 * The source of `file` in `container` of `pod`: the volume mounted at the folder that holds it,
 * and in that volume the key (of `items`, or the file's own name when all keys are mounted) or
 * the projected token whose path it is. undefined when no such volume provides it (an emptyDir,
 * a claim, a hostPath, or nothing mounted there).
 */
export function fileSource(pod: Doc, container: Doc, file: string): FileSource | undefined {
  const mount = (container.volumeMounts ?? []).find(
    (m: Doc) => m.subPath === undefined && file.startsWith(`${m.mountPath}/`),
  );
  if (mount === undefined) return undefined;
  const path = file.slice(mount.mountPath.length + 1);
  const volume = (pod.volumes ?? []).find((v: Doc) => v.name === mount.name);
  if (volume === undefined) return undefined;
  const sources: Doc[] =
    volume.projected?.sources ??
    (volume.secret !== undefined
      ? [{ secret: { ...volume.secret, name: volume.secret.secretName } }]
      : volume.configMap !== undefined
        ? [{ configMap: volume.configMap }]
        : []);
  for (const s of sources) {
    const token = s.serviceAccountToken;
    if (token !== undefined && token.path === path)
      return {
        kind: 'ServiceAccountToken',
        audience: token.audience,
        // the API server's default when it is not set: one hour
        expirationSeconds: token.expirationSeconds ?? 3600,
      };
    for (const [field, kind] of [
      ['secret', 'Secret'],
      ['configMap', 'ConfigMap'],
    ] as const) {
      const src = s[field];
      if (src === undefined) continue;
      if (src.items !== undefined) {
        const item = src.items.find((i: Doc) => i.path === path);
        if (item !== undefined) return { kind, name: src.name, key: item.key };
      } else if (!path.includes('/')) {
        return { kind, name: src.name, key: path };
      }
    }
  }
  return undefined;
}

/**
 * Writes, under `dir`, every file a container's env names that a volume provides (its content
 * from `content`), and returns the env with those paths moved under `dir`: the container's
 * settings as the program would read them, with files where the kubelet would put them.
 * Variables set from a Secret or the Downward API (valueFrom) are left out.
 */
export function materialize(
  pod: Doc,
  container: Doc,
  dir: string,
  content: (source: FileSource, file: string) => string,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of container.env ?? []) {
    if (e.value === undefined || e.value === null) continue;
    const value = String(e.value);
    const source = value.startsWith('/') ? fileSource(pod, container, value) : undefined;
    if (source === undefined) {
      env[e.name] = value;
      continue;
    }
    const file = join(dir, value);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, content(source, value));
    env[e.name] = file;
  }
  return env;
}

/** The decoded value of a key of a Secret or ConfigMap in `objects`, or undefined. */
export function objectData(objects: Doc[], kind: string, name: string, key: string) {
  const o = find(objects, kind, name);
  if (o === undefined) return undefined;
  if (kind === 'Secret' && o.data?.[key] !== undefined)
    return Buffer.from(o.data[key], 'base64').toString('utf8');
  return o.data?.[key] ?? o.stringData?.[key];
}
