/**
 * Both programs serve an OpenAPI 3.1 document at GET /openapi.json (docs/reference/operations.md). Each, as a
 * real program serves it over HTTP, passes Redocly's recommended rules (redocly.yaml beside
 * this file) with no error and no warning, and documents exactly the routes of its program's
 * table, one operation for each method and path, with the token the route asks for: the
 * document cannot drift from what is served. The renderer moves the definitions zod writes
 * for a recursive schema out of the way of the document's own refs.
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { z } from 'zod';
import { adapterRoutes, type RouteDeps } from '../../src/adapter/routes.js';
import { openApiDocument } from '../../src/protocol/openapi.js';
import { sidecarRoutes } from '../../src/sidecar/routes.js';
import { startTestAdapter } from '../helpers/adapter.js';
import { call, type Json } from '../helpers/http.js';
import { startTestSidecar } from '../helpers/sidecar.js';
import { tempDir } from '../helpers/topology.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const REDOCLY = join(ROOT, 'node_modules', '.bin', 'redocly');
const CONFIG = fileURLToPath(new URL('redocly.yaml', import.meta.url));
const VERSION = (
  JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }
).version;
/** Redocly takes a few seconds to start on a loaded machine; a lint of ours takes well under one. */
const TIMEOUT = { timeout: 120_000 };

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

interface Problem {
  ruleId: string;
  severity: string;
  message: string;
  location: { pointer?: string }[];
}

/** Redocly's problems with `doc`, each as one line; its report says how many are errors. */
async function lint(doc: unknown, name: string): Promise<string[]> {
  const { dir, cleanup } = tempDir('agw-openapi-');
  stops.push(cleanup);
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(doc, null, 2));
  const stdout = await new Promise<string>((resolve, reject) => {
    execFile(
      REDOCLY,
      ['lint', '--config', CONFIG, '--format=json', file],
      {
        // no usage data sent and no update check: a test makes no call outside this machine
        env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_NOTIFICATIONS: 'true' },
        maxBuffer: 16 * 1024 * 1024,
      },
      // it exits 1 when it finds an error; its report is on stdout either way
      (err, out, stderr) => (out.trim() === '' ? reject(err ?? new Error(stderr)) : resolve(out)),
    );
  });
  const report = JSON.parse(stdout) as {
    totals: { errors: number; warnings: number };
    problems: Problem[];
  };
  const problems = report.problems.map(
    (p) => `${p.severity} ${p.ruleId} at ${p.location[0]?.pointer}: ${p.message}`,
  );
  expect(problems.length).toBe(report.totals.errors + report.totals.warnings);
  return problems;
}

/** `GET /v1/messages/{message_id}` for each operation of the document. */
function documented(doc: Json): string[] {
  return Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(
    ([path, item]) => Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`),
  );
}

/** The same for a route table: its :params written as the document writes them. */
function served(routes: readonly { method: string; path: string }[]): string[] {
  return routes.map((r) => `${r.method} ${r.path.replace(/:([a-z_]+)/g, '{$1}')}`);
}

/** Every $ref in the document: each must point into its components, and resolve there. */
function refsResolve(doc: Json): void {
  const refs: string[] = [];
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (typeof v === 'object' && v !== null) {
      for (const [k, x] of Object.entries(v)) {
        if (k === '$ref' && typeof x === 'string') refs.push(x);
        else walk(x);
      }
    }
  };
  walk(doc);
  for (const ref of refs) {
    expect(ref).toMatch(/^#\/components\//);
    const target = ref
      .slice(2)
      .split('/')
      .map((p) => p.replaceAll('~1', '/').replaceAll('~0', '~'))
      .reduce<Json>((at, key) => at?.[key], doc);
    expect(target, ref).toBeTypeOf('object');
  }
}

const none = undefined as never;

it("the adapter's document passes Redocly, one operation for each route", TIMEOUT, async () => {
  const t = await startTestAdapter();
  stops.push(t.stop);
  const res = await call(t.url, 'GET', '/openapi.json');
  expect(res.status).toBe(200);
  const doc = res.body as Json;
  expect([doc.openapi, doc.info.version]).toEqual(['3.1.0', VERSION]);
  refsResolve(doc);

  // the table as routes.ts builds it: building it reads only these deps
  const routes = adapterRoutes({
    write: { maxMessageBytes: 1 },
    maxPollsPerAgent: 1,
    maxReadsPerAgent: 1,
  } as RouteDeps);
  expect(documented(doc).sort()).toEqual(served(routes).sort());
  for (const r of routes) {
    const op = doc.paths[r.path.replace(/:([a-z_]+)/g, '{$1}')][r.method.toLowerCase()];
    expect(op.security, `${r.method} ${r.path}`).toEqual(
      r.who === 'public' ? [] : [{ bearer: [] }],
    );
  }

  const problems = await lint(doc, 'adapter');
  expect(problems, problems.join('\n')).toEqual([]);
});

it("the sidecar's document passes Redocly, one operation for each route", TIMEOUT, async () => {
  const t = await startTestAdapter();
  stops.push(t.stop);
  const qa = await startTestSidecar('qa', t.url);
  stops.push(qa.stop);
  const res = await call(qa.url, 'GET', '/openapi.json');
  expect(res.status).toBe(200);
  const doc = res.body as Json;
  expect([doc.openapi, doc.info.version]).toEqual(['3.1.0', VERSION]);
  refsResolve(doc);

  const routes = sidecarRoutes(none, none, none, '', none, VERSION);
  expect(documented(doc).sort()).toEqual(served(routes).sort());
  // no token anywhere: the pod is the trust boundary
  for (const path of Object.values(doc.paths as Record<string, Record<string, Json>>)) {
    for (const op of Object.values(path)) expect(op.security).toEqual([]);
  }
  expect(doc.components.securitySchemes).toBeUndefined();

  const problems = await lint(doc, 'sidecar');
  expect(problems, problems.join('\n')).toEqual([]);
});

it("a recursive schema's definitions move into the document's components", TIMEOUT, async () => {
  // zod refers to a recursive root as `#`, and to a schema it needs twice as `#/$defs/<key>`:
  // both would resolve against the whole document
  const Node = z.object({
    name: z.string(),
    get children() {
      return z.array(Node);
    },
  });
  const doc = openApiDocument(
    {
      title: 'trees',
      version: '1.0.0',
      description: 'A recursive schema as a body and as an answer.',
      servers: [{ url: 'http://127.0.0.1:7070', description: 'loopback' }],
    },
    [
      {
        method: 'POST',
        path: '/trees/:tree_id',
        operationId: 'plant',
        summary: 'Plant a tree',
        description: 'Takes a tree and answers two.',
        tag: 'messages',
        auth: true,
        pathParams: { tree_id: 'The tree.' },
        body: Node,
        responses: [
          { status: 201, description: 'Planted.', schema: z.object({ a: Node, b: Node }) },
        ],
        errors: ['invalid_json', 'storage_full'],
      },
    ],
  );
  const text = JSON.stringify(doc);
  expect(text).not.toMatch(/"\$ref":"#(\/\$defs\/[^"]*|\/definitions\/[^"]*)?"/);
  expect(text).not.toContain('$defs');
  refsResolve(doc as Json);
  const problems = await lint(doc, 'trees');
  expect(problems, problems.join('\n')).toEqual([]);
});
