/**
 * HTTP/1.1 over plain sockets, for tests that must hold a connection open, pick the address it
 * comes from (127.0.0.2 and up are loopback too on Linux), or stop reading an answer.
 * Each socket opened here is recorded in `opened`; the test destroys them at its end.
 */
import { connect, type Socket } from 'node:net';
import { tokenOf } from './topology.js';

export const opened: Socket[] = [];

/** Destroys every socket opened so far. */
export function destroyOpened(): void {
  for (const s of opened.splice(0)) s.destroy();
}

/** A connection to the server at `url`, from `localAddress` when given; open once it resolves. */
export function rawConnect(url: string, localAddress?: string): Promise<Socket> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect(
      { host: u.hostname, port: Number(u.port), ...(localAddress ? { localAddress } : {}) },
      () => {
        s.off('error', reject);
        s.on('error', () => {}); // a reset by the server shows as 'close', which tests await
        resolve(s);
      },
    );
    s.once('error', reject);
    opened.push(s);
  });
}

/** Resolves when the socket is closed (by the server: the tests never close theirs first). */
export function closed(s: Socket): Promise<void> {
  return new Promise((resolve) => {
    if (s.destroyed) resolve();
    else s.once('close', () => resolve());
  });
}

/** The text of a GET request, with an agent's token when `agent` is given. */
export function getRequest(path: string, agent?: string): string {
  const auth = agent === undefined ? '' : `Authorization: Bearer ${tokenOf(agent)}\r\n`;
  return `GET ${path} HTTP/1.1\r\nHost: adapter\r\n${auth}\r\n`;
}

/**
 * Sends `request` and reads one answer (its Content-Length's worth); rejects when the socket
 * closes first. The socket stays open for the next.
 */
export function exchange(s: Socket, request: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buf.subarray(0, end).toString('latin1');
      const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      if (buf.length < end + 4 + length) return;
      done();
      resolve({
        status: Number(head.slice(9, 12)),
        body: buf.subarray(end + 4, end + 4 + length).toString('utf8'),
      });
    };
    const onClose = () => {
      done();
      reject(new Error(`the connection closed before an answer (${buf.length} bytes came)`));
    };
    const done = () => {
      s.off('data', onData);
      s.off('close', onClose);
    };
    s.on('data', onData);
    s.once('close', onClose);
    s.write(request);
  });
}
