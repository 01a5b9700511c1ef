/**
 * Prometheus can collect both programs' metrics in the shipped deployment (docs/deploy.md,
 * "Metrics"), checked on what `kubectl kustomize` renders for every overlay (k8s/base,
 * k8s/cert-manager, k8s/postgres, k8s/monitoring, and PostgreSQL with the monitoring Component as
 * an operator's kustomization puts them together):
 * - every sidecar sets AGW_METRICS_LISTEN on the pod's address with a container port named
 *   `metrics` of its port, while its agent API stays on the loopback;
 * - every gateway pod carries prometheus.io/scrape, port and path annotations naming a port and
 *   a path its program serves /metrics on (https where the adapter serves TLS);
 * - the NetworkPolicies, evaluated as Kubernetes does, let a Prometheus pod in to exactly those
 *   ports, and no other pod of another namespace, while agents still reach the adapter;
 * - the monitoring Component builds on the base and on PostgreSQL into PodMonitors whose
 *   selectors and named ports find those pods and ports, and the base holds no object of
 *   prometheus-operator's CRDs;
 * - and as configured it answers: a sidecar run with the rendered AGW_LISTEN and
 *   AGW_METRICS_LISTEN hosts serves the annotated path to a connection from outside the
 *   loopback with the pod's address as Host, and its agent API is not reachable there.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { readSettings } from '../../src/cli/settings.js';
import { Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { listenSetting } from '../../src/settings.js';
import { startSidecar } from '../../src/sidecar/server.js';
import { SIDECAR_SETTINGS, SidecarSettingsSchema } from '../../src/sidecar/settings.js';
import { startTestAdapter } from '../helpers/adapter.js';
import {
  adapterContainer,
  agentPods,
  containersOf,
  type Doc,
  envValue,
  gatewayPods,
  isAdapter,
  isSidecar,
  K8S,
  KUBECTL,
  ofKind,
  parseBuild,
  writeKustomization,
} from '../helpers/rendered.js';
import { tempDir, tokenOf } from '../helpers/topology.js';

const { dir: tmp, cleanup } = tempDir('agw-metrics-scrape-');
afterAll(cleanup);

const OVERLAYS: Record<string, () => string> = {
  'k8s/base': () => join(K8S, 'base'),
  'k8s/cert-manager': () => join(K8S, 'cert-manager'),
  'k8s/postgres': () => join(K8S, 'postgres'),
  'k8s/monitoring': () => join(K8S, 'monitoring'),
  'k8s/postgres + k8s/monitoring/prometheus-operator': () => {
    const dir = join(tmp, 'postgres-monitoring');
    mkdirSync(dir, { recursive: true });
    writeKustomization(dir, {
      namespace: 'agents',
      resources: ['k8s/postgres'],
      components: ['k8s/monitoring/prometheus-operator'],
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
const ids = (objects: Doc[]) => objects.map((o) => `${o.kind}/${o.metadata.name}`).sort();

/** Where Prometheus runs, as the policies expect it (network-policy.yaml). */
const PROMETHEUS = {
  namespace: 'monitoring',
  namespaceLabels: { 'kubernetes.io/metadata.name': 'monitoring' },
  labels: { 'app.kubernetes.io/name': 'prometheus' },
};
/** A pod of another namespace that is not Prometheus. */
const STRANGER = {
  namespace: 'default',
  namespaceLabels: { 'kubernetes.io/metadata.name': 'default' },
  labels: { app: 'curious' },
};

// ---- a NetworkPolicy evaluator: ingress, as the API defines it -------------------------------

type Labels = Record<string, string>;
interface Source {
  namespace: string;
  namespaceLabels: Labels;
  labels: Labels;
}

/** A LabelSelector: matchLabels and matchExpressions; an empty one selects everything. */
function selects(selector: Doc, labels: Labels): boolean {
  if (selector === undefined || selector === null) return true;
  for (const [k, v] of Object.entries(selector.matchLabels ?? {}))
    if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const inValues = has && (e.values ?? []).includes(labels[e.key]);
    const ok =
      e.operator === 'In'
        ? inValues
        : e.operator === 'NotIn'
          ? !inValues
          : e.operator === 'Exists'
            ? has
            : e.operator === 'DoesNotExist'
              ? !has
              : false;
    if (!ok) return false;
  }
  return true;
}

/** Whether `from` may open a TCP connection to `port` of a pod with `labels` in `namespace`. */
function admitted(
  policies: Doc[],
  target: { namespace: string; labels: Labels; pod: Doc },
  port: number,
  from: Source,
): boolean {
  const selecting = policies.filter(
    (p) =>
      (p.metadata.namespace ?? 'default') === target.namespace &&
      (p.spec.policyTypes ?? ['Ingress']).includes('Ingress') &&
      selects(p.spec.podSelector, target.labels),
  );
  if (selecting.length === 0) return true; // no policy isolates the pod
  const peerOk = (peer: Doc) => {
    if (peer.ipBlock !== undefined) return false;
    const nsOk =
      peer.namespaceSelector === undefined
        ? from.namespace === target.namespace
        : selects(peer.namespaceSelector, from.namespaceLabels);
    const podOk = peer.podSelector === undefined || selects(peer.podSelector, from.labels);
    return nsOk && podOk;
  };
  const named = (name: string) =>
    containersOf(target.pod)
      .flatMap((c: Doc) => c.ports ?? [])
      .find((p: Doc) => p.name === name)?.containerPort;
  const portOk = (p: Doc) =>
    (p.protocol ?? 'TCP') === 'TCP' &&
    (p.port === undefined ||
      (typeof p.port === 'number'
        ? p.endPort === undefined
          ? p.port === port
          : port >= p.port && port <= p.endPort
        : named(p.port) === port));
  return selecting.some((p) =>
    (p.spec.ingress ?? []).some(
      (rule: Doc) =>
        (rule.from === undefined || rule.from.length === 0 || rule.from.some(peerOk)) &&
        (rule.ports === undefined || rule.ports.length === 0 || rule.ports.some(portOk)),
    ),
  );
}

/** The gateway pods of a build: each with its namespace, labels, annotations and program. */
function pods(objects: Doc[]) {
  return gatewayPods(objects)
    .filter(({ owner }) => owner.kind === 'Deployment')
    .map(({ owner, pod }) => {
      const sidecar = containersOf(pod).find(isSidecar);
      return {
        name: owner.metadata.name as string,
        namespace: owner.metadata.namespace as string,
        labels: owner.spec.template.metadata.labels as Labels,
        annotations: (owner.spec.template.metadata.annotations ?? {}) as Labels,
        pod,
        program: sidecar === undefined ? ('adapter' as const) : ('sidecar' as const),
      };
    });
}

/** The port a program serves /metrics on, from its container's env and ports. */
function metricsPort(p: ReturnType<typeof pods>[number]): number {
  if (p.program === 'adapter') {
    const adapter = containersOf(p.pod).find(isAdapter);
    return listenSetting.parse(envValue(adapter, 'AGW_LISTEN')).port;
  }
  const sidecar = containersOf(p.pod).find(isSidecar);
  return listenSetting.parse(envValue(sidecar, 'AGW_METRICS_LISTEN')).port;
}

describe.runIf(KUBECTL !== undefined)('metrics in the rendered manifests', () => {
  describe.each(Object.keys(OVERLAYS))('%s', (overlay) => {
    it('runs every sidecar with AGW_METRICS_LISTEN on the pod address and a port named metrics', () => {
      const agents = agentPods(build(overlay));
      expect(agents.length).toBeGreaterThan(0);
      for (const { owner, sidecar } of agents) {
        const where = `${owner.metadata.name}: ${sidecar.name}`;
        const listen = listenSetting.parse(envValue(sidecar, 'AGW_LISTEN'));
        const metrics = listenSetting.parse(envValue(sidecar, 'AGW_METRICS_LISTEN'));
        // Prometheus dials the pod's IP: the listener takes it; the agent API stays local
        expect(metrics.host, where).toBe('0.0.0.0');
        expect(listen.host, where).toBe('127.0.0.1');
        expect(metrics.port, where).not.toBe(listen.port);
        const port = (sidecar.ports ?? []).find((p: Doc) => p.name === 'metrics');
        expect(port?.containerPort, where).toBe(metrics.port);
        expect(port?.protocol ?? 'TCP', where).toBe('TCP');
        // read as the program reads its settings: a good value
        const { settings } = readSettings(SIDECAR_SETTINGS, SidecarSettingsSchema, [], {
          AGW_ADAPTER_URL: 'http://agent-gateway-adapter:8080',
          AGW_AGENT_ID: 'engineering',
          AGW_AGENT_TOKEN: 'x',
          AGW_LISTEN: envValue(sidecar, 'AGW_LISTEN'),
          AGW_METRICS_LISTEN: envValue(sidecar, 'AGW_METRICS_LISTEN'),
        });
        expect(settings.metricsListen, where).toEqual(metrics);
      }
    });

    it('annotates every gateway pod with where its /metrics is', () => {
      const all = pods(build(overlay));
      expect(all.map((p) => p.program).sort()).toEqual(
        expect.arrayContaining(['adapter', 'sidecar']),
      );
      for (const p of all) {
        const where = `${p.name}`;
        expect(p.annotations['prometheus.io/scrape'], where).toBe('true');
        expect(p.annotations['prometheus.io/path'], where).toBe('/metrics');
        expect(Number(p.annotations['prometheus.io/port']), where).toBe(metricsPort(p));
        // a port the pod declares: pod discovery makes a target of it
        expect(
          containersOf(p.pod).some((c: Doc) =>
            (c.ports ?? []).some((x: Doc) => x.containerPort === metricsPort(p)),
          ),
          where,
        ).toBe(true);
        // the scheme the program speaks there
        const adapter = containersOf(p.pod).find(isAdapter);
        const tls = adapter !== undefined && envValue(adapter, 'AGW_TLS_CERT') !== undefined;
        expect(p.annotations['prometheus.io/scheme'] ?? 'http', where).toBe(tls ? 'https' : 'http');
      }
    });

    it('lets Prometheus in to those ports and nothing more, and agents still to the adapter', () => {
      const objects = build(overlay);
      const policies = ofKind(objects, 'NetworkPolicy');
      const all = pods(objects);
      for (const p of all) {
        const port = metricsPort(p);
        expect(admitted(policies, p, port, PROMETHEUS), `Prometheus to ${p.name}:${port}`).toBe(
          true,
        );
        expect(
          admitted(policies, p, port, STRANGER),
          `another namespace to ${p.name}:${port}`,
        ).toBe(false);
      }
      for (const agent of all.filter((p) => p.program === 'sidecar')) {
        // nothing else of an agent pod is open, to Prometheus either
        for (const port of [7070, 8080])
          expect(admitted(policies, agent, port, PROMETHEUS), `${agent.name}:${port}`).toBe(false);
      }
      const adapter = all.find((p) => p.program === 'adapter')!;
      const agentPod = all.find((p) => p.program === 'sidecar')!;
      const asAgent = {
        namespace: agentPod.namespace,
        namespaceLabels: { 'kubernetes.io/metadata.name': agentPod.namespace },
        labels: agentPod.labels,
      };
      expect(admitted(policies, adapter, metricsPort(adapter), asAgent)).toBe(true);
    });
  });

  it('builds the monitoring Component on the base: two PodMonitors that find the pods and ports', () => {
    const k = parseYaml(readFileSync(join(K8S, 'monitoring/kustomization.yaml'), 'utf8'));
    expect(k.resources).toEqual(['../base']);
    expect(k.components).toEqual(['prometheus-operator']);
    const component = parseYaml(
      readFileSync(join(K8S, 'monitoring/prometheus-operator/kustomization.yaml'), 'utf8'),
    );
    expect(component.kind).toBe('Component');
    for (const overlay of ['k8s/monitoring', 'k8s/postgres + k8s/monitoring/prometheus-operator']) {
      const objects = build(overlay);
      const monitors = ofKind(objects, 'PodMonitor');
      const bare = overlay === 'k8s/monitoring' ? 'k8s/base' : 'k8s/postgres';
      expect(ids(objects), overlay).toEqual(
        [...ids(build(bare)), ...monitors.map((m) => `PodMonitor/${m.metadata.name}`)].sort(),
      );
      expect(monitors.map((m) => m.apiVersion)).toEqual([
        'monitoring.coreos.com/v1',
        'monitoring.coreos.com/v1',
      ]);
      const all = pods(objects);
      for (const p of all) {
        // each gateway pod is scraped by exactly one PodMonitor, at its metrics port by name
        const mine = monitors.filter(
          (m) => m.metadata.namespace === p.namespace && selects(m.spec.selector, p.labels),
        );
        expect(mine.length, `${overlay}: ${p.name}`).toBe(1);
        const [endpoint] = mine[0].spec.podMetricsEndpoints;
        expect(endpoint.path).toBe('/metrics');
        const named = containersOf(p.pod)
          .flatMap((c: Doc) => c.ports ?? [])
          .find((x: Doc) => x.name === endpoint.port);
        expect(named?.containerPort, `${overlay}: ${p.name} port ${endpoint.port}`).toBe(
          metricsPort(p),
        );
      }
      // PostgreSQL mode: the three replicas are pods of the one the adapter's monitor finds
      const { pod } = adapterContainer(objects);
      expect(pod).toBeDefined();
    }
    // the base, and the other overlays, need no CRD of prometheus-operator
    for (const overlay of ['k8s/base', 'k8s/cert-manager', 'k8s/postgres'])
      for (const o of build(overlay))
        expect(String(o.apiVersion), `${overlay}: ${o.kind}`).not.toMatch(
          /monitoring\.coreos\.com/,
        );
  });
});

/** An IPv4 address of this machine that is not loopback, standing in for the pod's IP. */
function outsideAddress(): string | undefined {
  return Object.values(networkInterfaces())
    .flat()
    .find((i) => i !== undefined && i.family === 'IPv4' && !i.internal)?.address;
}

/** One GET to address:port with exactly this Host header. */
function get(address: string, port: number, path: string, host: string) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request({ host: address, port, path, headers: { host }, agent: false }, (res) => {
      let body = '';
      res.on('data', (d) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe.runIf(KUBECTL !== undefined && outsideAddress() !== undefined)('as configured', () => {
  it("serves the annotated path on the pod's address, and not the agent API", async () => {
    const podIp = outsideAddress()!;
    const agent = pods(build('k8s/base')).find((p) => p.program === 'sidecar')!;
    const sidecarContainer = containersOf(agent.pod).find(isSidecar);
    // the rendered hosts, with ports the system picks (the rendered ones may be taken here)
    const anyPort = (v: string) => v.replace(/:\d+$/, ':0');
    const adapter = await startTestAdapter({ listen: '0.0.0.0:0' });
    const { dir, cleanup: done } = tempDir('agw-metrics-as-configured-');
    const { settings } = readSettings(SIDECAR_SETTINGS, SidecarSettingsSchema, [], {
      AGW_LISTEN: anyPort(envValue(sidecarContainer, 'AGW_LISTEN')),
      AGW_METRICS_LISTEN: anyPort(envValue(sidecarContainer, 'AGW_METRICS_LISTEN')),
      AGW_ADAPTER_URL: adapter.url,
      AGW_AGENT_ID: 'qa',
      AGW_AGENT_TOKEN: tokenOf('qa'),
      AGW_OUTBOX: join(dir, 'outbox.db'),
      AGW_JOURNAL_SOCKET: join(dir, 'no-journal.sock'),
      AGW_SHUTDOWN_GRACE_MS: '0',
    });
    const writer = new JournalWriter({
      socketPath: settings.journalSocket,
      stderr: { write() {} },
    });
    const sidecar = await startSidecar({
      settings,
      logger: pino({ level: 'silent' }),
      emergencies: new Emergencies(writer, { agentId: 'qa' }),
    });
    try {
      await sidecar.gateOpen;
      const port = Number(new URL(sidecar.metricsUrl!).port);
      const path = agent.annotations['prometheus.io/path']!;
      // as Prometheus scrapes a pod: to its IP, with that as Host
      const scrape = await get(podIp, port, path, `${podIp}:${port}`);
      expect(scrape.status).toBe(200);
      expect(scrape.body).toMatch(/^agw_sidecar_outbox_depth 0$/m);
      expect(scrape.body).toMatch(/^agw_sidecar_breaker_open 0$/m);
      // the agent API is not there, nor on the pod's address at all
      expect((await get(podIp, port, '/v1/inbox', `${podIp}:${port}`)).status).toBe(404);
      const agentPort = Number(new URL(sidecar.url).port);
      await expect(get(podIp, agentPort, '/v1/inbox', `${podIp}:${agentPort}`)).rejects.toThrow();
      // the adapter's /metrics at its annotated path, no token, from outside too
      const adapterPort = Number(new URL(adapter.url).port);
      const a = await get(podIp, adapterPort, path, `${podIp}:${adapterPort}`);
      expect(a.status).toBe(200);
      expect(a.body).toMatch(/^agw_build_info\{/m);
    } finally {
      await sidecar.close();
      writer.close();
      await adapter.stop();
      done();
    }
  }, 30_000);
});
