/**
 * What a peer that has shown no token may hold of the adapter's connections. Without this, 4,096 idle keep-alive sockets from one process, one
 * `GET /healthz` each, filled AGW_MAX_CONNECTIONS for 65 s: every agent's and every probe's new
 * connection was reset, and holding that cost the peer about 63 connections a second.
 *
 * A connection is *untrusted* until it carries a request whose bearer token names an agent;
 * then it is *trusted* for the rest of its life and kept alive as long as
 * AGW_KEEP_ALIVE_TIMEOUT_MS says. An untrusted connection:
 * - is closed once idle (no request in progress, before its first one included, so headers
 *   trickled a byte at a time count as idle) for AGW_UNAUTHENTICATED_IDLE_MS (5 s);
 * - counts against its remote address's share, AGW_MAX_CONNECTIONS_PER_ADDRESS (256);
 * - counts against the untrusted pool: AGW_MAX_CONNECTIONS less the reserve,
 *   AGW_RESERVED_CONNECTIONS_PERCENT (25%), which only trusted connections may fill.
 * A new connection past either bound closes the oldest *idle* untrusted connection of that
 * address (or of the pool) to make room, and is refused only when none is idle. So a flood of
 * idle sockets never keeps a new agent or probe out: each newcomer takes the place of the
 * flood's oldest, and sends its request at once. Node's own `maxConnections` stays the hard cap
 * over all connections.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { EventMap, ListenerErrors } from '../protocol/events.js';

export interface ConnectionLimitOptions {
  /** AGW_MAX_CONNECTIONS: open connections at most, trusted and untrusted. */
  readonly maxConnections: number;
  /** AGW_RESERVED_CONNECTIONS_PERCENT: the part of them only trusted connections may hold. */
  readonly reservedPercent: number;
  /** AGW_MAX_CONNECTIONS_PER_ADDRESS: untrusted connections one remote address may hold. */
  readonly maxPerAddress: number;
  /** AGW_UNAUTHENTICATED_IDLE_MS: how long an untrusted connection may sit idle, ms. */
  readonly idleMs: number;
  /** Where 'connection:closed' and 'connection:refused' are told (the adapter's event map). */
  readonly events?: Pick<EventMap<ConnectionEvents & ListenerErrors>, 'emit'>;
}

export interface ConnectionEvents {
  /** An idle untrusted connection was closed: its idle time ran out, or a newcomer took its place. */
  'connection:closed': [reason: 'idle' | 'evicted', address: string];
  /** A new connection was refused: its bound was full and none of the connections in it idle. */
  'connection:refused': [address: string];
}

interface Conn {
  readonly socket: Socket;
  readonly address: string;
  trusted: boolean;
  gone: boolean;
  /** Requests in progress on it (more than one only when pipelined). */
  busy: number;
  timer: NodeJS.Timeout | undefined;
}

interface Peer {
  /** Its untrusted connections. */
  count: number;
  /** Of those, the idle ones, oldest idle first (a Set keeps insertion order). */
  readonly idle: Set<Conn>;
}

export class ConnectionLimits {
  readonly #opts: ConnectionLimitOptions;
  /** Untrusted connections at most: AGW_MAX_CONNECTIONS less the reserve. */
  readonly maxUntrusted: number;
  readonly #conns = new Map<Socket, Conn>();
  readonly #peers = new Map<string, Peer>();
  /** Every idle untrusted connection, oldest idle first. */
  readonly #idle = new Set<Conn>();
  #untrusted = 0;

  constructor(opts: ConnectionLimitOptions) {
    this.#opts = opts;
    this.maxUntrusted = Math.max(
      1,
      opts.maxConnections - Math.floor((opts.maxConnections * opts.reservedPercent) / 100),
    );
  }

  /** Admits the server's connections and watches their requests. */
  attach(server: Server): void {
    server.on('connection', (socket: Socket) => this.#admit(socket));
    server.on('request', (req: IncomingMessage, res: ServerResponse) => this.#request(req, res));
  }

  /** The connection carried a request whose token names an agent: trusted from now on. */
  trust(socket: Socket): void {
    const c = this.#conns.get(socket);
    if (c === undefined || c.trusted || c.gone) return;
    this.#leaveUntrusted(c);
    c.trusted = true;
  }

  /** Connections open now, untrusted and trusted. */
  get counts(): { untrusted: number; trusted: number } {
    return { untrusted: this.#untrusted, trusted: this.#conns.size - this.#untrusted };
  }

  #admit(socket: Socket): void {
    const address = socket.remoteAddress ?? '';
    let peer = this.#peers.get(address);
    if (peer !== undefined && peer.count >= this.#opts.maxPerAddress && !this.#evict(peer.idle)) {
      this.#refuse(socket, address);
      return;
    }
    if (this.#untrusted >= this.maxUntrusted && !this.#evict(this.#idle)) {
      this.#refuse(socket, address);
      return;
    }
    if (peer === undefined) {
      peer = { count: 0, idle: new Set() };
      this.#peers.set(address, peer);
    }
    const c: Conn = { socket, address, trusted: false, gone: false, busy: 0, timer: undefined };
    this.#conns.set(socket, c);
    this.#untrusted++;
    peer.count++;
    this.#idleNow(c);
    socket.once('close', () => this.#forget(c));
  }

  #request(req: IncomingMessage, res: ServerResponse): void {
    const c = this.#conns.get(req.socket);
    if (c === undefined || c.gone) return;
    c.busy++;
    if (!c.trusted) this.#busyNow(c);
    res.once('close', () => {
      c.busy--;
      if (c.busy === 0 && !c.trusted && !c.gone) this.#idleNow(c);
    });
  }

  /** Closes the oldest idle connection of `idle`; false when there is none. */
  #evict(idle: Set<Conn>): boolean {
    const oldest = idle.values().next();
    if (oldest.done === true) return false;
    this.#close(oldest.value, 'evicted');
    return true;
  }

  #refuse(socket: Socket, address: string): void {
    socket.destroy();
    this.#opts.events?.emit('connection:refused', address);
  }

  #close(c: Conn, reason: 'idle' | 'evicted'): void {
    this.#forget(c); // at once: the admission that evicted it counts without it
    c.socket.destroy();
    this.#opts.events?.emit('connection:closed', reason, c.address);
  }

  #idleNow(c: Conn): void {
    this.#idle.add(c);
    this.#peers.get(c.address)?.idle.add(c);
    clearTimeout(c.timer);
    c.timer = setTimeout(() => {
      if (!c.gone && !c.trusted && c.busy === 0) this.#close(c, 'idle');
    }, this.#opts.idleMs);
    c.timer.unref();
  }

  #busyNow(c: Conn): void {
    this.#idle.delete(c);
    this.#peers.get(c.address)?.idle.delete(c);
    clearTimeout(c.timer);
    c.timer = undefined;
  }

  #leaveUntrusted(c: Conn): void {
    this.#busyNow(c);
    this.#untrusted--;
    const peer = this.#peers.get(c.address);
    if (peer !== undefined && --peer.count === 0) this.#peers.delete(c.address);
  }

  #forget(c: Conn): void {
    if (c.gone) return;
    c.gone = true;
    this.#conns.delete(c.socket);
    if (!c.trusted) this.#leaveUntrusted(c);
  }
}
