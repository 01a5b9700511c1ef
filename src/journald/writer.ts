/**
 * The journald writer: entries as datagrams on journald's native socket.
 *
 * AF_UNIX datagrams need a native module (unix-dgram.ts); the writer stays on the main thread,
 * and pino's journald destination is a plain object with write(), not a worker transport.
 *
 * - **Busy socket (EAGAIN).** The entry waits in a resend queue, in order, and later entries
 *   queue behind it; the queue drains when the socket turns writable. It is bounded (16 MiB,
 *   a burst of ~100,000 ordinary log lines): past the bound an entry is dropped and counted
 *   exactly (`stats.dropped`), and the count is reported with the next entry that gets through,
 *   or on its own entry once the queue has drained (AGW_DROPPED).
 * - **No socket.** Entries go to stderr as one line prefixed `<2>` (journald and conmon 2.2+
 *   read that as CRIT), so the emergency channel degrades rather than vanishes; a warning says
 *   so once. The writer looks for the socket again at most every `recheckMs` and picks it up
 *   when journald is back. Entries waiting when journald went away go to stderr too: nothing is
 *   lost silently.
 */
import { existsSync, readFileSync } from 'node:fs';
import { encodeEntry, type Fields, normalizeKey } from './native-protocol.js';
import { EMSGSIZE, UnixDgram } from './unix-dgram.js';

export interface JournalWriterOptions {
  /** journald's native socket. Default /run/systemd/journal/socket. */
  readonly socketPath?: string;
  /** Bytes waiting in the resend queue before new entries are dropped (counted). Default 16 MiB. */
  readonly maxQueuedBytes?: number;
  /** How often to look for a missing socket again, ms. Default 1,000. */
  readonly recheckMs?: number;
  /** Where degraded entries go. Default process.stderr. */
  readonly stderr?: { write(line: string): unknown };
}

export interface JournalStats {
  /** Entries journald took. */
  sent: number;
  /** Entries written to stderr because there was no journald (or journald refused them). */
  toStderr: number;
  /** Entries dropped because the resend queue was full. */
  dropped: number;
  /** Entries waiting in the resend queue now, and their bytes. */
  queued: number;
  queuedBytes: number;
}

export const DEFAULT_JOURNAL_SOCKET = '/run/systemd/journal/socket';

/**
 * The largest entry sent as one datagram. An AF_UNIX datagram must fit the socket's send
 * buffer, net.core.wmem_default (212,992 bytes on most machines); journald's own limit is far
 * higher. Larger entries are cut at their largest field.
 */
function maxEntryBytes(): number {
  try {
    const wmem = Number(readFileSync('/proc/sys/net/core/wmem_default', 'utf8'));
    if (Number.isInteger(wmem) && wmem > 16_384) return wmem - 4096;
  } catch {
    // not Linux, or no /proc: the common default
  }
  return 212_992 - 4096;
}

interface Queued {
  readonly datagram: Buffer;
  readonly fields: Fields;
}

export class JournalWriter {
  readonly stats: JournalStats = { sent: 0, toStderr: 0, dropped: 0, queued: 0, queuedBytes: 0 };
  readonly socketPath: string;
  readonly maxEntryBytes = maxEntryBytes();
  readonly #maxQueuedBytes: number;
  readonly #recheckMs: number;
  readonly #stderr: { write(line: string): unknown };
  #socket: UnixDgram | undefined;
  readonly #queue: Queued[] = [];
  #available: boolean;
  #checkedAt: number;
  #warned = false;
  #unreported = 0;
  #idle: (() => void)[] = [];

  constructor(opts: JournalWriterOptions = {}) {
    this.socketPath = opts.socketPath ?? DEFAULT_JOURNAL_SOCKET;
    this.#maxQueuedBytes = opts.maxQueuedBytes ?? 16 * 1024 * 1024;
    this.#recheckMs = opts.recheckMs ?? 1000;
    this.#stderr = opts.stderr ?? process.stderr;
    this.#available = this.#connect();
    this.#checkedAt = Date.now();
    if (!this.#available) this.#warn();
  }

  /** Whether entries currently reach journald (false: they go to stderr). */
  get available(): boolean {
    return this.#available;
  }

  /** Writes one entry; never throws, never blocks. */
  write(fields: Fields): void {
    if (!this.#available && Date.now() - this.#checkedAt >= this.#recheckMs) {
      this.#checkedAt = Date.now();
      this.#available = this.#connect();
    }
    if (!this.#available) {
      this.#toStderr(fields);
      return;
    }
    const entry =
      this.#unreported > 0
        ? { ...fields, AGW_DROPPED: this.#unreported, AGW_DROPPED_TOTAL: this.stats.dropped }
        : fields;
    const datagram = encodeEntry(entry, this.maxEntryBytes);
    if (this.#queue.length > 0) {
      this.#enqueue(datagram, fields);
      return;
    }
    this.#unreported = 0;
    this.#send({ datagram, fields });
  }

  /** Resolves once the resend queue is empty (everything written so far has gone somewhere). */
  flush(): Promise<void> {
    if (this.#queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  close(): void {
    for (const q of this.#queue.splice(0)) this.#toStderr(q.fields);
    this.#settle();
    this.#socket?.close();
    this.#socket = undefined;
  }

  /** A fresh socket connected to journald's (a restarted journald has a new one). */
  #connect(): boolean {
    this.#socket?.close();
    this.#socket = undefined;
    if (!existsSync(this.socketPath)) return false;
    const socket = new UnixDgram({ onWritable: () => this.#drain() });
    try {
      socket.connect(this.socketPath);
    } catch {
      socket.close();
      return false;
    }
    this.#socket = socket;
    return true;
  }

  /** Sends one datagram; false if the socket was busy (the entry is then at the queue's head). */
  #send(q: Queued, fromQueue = false): boolean {
    const r = this.#socket?.send(q.datagram) ?? { errno: -9 };
    if (r === 'sent') {
      this.stats.sent++;
      return true;
    }
    if (r === 'busy') {
      if (!fromQueue) this.#enqueue(q.datagram, q.fields, true);
      return false;
    }
    if (r.errno !== EMSGSIZE) {
      // journald went away (stopped, restarting): this entry and those waiting go to stderr,
      // later ones too until the socket is back
      this.#available = false;
      this.#checkedAt = Date.now();
      if (fromQueue) this.#queue.shift();
      this.#toStderr(q.fields);
      for (const w of this.#queue.splice(0)) this.#toStderr(w.fields);
      this.#settle();
      return false;
    }
    this.#toStderr(q.fields);
    return true;
  }

  #enqueue(datagram: Buffer, fields: Fields, force = false): void {
    if (!force && this.stats.queuedBytes + datagram.length > this.#maxQueuedBytes) {
      this.stats.dropped++;
      this.#unreported++;
      return;
    }
    this.#queue.push({ datagram, fields });
    this.stats.queued = this.#queue.length;
    this.stats.queuedBytes += datagram.length;
  }

  /** The socket can take more: send what waits, in order, until it is busy again. */
  #drain(): void {
    while (this.#queue.length > 0) {
      const head = this.#queue[0]!;
      const before = this.#queue.length;
      if (!this.#send(head, true)) {
        if (this.#queue.length === before) return; // busy: wait for the next 'writable'
        break; // journald went away: the queue went to stderr
      }
      this.#queue.shift();
      this.stats.queuedBytes -= head.datagram.length;
      this.stats.queued = this.#queue.length;
    }
    if (this.#unreported > 0 && this.#available) {
      // the queue drained with drops nobody has heard of yet: say so now
      const n = this.#unreported;
      this.#unreported = 0;
      const report = {
        PRIORITY: 4,
        MESSAGE: `agent-gateway: ${n} journal entries were dropped while journald was busy`,
        SYSLOG_IDENTIFIER: 'agent-gateway',
        AGW_DROPPED: n,
        AGW_DROPPED_TOTAL: this.stats.dropped,
      };
      this.#send({ datagram: encodeEntry(report, this.maxEntryBytes), fields: report });
      if (this.#queue.length > 0) return;
    }
    this.#settle();
  }

  #settle(): void {
    this.stats.queued = this.#queue.length;
    if (this.#queue.length === 0) {
      this.stats.queuedBytes = 0;
      for (const resolve of this.#idle.splice(0)) resolve();
    }
  }

  #toStderr(fields: Fields): void {
    this.stats.toStderr++;
    this.#warn();
    const line = Object.entries(fields)
      .filter(([k, v]) => v !== undefined && k !== 'PRIORITY' && k !== 'MESSAGE')
      .map(
        ([k, v]) =>
          `${normalizeKey(k)}=${printable(JSON.stringify(Buffer.isBuffer(v) ? v.toString('utf8') : String(v)))}`,
      )
      .join(' ');
    const message = printable(String(fields.MESSAGE ?? '').replace(/\s*\n\s*/g, ' '));
    const priority = Number(fields.PRIORITY ?? 6);
    this.#stderr.write(
      `<${Number.isInteger(priority) ? priority : 6}>${message}${line ? ` ${line}` : ''}\n`,
    );
  }

  #warn(): void {
    if (this.#warned) return;
    this.#warned = true;
    this.#stderr.write(
      `<4>agent-gateway: no journald socket at ${printable(this.socketPath)}: the emergency channel is degraded to stderr until it appears\n`,
    );
  }
}

/**
 * Characters a stderr line must not carry raw: C0 controls (NUL, CR, ESC, ...: a CR or a NUL
 * lets one entry overwrite or end a line and forge `<2>...` after it; ESC drives a terminal),
 * DEL, C1 controls (U+0080-U+009F: U+0085 is a line break to some readers, U+009B a CSI to some
 * terminals), the Unicode line and paragraph separators (U+2028, U+2029: line breaks to some log
 * viewers), and the bidirectional overrides and isolates (U+061C, U+200E-U+200F, U+202A-U+202E,
 * U+2066-U+2069: they reorder how the rest of the line reads on screen).
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is its job
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

/**
 * `text` with every UNPRINTABLE character written as `\xHH` (up to U+00FF) or `\uHHHH`, so an
 * entry on stderr is always exactly one line and only shows what it says. A backslash is left
 * as it is: the escape is for the eye and the terminal, not to be decoded.
 */
function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff
      ? `\\x${code.toString(16).padStart(2, '0')}`
      : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
