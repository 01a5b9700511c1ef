/**
 * An adapter for tests, in-process on port 0 with a temp database (child processes of the CLI
 * are in cli.ts).
 */
import { join } from 'node:path';
import { type Logger, pino } from 'pino';
import { type Adapter, startAdapter } from '../../src/adapter/server.js';
import {
  ADAPTER_SETTINGS,
  AdapterSettingsSchema,
  storeOptions,
} from '../../src/adapter/settings.js';
import { compileTopology } from '../../src/adapter/topology.js';
import type { Emergencies } from '../../src/journald/emergency.js';
import type { SettingSpec } from '../../src/settings.js';
import { openStore } from '../../src/store/open.js';
import type { Store } from '../../src/store/store.js';
import { type TopologyObject, tempDir, topologyObject, writeTopology } from './topology.js';

export interface TestAdapter {
  adapter: Adapter;
  url: string;
  db: string;
  dir: string;
  /** The store the adapter was given (a SqliteStore: tests may cap its pages). */
  store: Store;
  stop: () => Promise<void>;
}

/**
 * `overrides` are settings by key, as strings (`{ queueCapacity: '3' }`). The send rate is off
 * (`sendRate: '0'`) unless they set it: most tests send faster than AGW_SEND_RATE's default.
 */
export async function startTestAdapter(
  overrides: Record<string, string> = {},
  opts: {
    now?: () => number;
    topology?: TopologyObject;
    /** Instead of a silent one. */
    logger?: Logger;
    emergencies?: Emergencies;
    /** AdapterOptions.storageProbeMs. */
    storageProbeMs?: number;
    /** AdapterOptions.fileWatchMs: how often the credential and TLS files are checked. */
    fileWatchMs?: number;
    /** What the adapter is given instead of the store opened from `db` (which it wraps). */
    wrapStore?: (store: Store) => Store;
  } = {},
): Promise<TestAdapter> {
  const { topology = topologyObject(), wrapStore = (s: Store) => s, ...rest } = opts;
  const { dir, cleanup } = tempDir();
  const db = join(dir, 'adapter.db');
  const settings = AdapterSettingsSchema.parse({
    // every setting's default first (as the CLI has them), so one added needs no line here
    ...Object.fromEntries(
      Object.entries(ADAPTER_SETTINGS as Record<string, SettingSpec>).flatMap(([key, spec]) =>
        spec.default === undefined ? [] : [[key, spec.default]],
      ),
    ),
    listen: '127.0.0.1:0',
    topology: writeTopology(dir, topology),
    db,
    sync: 'full',
    maxMessageBytes: '262144',
    queueCapacity: '500',
    leaseMs: '30000',
    maxLeaseMs: '900000',
    maxRetries: '3',
    retryBaseMs: '1000',
    retentionDays: '30',
    retentionKeepKinds: 'task/request,policy/update',
    log: 'stdout',
    journalSocket: '/nonexistent/agw-test-journal.sock',
    logLevel: 'silent',
    // no send rate: tests send faster than a sender may (the rate's own tests pass sendRate)
    sendRate: '0',
    ...overrides,
  });
  const compiled = compileTopology(topology);
  const store = await openStore(settings.db, storeOptions(settings, compiled));
  const adapter = await startAdapter({
    settings,
    topology: compiled,
    store: wrapStore(store),
    logger: pino({ level: 'silent' }),
    ...rest,
  });
  await adapter.ready;
  return {
    adapter,
    url: adapter.url,
    db,
    dir,
    store,
    stop: async () => {
      await adapter.close();
      cleanup();
    },
  };
}
