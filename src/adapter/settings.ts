/**
 * The adapter's settings (CONTRACT.md, "Adapter settings"), each with its AGW_* variable and
 * default. docs/reference/configuration.md describes them for operators.
 */
import { z } from 'zod';
import { DEFAULT_MAX_LEASE_MS, DEFAULT_MAX_MESSAGE_BYTES } from '../protocol/limits.js';
import { intSetting, listenSetting, type SettingSpec } from '../settings.js';
import { DEFAULT_DELIVERY } from '../store/store.js';

export const ADAPTER_SETTINGS = {
  /** Where the adapter listens. Default 0.0.0.0:8080. */
  listen: { env: 'AGW_LISTEN', default: '0.0.0.0:8080' },
  /** Path of the topology file (JSON or YAML). Required. */
  topology: { env: 'AGW_TOPOLOGY' },
  /** The SQLite database file. Default ./data/adapter.db; its folder is created. */
  db: { env: 'AGW_DB', default: './data/adapter.db' },
  /** full (default) or normal: see SyncMode in store/sqlite-store.ts for what normal risks. */
  sync: { env: 'AGW_SYNC', default: 'full' },
  /** Largest message (request body of POST /v1/messages), bytes. Default 262144 (256 KiB). */
  maxMessageBytes: { env: 'AGW_MAX_MESSAGE_BYTES', default: String(DEFAULT_MAX_MESSAGE_BYTES) },
  /** Per-agent bounded queue. Default 500. */
  queueCapacity: { env: 'AGW_QUEUE_CAPACITY', default: String(DEFAULT_DELIVERY.capacity) },
  /** How long a delivery waits for its ack, ms. Default 30000. */
  leaseMs: { env: 'AGW_LEASE_MS', default: String(DEFAULT_DELIVERY.leaseMs) },
  /** The longest lease an extension (POST /v1/leases) may ask for, ms. Default 900000 (15 min). */
  maxLeaseMs: { env: 'AGW_MAX_LEASE_MS', default: String(DEFAULT_MAX_LEASE_MS) },
  /** Redeliveries after the first, then dead-letter. Default 3. */
  maxRetries: { env: 'AGW_MAX_RETRIES', default: String(DEFAULT_DELIVERY.maxRetries) },
  /** Redelivery backoff base, ms. Default 1000. */
  retryBaseMs: { env: 'AGW_RETRY_BASE_MS', default: String(DEFAULT_DELIVERY.retryBaseMs) },
  /** Messages older than this are pruned, contracts never. Default 30. */
  retentionDays: { env: 'AGW_RETENTION_DAYS', default: '30' },
  /** Kinds retention never prunes, comma-separated. Default task/request,policy/update. */
  retentionKeepKinds: { env: 'AGW_RETENTION_KEEP_KINDS', default: 'task/request,policy/update' },
  /** stdout (default): JSON lines; journald: native entries to AGW_JOURNAL_SOCKET. */
  log: { env: 'AGW_LOG', default: 'stdout' },
  /** journald's native socket: CRIT entries for alerts, and the log with AGW_LOG=journald. */
  journalSocket: { env: 'AGW_JOURNAL_SOCKET', default: '/run/systemd/journal/socket' },
  /** pino level. Default info. */
  logLevel: { env: 'AGW_LOG_LEVEL', default: 'info' },
} as const satisfies Record<string, SettingSpec>;

export const AdapterSettingsSchema = z
  .strictObject({
    listen: listenSetting,
    topology: z
      .string({ error: 'is required: the path of the topology file' })
      .min(1, 'must not be empty'),
    db: z.string().min(1, 'must not be empty'),
    sync: z.enum(['full', 'normal'], { error: 'must be full or normal' }),
    maxMessageBytes: intSetting(1024, 16 * 1024 * 1024),
    queueCapacity: intSetting(1, 1_000_000),
    leaseMs: intSetting(100, 24 * 3600 * 1000),
    maxLeaseMs: intSetting(1000, 24 * 3600 * 1000),
    maxRetries: intSetting(0, 100),
    retryBaseMs: intSetting(1, 3600 * 1000),
    retentionDays: intSetting(1, 36500),
    retentionKeepKinds: z.string().transform((s, ctx) => {
      const kinds = s
        .split(',')
        .map((k) => k.trim())
        .filter((k) => k !== '');
      const bad = kinds.find((k) => !/^[a-z][a-z0-9_.-]*(\/[a-z0-9_.-]+)*$/.test(k));
      if (bad !== undefined) {
        ctx.addIssue({ code: 'custom', message: `"${bad}" is not a kind` });
        return z.NEVER;
      }
      return kinds;
    }),
    log: z.enum(['stdout', 'journald'], { error: 'must be stdout or journald' }),
    journalSocket: z.string().min(1, 'must not be empty'),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      error: 'must be one of fatal, error, warn, info, debug, trace, silent',
    }),
  })
  .superRefine((s, ctx) => {
    if (s.maxLeaseMs < s.leaseMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['maxLeaseMs'],
        message: `must be at least AGW_LEASE_MS (${s.leaseMs}): an extension may only lengthen a lease`,
      });
    }
  });

export type AdapterSettings = z.output<typeof AdapterSettingsSchema>;

/** What the store needs of the settings: its durability and the delivery rules. */
export function storeOptions(settings: AdapterSettings, alertsTo: string) {
  return {
    sync: settings.sync,
    delivery: {
      capacity: settings.queueCapacity,
      leaseMs: settings.leaseMs,
      maxRetries: settings.maxRetries,
      retryBaseMs: settings.retryBaseMs,
      alertsTo,
    },
  } as const;
}
