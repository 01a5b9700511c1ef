/**
 * The adapter's settings, each with its AGW_* variable and default.
 * docs/reference/configuration.md ("`agent-gateway adapter`") describes them for operators.
 */
import { z } from 'zod';
import {
  DEFAULT_MAX_LEASE_MS,
  DEFAULT_MAX_MESSAGE_BYTES,
  DEFAULT_MAX_PAGE_BYTES,
  DEFAULT_MAX_POLLS_PER_AGENT,
} from '../protocol/limits.js';
import { intSetting, listenSetting, type SettingSpec } from '../settings.js';
import {
  DEFAULT_BUDGETS,
  DEFAULT_DELIVERY,
  DEFAULT_STORAGE,
  senderShareFor,
} from '../store/store.js';
import { DEFAULT_SEND_RATE } from './send-rate.js';
import type { Topology } from './topology.js';

export const ADAPTER_SETTINGS = {
  /** Where the adapter listens. Default 0.0.0.0:8080. */
  listen: { env: 'AGW_LISTEN', default: '0.0.0.0:8080' },
  /** Path of the topology file (JSON or YAML). Required. */
  topology: { env: 'AGW_TOPOLOGY' },
  /**
   * The store: a SQLite file (default ./data/adapter.db; its folder is created), or a postgres://
   * URL shared by any number of adapters (store/open.ts).
   */
  db: { env: 'AGW_DB', default: './data/adapter.db' },
  /** full (default) or normal: see SyncMode in store/sqlite/sqlite-store.ts for what normal risks. */
  sync: { env: 'AGW_SYNC', default: 'full' },
  /** The operators' console at /console (docs/operators.md): on (default) or off (404). */
  console: { env: 'AGW_CONSOLE', default: 'on' },
  /** Largest message (request body of POST /v1/messages), bytes. Default 262144 (256 KiB). */
  maxMessageBytes: { env: 'AGW_MAX_MESSAGE_BYTES', default: String(DEFAULT_MAX_MESSAGE_BYTES) },
  /** Per-agent bounded queue. Default 500. */
  queueCapacity: { env: 'AGW_QUEUE_CAPACITY', default: String(DEFAULT_DELIVERY.capacity) },
  /**
   * Critical deliveries (pending plus leased) one recipient may hold; past it a new critical
   * copy is dead-lettered (queue_full) with an alert. Default 5000.
   */
  criticalCapacity: {
    env: 'AGW_CRITICAL_CAPACITY',
    default: String(DEFAULT_DELIVERY.criticalCapacity),
  },
  /**
   * Messages a second each sender may send (its token bucket's refill); 0 turns the limit off.
   * A topology agent's `send_rate` wins. Default 100.
   */
  sendRate: { env: 'AGW_SEND_RATE', default: String(DEFAULT_SEND_RATE.perSecond) },
  /** Messages each sender may send at once (its bucket's depth). Default 500. */
  sendBurst: { env: 'AGW_SEND_BURST', default: String(DEFAULT_SEND_RATE.burst) },
  /**
   * The deepest reply chain: a reply whose hop would pass it is refused (422
   * hop_budget_exceeded). Default 8 (docs/reference/configuration.md, AGW_HOP_BUDGET).
   */
  hopBudget: { env: 'AGW_HOP_BUDGET', default: String(DEFAULT_BUDGETS.hops) },
  /**
   * Messages of agents one thread may hold since its last continuation by alerts_to, its root
   * counted; the next is refused (422 thread_budget_exceeded). Default 16.
   */
  threadBudget: { env: 'AGW_THREAD_BUDGET', default: String(DEFAULT_BUDGETS.messages) },
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
  /** How far ahead a message's deliver_at may be, days. Default 365. */
  maxScheduleDays: { env: 'AGW_MAX_SCHEDULE_DAYS', default: '365' },
  /** Kinds retention never prunes, comma-separated. Default task/request,policy/update. */
  retentionKeepKinds: { env: 'AGW_RETENTION_KEEP_KINDS', default: 'task/request,policy/update' },
  /**
   * Days after which retention prunes the kept kinds too (still never a message a delivery
   * waits for): the way out when they fill the store. Default 0: kept for ever.
   */
  retentionKeepDays: { env: 'AGW_RETENTION_KEEP_DAYS', default: '0' },
  /**
   * Days the audit log keeps its entries; older ones go from the oldest end only, never the
   * newest (the first kept entry's prev_hash is the anchor verification starts from). Default
   * 365.
   */
  auditRetentionDays: { env: 'AGW_AUDIT_RETENTION_DAYS', default: '365' },
  /**
   * Bytes the store may use; past it new messages are refused (503 storage_full). Default
   * 4294967296 (4 GiB: 80% of the 5 GiB volume k8s/ gives it).
   */
  maxStoreBytes: { env: 'AGW_MAX_STORE_BYTES', default: String(DEFAULT_STORAGE.maxBytes) },
  /**
   * Percent of AGW_MAX_STORE_BYTES one sender's messages may use, 1 to 100. Default `auto`: twice
   * an equal part of the topology's agents, from 50% (2 agents) down to 1% (200 or more);
   * 33% for the seed's 6 (store.ts senderShareFor).
   */
  senderSharePercent: { env: 'AGW_SENDER_SHARE_PERCENT', default: 'auto' },
  /** Bytes kept free on the store's volume; 0: not checked. Default 268435456 (256 MiB). */
  minFreeBytes: { env: 'AGW_MIN_FREE_BYTES', default: String(DEFAULT_STORAGE.reserveBytes) },
  /** Byte bound of a page (replay, inbox, dead letters): it ends early. Default 8388608 (8 MiB). */
  maxPageBytes: { env: 'AGW_MAX_PAGE_BYTES', default: String(DEFAULT_MAX_PAGE_BYTES) },
  /** A request's headers must arrive within this, ms (slowloris). Default 10000. */
  headersTimeoutMs: { env: 'AGW_HEADERS_TIMEOUT_MS', default: '10000' },
  /**
   * A request, headers and body, must arrive within this, ms; a long poll's wait comes after it
   * and is not in it. Default 30000.
   */
  requestTimeoutMs: { env: 'AGW_REQUEST_TIMEOUT_MS', default: '30000' },
  /** How often the two timeouts above are checked, ms. Default 5000. */
  connectionsCheckingIntervalMs: { env: 'AGW_CONNECTIONS_CHECKING_INTERVAL_MS', default: '5000' },
  /** An idle keep-alive connection is closed after this, ms. Default 65000. */
  keepAliveTimeoutMs: { env: 'AGW_KEEP_ALIVE_TIMEOUT_MS', default: '65000' },
  /** Open connections at most; one more is closed at once. Default 4096. */
  maxConnections: { env: 'AGW_MAX_CONNECTIONS', default: '4096' },
  /**
   * Percent of AGW_MAX_CONNECTIONS that only connections which carried an agent's token may
   * hold (connection-limits.ts). Default 25 (1,024 of 4,096).
   */
  reservedConnectionsPercent: { env: 'AGW_RESERVED_CONNECTIONS_PERCENT', default: '25' },
  /**
   * Connections one remote address may hold before any of them carried an agent's token.
   * Default 256: a sidecar opens 32 at most; a proxy in front of the adapter may need more.
   */
  maxConnectionsPerAddress: { env: 'AGW_MAX_CONNECTIONS_PER_ADDRESS', default: '256' },
  /**
   * A connection that has carried no agent's token yet is closed after this idle, ms (before
   * its first request too). Default 5000; AGW_KEEP_ALIVE_TIMEOUT_MS once it has.
   */
  unauthenticatedIdleMs: { env: 'AGW_UNAUTHENTICATED_IDLE_MS', default: '5000' },
  /** Concurrent GET /v1/inbox of one agent; past it 429 too_many_polls. Default 32. */
  maxPollsPerAgent: {
    env: 'AGW_MAX_POLLS_PER_AGENT',
    default: String(DEFAULT_MAX_POLLS_PER_AGENT),
  },
  /**
   * Concurrent replay, thread and dead-letter reads of one agent, each held until its answer is
   * out; past it 429 too_many_reads. Default 4.
   */
  maxReadsPerAgent: { env: 'AGW_MAX_READS_PER_AGENT', default: '4' },
  /**
   * Bytes of answers in flight across the adapter; a replay, thread or dead-letter read takes a
   * page's bound of it before it reads; past it 503 overloaded. Default 134217728 (128 MiB, 16
   * pages of 8 MiB: a page costs about three times its bytes while it is read and sent (the
   * driver's buffer, its rows as strings, the answer), 48 concurrent PostgreSQL replays at 256
   * MiB took the adapter to 758 MiB, and k8s/ gives it 1 GiB).
   */
  maxResponseBytes: { env: 'AGW_MAX_RESPONSE_BYTES', default: String(128 * 1024 * 1024) },
  /**
   * A client must have taken a paged answer (replay, threads, dead letters, inbox) within this,
   * ms, else its connection is cut. Default 30000 (8 MiB at 280 KB/s).
   */
  writeTimeoutMs: { env: 'AGW_WRITE_TIMEOUT_MS', default: '30000' },
  /** stdout (default): JSON lines; journald: native entries to AGW_JOURNAL_SOCKET. */
  log: { env: 'AGW_LOG', default: 'stdout' },
  /** journald's native socket: CRIT entries for alerts, and the log with AGW_LOG=journald. */
  journalSocket: { env: 'AGW_JOURNAL_SOCKET', default: '/run/systemd/journal/socket' },
  /** pino level. Default info. */
  logLevel: { env: 'AGW_LOG_LEVEL', default: 'info' },
  /**
   * Seconds an agent may go without polling (or acking, nacking, extending a lease) while a
   * delivery waits for it before it counts as stalled: alert/stalled and a CRIT entry, once per
   * stall. Default 120: four default leases, far past a healthy agent's gap between two polls.
   */
  stallS: { env: 'AGW_STALL_S', default: '120' },
  /** PEM certificate chain: with AGW_TLS_KEY, the adapter serves HTTPS only. */
  tlsCert: { env: 'AGW_TLS_CERT' },
  /** PEM private key of AGW_TLS_CERT. */
  tlsKey: { env: 'AGW_TLS_KEY' },
  /**
   * PEM CA: every path but /healthz, /health and /metrics needs a client certificate it signed
   * (mTLS); one that names an agent (URI SAN) binds the connection to that agent.
   */
  tlsClientCa: { env: 'AGW_TLS_CLIENT_CA' },
  /** A JWKS file: bearer tokens that are JWTs are verified with its keys (jwt.ts). */
  jwtJwks: { env: 'AGW_JWT_JWKS' },
  /** The `iss` those JWTs must carry; required with AGW_JWT_JWKS. */
  jwtIssuer: { env: 'AGW_JWT_ISSUER' },
  /** The `aud` they must carry. Default agent-gateway. */
  jwtAudience: { env: 'AGW_JWT_AUDIENCE', default: 'agent-gateway' },
  /**
   * 1: start even when the topology holds the hash of a public development token
   * (`dev-token-<id>`), as `npm start` does. Default 0: the adapter refuses to start.
   */
  allowDevTokens: { env: 'AGW_ALLOW_DEV_TOKENS', default: '0' },
} as const satisfies Record<string, SettingSpec>;

export const AdapterSettingsSchema = z
  .strictObject({
    listen: listenSetting,
    topology: z
      .string({ error: 'is required: the path of the topology file' })
      .min(1, 'must not be empty'),
    db: z.string().min(1, 'must not be empty'),
    sync: z.enum(['full', 'normal'], { error: 'must be full or normal' }),
    console: z.enum(['on', 'off'], { error: 'must be on or off' }),
    maxMessageBytes: intSetting(1024, 16 * 1024 * 1024),
    queueCapacity: intSetting(1, 1_000_000),
    criticalCapacity: intSetting(1, 1_000_000),
    sendRate: intSetting(0, 1_000_000),
    sendBurst: intSetting(1, 1_000_000),
    hopBudget: intSetting(1, 1_000_000),
    threadBudget: intSetting(1, 1_000_000),
    leaseMs: intSetting(100, 24 * 3600 * 1000),
    maxLeaseMs: intSetting(1000, 24 * 3600 * 1000),
    maxRetries: intSetting(0, 100),
    retryBaseMs: intSetting(1, 3600 * 1000),
    retentionDays: intSetting(1, 36500),
    maxScheduleDays: intSetting(1, 3650),
    retentionKeepDays: intSetting(0, 36500),
    auditRetentionDays: intSetting(1, 36500),
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
    maxPageBytes: intSetting(65_536, 1024 * 1024 * 1024),
    maxStoreBytes: intSetting(1024 * 1024, 2 ** 50),
    senderSharePercent: z.string().transform((s, ctx): number | 'auto' => {
      const v = s.trim();
      const n = Number(v);
      if (v === 'auto') return 'auto';
      if (v === '' || !Number.isInteger(n) || n < 1 || n > 100) {
        ctx.addIssue({ code: 'custom', message: 'must be auto or an integer from 1 to 100' });
        return z.NEVER;
      }
      return n;
    }),
    minFreeBytes: intSetting(0, 2 ** 50),
    headersTimeoutMs: intSetting(100, 600_000),
    requestTimeoutMs: intSetting(100, 3_600_000),
    connectionsCheckingIntervalMs: intSetting(10, 60_000),
    keepAliveTimeoutMs: intSetting(1000, 3_600_000),
    maxConnections: intSetting(16, 1_000_000),
    reservedConnectionsPercent: intSetting(0, 90),
    maxConnectionsPerAddress: intSetting(1, 1_000_000),
    unauthenticatedIdleMs: intSetting(100, 3_600_000),
    maxPollsPerAgent: intSetting(1, 10_000),
    maxReadsPerAgent: intSetting(1, 10_000),
    maxResponseBytes: intSetting(65_536, 2 ** 40),
    writeTimeoutMs: intSetting(100, 3_600_000),
    log: z.enum(['stdout', 'journald'], { error: 'must be stdout or journald' }),
    journalSocket: z.string().min(1, 'must not be empty'),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      error: 'must be one of fatal, error, warn, info, debug, trace, silent',
    }),
    stallS: intSetting(1, 86_400),
    allowDevTokens: z.enum(['0', '1'], { error: 'must be 0 or 1' }).transform((v) => v === '1'),
    tlsCert: z.string().min(1, 'must not be empty').optional(),
    tlsKey: z.string().min(1, 'must not be empty').optional(),
    tlsClientCa: z.string().min(1, 'must not be empty').optional(),
    jwtJwks: z.string().min(1, 'must not be empty').optional(),
    jwtIssuer: z.string().min(1, 'must not be empty').optional(),
    jwtAudience: z.string().min(1, 'must not be empty'),
  })
  .superRefine((s, ctx) => {
    if ((s.tlsCert === undefined) !== (s.tlsKey === undefined)) {
      const missing = s.tlsCert === undefined ? 'tlsCert' : 'tlsKey';
      ctx.addIssue({
        code: 'custom',
        path: [missing],
        message: 'AGW_TLS_CERT and AGW_TLS_KEY go together: set both or neither',
      });
    }
    if (s.tlsClientCa !== undefined && s.tlsCert === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['tlsClientCa'],
        message: 'needs AGW_TLS_CERT and AGW_TLS_KEY: client certificates are asked for over TLS',
      });
    }
    if (s.jwtJwks !== undefined && s.jwtIssuer === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['jwtIssuer'],
        message: 'is required with AGW_JWT_JWKS: the issuer whose tokens are taken',
      });
    }
    if (s.maxLeaseMs < s.leaseMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['maxLeaseMs'],
        message: `must be at least AGW_LEASE_MS (${s.leaseMs}): an extension may only lengthen a lease`,
      });
    }
    if (s.retentionKeepDays > 0 && s.retentionKeepDays < s.retentionDays) {
      ctx.addIssue({
        code: 'custom',
        path: ['retentionKeepDays'],
        message: `must be 0 (kept for ever) or at least AGW_RETENTION_DAYS (${s.retentionDays}): kept kinds outlive the others`,
      });
    }
    if (s.maxResponseBytes < s.maxPageBytes) {
      ctx.addIssue({
        code: 'custom',
        path: ['maxResponseBytes'],
        message: `must be at least AGW_MAX_PAGE_BYTES (${s.maxPageBytes}): a read takes a page's bound of it`,
      });
    }
    if (s.headersTimeoutMs > s.requestTimeoutMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['headersTimeoutMs'],
        message: `must be at most AGW_REQUEST_TIMEOUT_MS (${s.requestTimeoutMs}): the headers are part of the request`,
      });
    }
  });

export type AdapterSettings = z.output<typeof AdapterSettingsSchema>;

/**
 * What the store needs of the settings and the topology: its durability, the delivery rules
 * (the agents share each recipient's critical capacity), its bounds.
 */
export function storeOptions(
  settings: AdapterSettings,
  topology: Pick<Topology, 'alertsTo' | 'agents'>,
) {
  const agents = topology.agents.size;
  const share = settings.senderSharePercent;
  return {
    sync: settings.sync,
    delivery: {
      capacity: settings.queueCapacity,
      criticalCapacity: settings.criticalCapacity,
      agents,
      leaseMs: settings.leaseMs,
      maxRetries: settings.maxRetries,
      retryBaseMs: settings.retryBaseMs,
      alertsTo: topology.alertsTo,
    },
    budgets: { hops: settings.hopBudget, messages: settings.threadBudget },
    storage: {
      maxBytes: settings.maxStoreBytes,
      senderShare: share === 'auto' ? senderShareFor(agents) : share / 100,
      reserveBytes: settings.minFreeBytes,
    },
  } as const;
}
