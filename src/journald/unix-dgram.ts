/**
 * AF_UNIX datagram sockets: the one native piece, wrapped and typed here.
 *
 * unix-dgram (nan, built from source by node-gyp like better-sqlite3) sends synchronously: a
 * send either went, failed with an errno, or met a full socket (EAGAIN). On a *connected*
 * socket it then watches for writability and emits 'writable'; an unconnected sendto only
 * returns the errno, so the journald writer connects. It must stay on the main thread (it
 * crashes inside worker threads), and a socket must be closed exactly once (a second close
 * aborts the process), which this wrapper guarantees.
 *
 * Paths starting with NUL are abstract sockets (sd_notify's `@name`).
 */
import { createRequire } from 'node:module';

interface RawSocket {
  on(event: 'writable', fn: () => void): void;
  on(event: 'message', fn: (buf: Buffer) => void): void;
  on(event: 'error', fn: (err: Error) => void): void;
  bind(path: string): void;
  connect(path: string): void;
  send(
    buf: Buffer,
    offset: number,
    length: number,
    path: string,
    cb: (err?: Error & { code?: string | number }) => void,
  ): void;
  close(): void;
}

const unix = createRequire(import.meta.url)('unix-dgram') as {
  createSocket(type: 'unix_dgram', onMessage?: (buf: Buffer) => void): RawSocket;
};

/** errno values are negative numbers from unix-dgram (Linux numbering). */
export const EMSGSIZE = -90;
const EAGAIN = -11;

export type SendResult = 'sent' | 'busy' | { errno: number };

export class UnixDgram {
  readonly #raw: RawSocket;
  #closed = false;

  constructor(handlers: { onWritable?: () => void; onMessage?: (buf: Buffer) => void } = {}) {
    this.#raw = unix.createSocket('unix_dgram', handlers.onMessage);
    this.#raw.on('error', () => {}); // errors come back from send(); bind errors are thrown below
    if (handlers.onWritable) this.#raw.on('writable', handlers.onWritable);
  }

  /** Connects to a path; later sends without a path go there. */
  connect(path: string): void {
    let failed: Error | undefined;
    const onError = (err: Error) => {
      failed = err;
    };
    this.#raw.on('error', onError);
    this.#raw.connect(path);
    if (failed) throw failed;
  }

  /**
   * Sends one datagram now, to `path` or (without one) to the connected peer: sent, busy
   * (EAGAIN; a connected socket emits onWritable when it can take more), or an errno.
   */
  send(datagram: Buffer, path?: string): SendResult {
    if (this.#closed) return { errno: -9 };
    let result: SendResult = 'sent';
    const done = (err?: Error & { code?: string | number }) => {
      if (err === undefined || err === null) return;
      const errno = Number(err.code) || -1;
      result = err.message === 'congestion' || errno === EAGAIN ? 'busy' : { errno };
    };
    if (path === undefined) {
      (this.#raw as unknown as { send(buf: Buffer, cb: typeof done): void }).send(datagram, done);
    } else {
      this.#raw.send(datagram, 0, datagram.length, path, done);
    }
    return result;
  }

  /** Listens on a path (tests: a stand-in for NOTIFY_SOCKET). */
  bind(path: string): void {
    let failed: Error | undefined;
    this.#raw.on('error', (err) => {
      failed = err;
    });
    this.#raw.bind(path);
    if (failed) throw failed;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#raw.close();
  }
}
