/**
 * The journald writer: entries as datagrams on journald's native socket.
 *
 * AF_UNIX datagrams need a native module. unix-dgram crashes inside worker threads (which is
 * where pino would run a transport), so we use node-unix-socket (napi-rs, prebuilt, driven by
 * Node's own libuv loop) and keep the writer on the main thread: pino's destination here is a
 * plain object with write(), no worker.
 *
 * - **Busy socket (EAGAIN).** node-unix-socket queues a datagram the kernel will not take yet and
 *   sends it when the socket turns writable. We bound that queue: at most `maxPendingBytes` in
 *   flight (16 MiB: a burst of ~100,000 ordinary log lines); past the bound an entry is dropped
 *   and counted exactly (`stats.dropped`), and the count is reported with the next entry that
 *   gets through, or on its own entry once the queue has drained (AGW_DROPPED).
 * - **No socket.** Entries go to stderr as one line prefixed `<2>` (journald and conmon 2.2+
 *   read that as CRIT), so the emergency channel degrades rather than vanishes; a warning says
 *   so once. The writer looks for the socket again at most every `recheckMs` and picks it up
 *   when journald is back. An entry whose send fails because journald went away goes to stderr
 *   too: nothing is lost silently.
 */
import { existsSync } from 'node:fs';
import { DgramSocket } from 'node-unix-socket';
import { encodeEntry, type Fields } from './native-protocol.js';

export interface JournalWriterOptions {
  /** journald's native socket. Default /run/systemd/journal/socket. */
  readonly socketPath?: string;
  /** Bytes in flight before new entries are dropped (counted). Default 16 MiB. */
  readonly maxPendingBytes?: number;
  /** How often to look for a missing socket again, ms. Default 1,000. */
  readonly recheckMs?: number;
  /** Where degraded entries go. Default process.stderr. */
  readonly stderr?: { write(line: string): unknown };
}

export interface JournalStats {
  /** Entries journald took. */
  sent: number;
  /** Entries written to stderr because there was no journald. */
  toStderr: number;
  /** Entries dropped because `maxPendingBytes` were already in flight. */
  dropped: number;
  /** Entries in flight now, and their bytes. */
  pending: number;
  pendingBytes: number;
}

export const DEFAULT_JOURNAL_SOCKET = '/run/systemd/journal/socket';

/** The send buffer we ask for; the kernel may cap it at net.core.wmem_max. */
const SEND_BUFFER_BYTES = 8 * 1024 * 1024;
/**
 * The largest entry sent as one datagram: 1 MiB, far above any log line, well inside what
 * journald takes on its native socket; larger entries are cut at their largest field.
 */
const MAX_ENTRY_BYTES = 1024 * 1024;

export class JournalWriter {
  readonly stats: JournalStats = { sent: 0, toStderr: 0, dropped: 0, pending: 0, pendingBytes: 0 };
  readonly socketPath: string;
  readonly #maxPendingBytes: number;
  readonly #recheckMs: number;
  readonly #stderr: { write(line: string): unknown };
  readonly #maxBytes: number;
  #socket: DgramSocket | undefined;
  #available: boolean;
  #checkedAt = 0;
  #warned = false;
  #unreported = 0;
  #idle: (() => void)[] = [];

  constructor(opts: JournalWriterOptions = {}) {
    this.socketPath = opts.socketPath ?? DEFAULT_JOURNAL_SOCKET;
    this.#maxPendingBytes = opts.maxPendingBytes ?? 16 * 1024 * 1024;
    this.#recheckMs = opts.recheckMs ?? 1000;
    this.#stderr = opts.stderr ?? process.stderr;
    this.#available = existsSync(this.socketPath);
    this.#checkedAt = Date.now();
    let sndbuf = 212_992;
    try {
      const s = this.#open();
      s.setSendBufferSize(SEND_BUFFER_BYTES);
      sndbuf = s.getSendBufferSize();
    } catch {
      // keep the kernel's default
    }
    // a little under the buffer: the kernel counts its own overhead against it
    this.#maxBytes = Math.min(sndbuf - 4096, MAX_ENTRY_BYTES);
    if (!this.#available) this.#warn();
  }

  /** Whether entries currently reach journald (false: they go to stderr). */
  get available(): boolean {
    return this.#available;
  }

  /** The largest entry sent whole; larger ones are cut at their largest field. */
  get maxEntryBytes(): number {
    return this.#maxBytes;
  }

  /** Writes one entry; never throws, never blocks. */
  write(fields: Fields): void {
    if (!this.#available && Date.now() - this.#checkedAt >= this.#recheckMs) {
      this.#checkedAt = Date.now();
      this.#available = existsSync(this.socketPath);
    }
    if (!this.#available) {
      this.#toStderr(fields);
      return;
    }
    const entry =
      this.#unreported > 0
        ? { ...fields, AGW_DROPPED: this.#unreported, AGW_DROPPED_TOTAL: this.stats.dropped }
        : fields;
    const datagram = encodeEntry(entry, this.#maxBytes);
    if (this.stats.pendingBytes + datagram.length > this.#maxPendingBytes) {
      this.stats.dropped++;
      this.#unreported++;
      return;
    }
    this.#unreported = 0;
    this.#send(datagram, fields);
  }

  #send(datagram: Buffer, fields: Fields): void {
    this.stats.pending++;
    this.stats.pendingBytes += datagram.length;
    try {
      this.#open().sendTo(datagram, 0, datagram.length, this.socketPath, (err) =>
        this.#done(err, fields, datagram.length),
      );
    } catch (err) {
      this.#done(err as Error, fields, datagram.length);
    }
  }

  /** Resolves once every entry written so far has been sent (or sent to stderr). */
  flush(): Promise<void> {
    if (this.stats.pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  close(): void {
    this.#socket?.close();
    this.#socket = undefined;
  }

  #done(err: Error | undefined | null, fields: Fields, bytes: number): void {
    this.stats.pending--;
    this.stats.pendingBytes -= bytes;
    if (err) {
      // journald went away (restart, stop): this entry goes to stderr, later ones too until
      // the socket is back
      this.#available = false;
      this.#checkedAt = Date.now();
      this.#toStderr(fields);
    } else {
      this.stats.sent++;
    }
    if (this.stats.pending === 0 && this.#unreported > 0 && this.#available) {
      // the queue drained with drops nobody has heard of yet: say so now
      const n = this.#unreported;
      this.#unreported = 0;
      const report = {
        PRIORITY: 4,
        MESSAGE: `agent-gateway: ${n} journal entries were dropped while the socket was busy`,
        SYSLOG_IDENTIFIER: 'agent-gateway',
        AGW_DROPPED: n,
        AGW_DROPPED_TOTAL: this.stats.dropped,
      };
      this.#send(encodeEntry(report, this.#maxBytes), report);
      return;
    }
    if (this.stats.pending === 0) for (const resolve of this.#idle.splice(0)) resolve();
  }

  #open(): DgramSocket {
    if (this.#socket === undefined) {
      this.#socket = new DgramSocket();
      this.#socket.on('error', () => {
        this.#socket = undefined;
      });
    }
    return this.#socket;
  }

  #toStderr(fields: Fields): void {
    this.stats.toStderr++;
    this.#warn();
    const line = Object.entries(fields)
      .filter(([k, v]) => v !== undefined && k !== 'PRIORITY' && k !== 'MESSAGE')
      .map(
        ([k, v]) => `${k}=${JSON.stringify(Buffer.isBuffer(v) ? v.toString('utf8') : String(v))}`,
      )
      .join(' ');
    const message = String(fields.MESSAGE ?? '').replace(/\s*\n\s*/g, ' ');
    const priority = Number(fields.PRIORITY ?? 6);
    this.#stderr.write(
      `<${Number.isInteger(priority) ? priority : 6}>${message}${line ? ` ${line}` : ''}\n`,
    );
  }

  #warn(): void {
    if (this.#warned) return;
    this.#warned = true;
    this.#stderr.write(
      `<4>agent-gateway: no journald socket at ${this.socketPath}: the emergency channel is degraded to stderr until it appears\n`,
    );
  }
}
