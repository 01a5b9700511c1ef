/**
 * sd_notify(3) without libsystemd: a datagram with `READY=1`, `STOPPING=1` or `WATCHDOG=1` to
 * NOTIFY_SOCKET, a path, or an abstract socket when it starts with `@`. Without NOTIFY_SOCKET
 * (not run by systemd with Type=notify) every call does nothing.
 */
import { UnixDgram } from './unix-dgram.js';

export class SdNotify {
  readonly #path: string | undefined;
  readonly #watchdogMs: number | undefined;
  #socket: UnixDgram | undefined;
  #watchdog: NodeJS.Timeout | undefined;

  constructor(env: NodeJS.ProcessEnv = process.env) {
    const socket = env.NOTIFY_SOCKET;
    this.#path =
      socket === undefined || socket === ''
        ? undefined
        : socket.startsWith('@')
          ? `\0${socket.slice(1)}`
          : socket;
    const usec = Number(env.WATCHDOG_USEC);
    const forUs = env.WATCHDOG_PID === undefined || Number(env.WATCHDOG_PID) === process.pid;
    this.#watchdogMs = Number.isFinite(usec) && usec > 0 && forUs ? usec / 1000 : undefined;
  }

  get enabled(): boolean {
    return this.#path !== undefined;
  }

  /** Sends one state; resolves when sent (or at once without NOTIFY_SOCKET); never rejects. */
  notify(state: string): Promise<void> {
    const path = this.#path;
    if (path === undefined) return Promise.resolve();
    this.#socket ??= new UnixDgram();
    // one small datagram to systemd: a busy or missing socket is not worth more than a try
    this.#socket.send(Buffer.from(state), path);
    return Promise.resolve();
  }

  /** READY=1, and WATCHDOG=1 from now on at half of WATCHDOG_USEC when systemd asked for it. */
  async ready(): Promise<void> {
    await this.notify('READY=1');
    if (this.#watchdogMs !== undefined && this.#watchdog === undefined) {
      this.#watchdog = setInterval(() => void this.notify('WATCHDOG=1'), this.#watchdogMs / 2);
      this.#watchdog.unref();
    }
  }

  async stopping(): Promise<void> {
    if (this.#watchdog !== undefined) clearInterval(this.#watchdog);
    await this.notify('STOPPING=1');
  }

  close(): void {
    if (this.#watchdog !== undefined) clearInterval(this.#watchdog);
    this.#socket?.close();
    this.#socket = undefined;
  }
}
