/**
 * The sidecar's settings (docs/reference/sidecar.md, "Settings"), each with its AGW_* variable.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { intSetting, listenSetting, type SettingSpec } from '../settings.js';
import { type AdapterTlsFiles, loadAdapterTls, TlsFileError } from './adapter-tls.js';

export const SIDECAR_SETTINGS = {
  /** Where the sidecar listens. Default 127.0.0.1:7070: loopback, the pod is the trust boundary. */
  listen: { env: 'AGW_LISTEN', default: '127.0.0.1:7070' },
  /**
   * A second listener, for Prometheus, that serves GET /metrics and nothing else (e.g.
   * 0.0.0.0:9464, the pod's address, where a scraper reaches it). Default none: off.
   */
  metricsListen: { env: 'AGW_METRICS_LISTEN' },
  /** The adapter's base URL. Required. */
  adapterUrl: { env: 'AGW_ADAPTER_URL' },
  /** The agent this sidecar speaks for. Required. */
  agentId: { env: 'AGW_AGENT_ID' },
  /** The agent's bearer token, or a file holding it (one of the two is required). */
  agentToken: { env: 'AGW_AGENT_TOKEN' },
  /** Re-read when it changes (a projected service-account token rotates hourly). */
  agentTokenFile: { env: 'AGW_AGENT_TOKEN_FILE' },
  /**
   * PEM certificates trusted for an https:// adapter in addition to the system's roots. Default
   * none. It and the two below are re-read when they change.
   */
  adapterCa: { env: 'AGW_ADAPTER_CA' },
  /** The client certificate (PEM) shown to an https:// adapter (mTLS). Default none. */
  tlsClientCert: { env: 'AGW_TLS_CLIENT_CERT' },
  /** Its private key (PEM, unencrypted): with AGW_TLS_CLIENT_CERT, never alone. Default none. */
  tlsClientKey: { env: 'AGW_TLS_CLIENT_KEY' },
  /** The outbox file. Default ./data/outbox.db. */
  outbox: { env: 'AGW_OUTBOX', default: './data/outbox.db' },
  /** Messages the outbox holds. Default 1000. */
  outboxCapacity: { env: 'AGW_OUTBOX_CAPACITY', default: '1000' },
  /** Seconds without the adapter at start before a CRIT adapter_unreachable. Default 60. */
  startupAlarmS: { env: 'AGW_STARTUP_ALARM_S', default: '60' },
  /** How long SIGTERM waits for a last drain, ms. Default 5000. */
  shutdownGraceMs: { env: 'AGW_SHUTDOWN_GRACE_MS', default: '5000' },
  /** Breaker reset timeout and drain retry: first value and cap, ms. Defaults 1000 and 60000. */
  breakerBaseMs: { env: 'AGW_BREAKER_BASE_MS', default: '1000' },
  breakerMaxMs: { env: 'AGW_BREAKER_MAX_MS', default: '60000' },
  /** Deadline of a new connection to the adapter (lookup and handshake), ms. Default 2000. */
  adapterConnectTimeoutMs: { env: 'AGW_ADAPTER_CONNECT_TIMEOUT_MS', default: '2000' },
  journalSocket: { env: 'AGW_JOURNAL_SOCKET', default: '/run/systemd/journal/socket' },
  log: { env: 'AGW_LOG', default: 'stdout' },
  logLevel: { env: 'AGW_LOG_LEVEL', default: 'info' },
} as const satisfies Record<string, SettingSpec>;

export const SidecarSettingsSchema = z
  .strictObject({
    listen: listenSetting,
    metricsListen: listenSetting.optional(),
    adapterUrl: z
      .string({ error: 'is required: the base URL of the adapter' })
      .regex(/^https?:\/\/[^/]+/, 'must be an http:// or https:// URL'),
    agentId: z.string({ error: 'is required: the agent this sidecar speaks for' }).min(1),
    agentToken: z.string().min(1).optional(),
    agentTokenFile: z.string().min(1).optional(),
    adapterCa: z.string().min(1, 'must not be empty').optional(),
    tlsClientCert: z.string().min(1, 'must not be empty').optional(),
    tlsClientKey: z.string().min(1, 'must not be empty').optional(),
    outbox: z.string().min(1, 'must not be empty'),
    outboxCapacity: intSetting(1, 1_000_000),
    startupAlarmS: intSetting(1, 86_400),
    shutdownGraceMs: intSetting(0, 600_000),
    breakerBaseMs: intSetting(10, 3_600_000),
    breakerMaxMs: intSetting(10, 3_600_000),
    adapterConnectTimeoutMs: intSetting(10, 60_000),
    journalSocket: z.string().min(1),
    log: z.enum(['stdout', 'journald'], { error: 'must be stdout or journald' }),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      error: 'must be one of fatal, error, warn, info, debug, trace, silent',
    }),
  })
  .transform((s, ctx) => {
    let token = s.agentToken;
    if (token === undefined && s.agentTokenFile !== undefined) {
      try {
        token = readFileSync(s.agentTokenFile, 'utf8').trim();
      } catch (err) {
        ctx.addIssue({
          code: 'custom',
          path: ['agentTokenFile'],
          message: `cannot read: ${(err as Error).message}`,
        });
        return z.NEVER;
      }
      if (token === '') {
        ctx.addIssue({ code: 'custom', path: ['agentTokenFile'], message: 'is empty' });
        return z.NEVER;
      }
    }
    if (token === undefined || token === '') {
      ctx.addIssue({
        code: 'custom',
        path: ['agentToken'],
        message: 'is required (or AGW_AGENT_TOKEN_FILE)',
      });
      return z.NEVER;
    }
    const m = s.metricsListen;
    if (m !== undefined && m.port !== 0 && m.host === s.listen.host && m.port === s.listen.port) {
      ctx.addIssue({
        code: 'custom',
        path: ['metricsListen'],
        message: `is AGW_LISTEN's own address: give Prometheus a port of its own, such as ${m.host}:9464`,
      });
      return z.NEVER;
    }
    const tls = tlsFiles(s, ctx);
    if (tls === z.NEVER) return z.NEVER;
    return {
      ...s,
      agentToken: token,
      // the file the token came from, re-read when it changes; AGW_AGENT_TOKEN wins over it
      agentTokenFile: s.agentToken === undefined ? s.agentTokenFile : undefined,
      adapterTls: tls,
    };
  });

/**
 * The TLS files towards the adapter, checked whole (adapter-tls.ts), or undefined when none is
 * set. A certificate needs its key and the reverse. They are refused with an http:// adapter,
 * not ignored: whoever set them meant TLS, and the sidecar would send the agent's token in
 * clear to a URL that was most likely meant to be https://.
 */
function tlsFiles(
  s: { adapterUrl: string; adapterCa?: string; tlsClientCert?: string; tlsClientKey?: string },
  ctx: z.RefinementCtx,
): AdapterTlsFiles | undefined | typeof z.NEVER {
  const set = (['adapterCa', 'tlsClientCert', 'tlsClientKey'] as const).filter(
    (k) => s[k] !== undefined,
  );
  if (set.length === 0) return undefined;
  if (!s.adapterUrl.startsWith('https://')) {
    ctx.addIssue({
      code: 'custom',
      path: [set[0]!],
      message: `applies to an https:// adapter only, and AGW_ADAPTER_URL is ${s.adapterUrl}: make it https://, or unset this (the token would go in clear)`,
    });
    return z.NEVER;
  }
  if ((s.tlsClientCert === undefined) !== (s.tlsClientKey === undefined)) {
    const missing = s.tlsClientCert === undefined ? 'tlsClientCert' : 'tlsClientKey';
    ctx.addIssue({
      code: 'custom',
      path: [missing],
      message:
        missing === 'tlsClientKey'
          ? 'is required with AGW_TLS_CLIENT_CERT: the certificate is shown with its key'
          : 'is required with AGW_TLS_CLIENT_KEY: the key is shown with its certificate',
    });
    return z.NEVER;
  }
  const files: AdapterTlsFiles = { ca: s.adapterCa, cert: s.tlsClientCert, key: s.tlsClientKey };
  try {
    loadAdapterTls(files);
  } catch (err) {
    if (!(err instanceof TlsFileError)) throw err;
    const key = { ca: 'adapterCa', cert: 'tlsClientCert', key: 'tlsClientKey' }[err.file];
    ctx.addIssue({ code: 'custom', path: [key], message: err.message });
    return z.NEVER;
  }
  return files;
}

export type SidecarSettings = z.output<typeof SidecarSettingsSchema>;
