/**
 * k8s/cert-manager/ (TLS between the agents and the adapter, docs/deploy.md "TLS with
 * cert-manager") agrees with itself, the base and the code: it builds into the base's objects
 * plus a CA made the usual way (a self-signed Issuer, a CA Certificate, a CA Issuer) and a
 * Certificate for the adapter and for each agent pod; every TLS setting names a file mounted from
 * the Secret of the right Certificate (the adapter's certificate, key and CA; each sidecar's CA,
 * client certificate and key); the adapter's certificate holds the name the sidecars dial and
 * each agent's names that agent (as the adapter reads a URI SAN); the adapter's probes speak
 * HTTPS to paths that ask for no client certificate; the sidecars' own probes do not change.
 * And it works as built: with certificates made for those Certificates, both programs' settings
 * load from the rendered env and files, and a TLS handshake between them, by the names in the
 * manifests, succeeds both ways.
 */
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { connect, createServer, type TLSSocket } from 'node:tls';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { loadSecurity } from '../../src/adapter/security.js';
import { ADAPTER_SETTINGS, AdapterSettingsSchema } from '../../src/adapter/settings.js';
import { agentForUris, loadTopology } from '../../src/adapter/topology.js';
import { readSettings } from '../../src/cli/settings.js';
import { SIDECAR_SETTINGS, SidecarSettingsSchema } from '../../src/sidecar/settings.js';
import { type CertFiles, issue, makeCa, pem } from '../helpers/certs.js';
import {
  adapterContainer,
  agentPods,
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
} from '../helpers/rendered.js';
import { tempDir } from '../helpers/topology.js';

const { dir: tmp, cleanup } = tempDir('agw-cert-manager-');
afterAll(cleanup);
const build = (dir: string): Doc[] =>
  parseBuild(execFileSync(KUBECTL!, ['kustomize', dir], { encoding: 'utf8' }));
const ids = (objects: Doc[]) => objects.map((o) => `${o.kind}/${o.metadata.name}`).sort();
/** The paths the adapter answers without a client certificate (CONTRACT.md, Security). */
const NO_CLIENT_CERT = new Set(['/healthz', '/health', '/metrics']);

describe.runIf(KUBECTL !== undefined)('k8s/cert-manager/ (TLS with cert-manager)', () => {
  const objects = build(join(K8S, 'cert-manager'));
  const base = build(join(K8S, 'base'));
  const certificates = ofKind(objects, 'Certificate');
  const issuers = ofKind(objects, 'Issuer');
  const { pod: adapterPod, adapter } = adapterContainer(objects);
  const service = find(objects, 'Service', 'agent-gateway-adapter');
  const bySecret = (name: string) => certificates.find((c) => c.spec.secretName === name);
  /** The Certificate whose Secret holds `file` of `container`, and the key it is. */
  const certificateOf = (pod: Doc, container: Doc, variable: string) => {
    const source = fileSource(pod, container, envValue(container, variable));
    expect(source?.kind, variable).toBe('Secret');
    const s = source as Extract<FileSource, { name: string }>;
    const certificate = bySecret(s.name);
    expect(certificate, `${variable}: Secret ${s.name} is no Certificate's`).toBeDefined();
    return { certificate, key: s.key };
  };
  const adapterCertificate = find(objects, 'Certificate', 'agent-gateway-adapter');

  it('builds on the base, adding a CA and the certificates only', () => {
    const k = parseYaml(readFileSync(join(K8S, 'cert-manager/kustomization.yaml'), 'utf8'));
    expect(k.resources).toEqual(['../base']);
    expect(k.components).toEqual(['tls']);
    expect(k.namespace).toBe('agents');
    expect(ids(objects)).toEqual(
      [
        ...ids(base),
        'Issuer/agent-gateway-selfsigned',
        'Issuer/agent-gateway-ca',
        'Certificate/agent-gateway-ca',
        ...certificates.filter((c) => !c.spec.isCA).map((c) => `Certificate/${c.metadata.name}`),
      ].sort(),
    );
    for (const o of objects)
      if (o.kind !== 'Namespace') expect(o.metadata.namespace, o.metadata.name).toBe('agents');
  });

  it('makes its CA the usual way: a self-signed Issuer signs the CA, a CA Issuer signs the rest', () => {
    const selfSigned = issuers.find((i) => i.spec.selfSigned !== undefined);
    const ca = certificates.find((c) => c.spec.isCA === true);
    expect(ca.spec.issuerRef).toEqual({ kind: 'Issuer', name: selfSigned.metadata.name });
    // the CA keeps its key when renewed: what it signed stays verifiable by every ca.crt
    expect(ca.spec.privateKey.rotationPolicy).toBe('Never');
    const caIssuer = issuers.find((i) => i.spec.ca !== undefined);
    expect(caIssuer.spec.ca.secretName).toBe(ca.spec.secretName);
    for (const c of certificates.filter((x) => x !== ca)) {
      expect(c.spec.issuerRef, c.metadata.name).toEqual({
        kind: 'Issuer',
        name: caIssuer.metadata.name,
      });
      expect(c.spec.isCA, c.metadata.name).toBeUndefined();
      // renewed before the end with a new key; the programs re-read the files
      expect(c.spec.privateKey.rotationPolicy, c.metadata.name).toBe('Always');
    }
  });

  it('sets the adapter TLS settings to the files of its Certificate, valid for its Service', () => {
    for (const [variable, key] of [
      ['AGW_TLS_CERT', 'tls.crt'],
      ['AGW_TLS_KEY', 'tls.key'],
      ['AGW_TLS_CLIENT_CA', 'ca.crt'],
    ] as const) {
      const found = certificateOf(adapterPod, adapter, variable);
      expect(found.certificate.metadata.name, variable).toBe(adapterCertificate.metadata.name);
      expect(found.key, variable).toBe(key);
    }
    expect(adapterCertificate.spec.usages).toContain('server auth');
    const name = service.metadata.name;
    const ns = service.metadata.namespace;
    expect(adapterCertificate.spec.dnsNames).toEqual(
      expect.arrayContaining([
        name,
        `${name}.${ns}`,
        `${name}.${ns}.svc`,
        `${name}.${ns}.svc.cluster.local`,
      ]),
    );
    // only the base's variables and these three: known adapter settings
    const added = adapter.env
      .map((e: Doc) => e.name)
      .filter((n: string) => !adapterContainer(base).adapter.env.some((e: Doc) => e.name === n));
    expect(added.sort()).toEqual(['AGW_TLS_CERT', 'AGW_TLS_CLIENT_CA', 'AGW_TLS_KEY']);
  });

  it('probes the adapter over HTTPS, on paths that ask for no client certificate', () => {
    for (const kind of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
      const probe = adapter[kind];
      expect(probe.httpGet.scheme, kind).toBe('HTTPS');
      expect(NO_CLIENT_CERT.has(probe.httpGet.path), `${kind} ${probe.httpGet.path}`).toBe(true);
      expect(probe.httpGet.host, kind).toBeUndefined();
    }
  });

  it('gives each sidecar https://, the CA of the adapter, and a client certificate naming its agent', () => {
    const text = objectData(objects, 'Secret', 'agent-gateway-topology', 'topology.yaml');
    const file = join(tmp, 'topology.yaml');
    writeFileSync(file, text);
    const topology = loadTopology(file);
    const pods = agentPods(objects);
    expect(pods.length).toBeGreaterThan(0);
    const clientCertificates = new Set<string>();
    const basePods = agentPods(base);
    for (const { pod, sidecar, agent } of pods) {
      const url = new URL(envValue(sidecar, 'AGW_ADAPTER_URL'));
      expect(url.protocol, agent).toBe('https:');
      expect(adapterCertificate.spec.dnsNames, agent).toContain(url.hostname);
      expect(url.hostname).toBe(service.metadata.name);
      expect(Number(url.port)).toBe(service.spec.ports[0].port);
      const ca = certificateOf(pod, sidecar, 'AGW_ADAPTER_CA');
      expect(ca.key).toBe('ca.crt');
      // its ca.crt is the CA that signed the adapter's certificate
      expect(ca.certificate.spec.issuerRef).toEqual(adapterCertificate.spec.issuerRef);
      const cert = certificateOf(pod, sidecar, 'AGW_TLS_CLIENT_CERT');
      const key = certificateOf(pod, sidecar, 'AGW_TLS_CLIENT_KEY');
      expect([cert.key, key.key]).toEqual(['tls.crt', 'tls.key']);
      expect(key.certificate).toBe(cert.certificate);
      expect(cert.certificate.spec.usages, agent).toContain('client auth');
      // the adapter reads it as this agent, and no other pod holds it
      expect(agentForUris(topology, cert.certificate.spec.uris)?.id, agent).toBe(agent);
      expect(clientCertificates.has(cert.certificate.metadata.name), agent).toBe(false);
      clientCertificates.add(cert.certificate.metadata.name);
      // the admission of the adapter's client CA: the same issuer
      expect(cert.certificate.spec.issuerRef).toEqual(adapterCertificate.spec.issuerRef);
      // its own listener is the base's, plain HTTP on the pod's loopback: probes unchanged
      const baseSidecar = basePods.find((p) => p.agent === agent)!.sidecar;
      expect(sidecar.startupProbe).toEqual(baseSidecar.startupProbe);
      expect(sidecar.livenessProbe).toEqual(baseSidecar.livenessProbe);
      expect(envValue(sidecar, 'AGW_LISTEN')).toBe(envValue(baseSidecar, 'AGW_LISTEN'));
    }
    // a Certificate for every agent pod, and none for a pod that is not there
    expect(certificates.filter((c) => c.spec.usages?.includes('client auth')).length).toBe(
      pods.length,
    );
  });

  it('loads in both programs as built, and they shake hands by the names in the manifests', async () => {
    // certificates as cert-manager would issue them for these Certificates, one CA for all
    const ca = makeCa(tmp, 'agent-gateway-ca');
    const issued = new Map<string, CertFiles>();
    for (const c of certificates.filter((x) => !x.spec.isCA))
      issued.set(
        c.spec.secretName,
        issue(ca, { cn: c.metadata.name, dns: c.spec.dnsNames, uri: c.spec.uris }),
      );
    const signing = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const jwks = JSON.stringify({
      keys: [{ ...signing.publicKey.export({ format: 'jwk' }), kid: 'k', alg: 'ES256' }],
    });
    const content = (source: FileSource): string => {
      if (source.kind === 'ServiceAccountToken') return 'eyJhbGciOiJFUzI1NiJ9.e30.c2ln';
      if (source.kind === 'ConfigMap' && source.name === 'agent-gateway-jwks') return jwks;
      const files = source.kind === 'Secret' ? issued.get(source.name) : undefined;
      if (files !== undefined)
        return pem({ 'tls.crt': files.cert, 'tls.key': files.key, 'ca.crt': ca.cert }[source.key]!);
      return objectData(objects, source.kind, source.name, source.key);
    };
    const adapterEnv = materialize(adapterPod, adapter, join(tmp, 'adapter'), content);
    const { settings } = readSettings(ADAPTER_SETTINGS, AdapterSettingsSchema, [], adapterEnv);
    const security = loadSecurity(settings, loadTopology(settings.topology));
    expect(security.tls).toBeDefined();

    const { pod, sidecar, agent } = agentPods(objects)[0]!;
    const sidecarEnv = materialize(pod, sidecar, join(tmp, agent), content);
    const s = readSettings(SIDECAR_SETTINGS, SidecarSettingsSchema, [], sidecarEnv).settings;
    expect(s.adapterTls).toBeDefined();

    // the adapter's files as its server uses them; the sidecar's as it dials by the URL's name
    const server = createServer({
      cert: readFileSync(adapterEnv.AGW_TLS_CERT!),
      key: readFileSync(adapterEnv.AGW_TLS_KEY!),
      ca: readFileSync(adapterEnv.AGW_TLS_CLIENT_CA!),
      requestCert: true,
      rejectUnauthorized: true,
    });
    const peer = new Promise<string | undefined>((resolve) => {
      server.once('secureConnection', (socket: TLSSocket) => {
        resolve(socket.getPeerX509Certificate()?.subjectAltName);
        socket.end();
      });
      // TLS 1.3: the client is through before the server has checked its certificate
      server.once('tlsClientError', (err) => resolve(`refused: ${err.message}`));
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    try {
      const url = new URL(envValue(sidecar, 'AGW_ADAPTER_URL'));
      const socket = connect({
        host: '127.0.0.1',
        port: (server.address() as AddressInfo).port,
        servername: url.hostname,
        ca: readFileSync(sidecarEnv.AGW_ADAPTER_CA!),
        cert: readFileSync(sidecarEnv.AGW_TLS_CLIENT_CERT!),
        key: readFileSync(sidecarEnv.AGW_TLS_CLIENT_KEY!),
      });
      await new Promise<void>((resolve, reject) => {
        socket.once('secureConnect', resolve);
        socket.once('error', reject);
      });
      expect(socket.authorized).toBe(true);
      // the adapter's side: the client certificate it verified names this agent
      expect(await peer).toBe(`URI:spiffe://cluster.local/agent/${agent}`);
      socket.destroy();
    } finally {
      server.close();
    }
  });
});
