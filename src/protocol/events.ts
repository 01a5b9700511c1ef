/**
 * A typed event map with isolated listeners, one per program (docs/reference/events.md lists
 * each event): the parts emit what happened, after it happened (a group committed, the circuit
 * opened), and whoever watches subscribes — metrics, the journald emergencies, the log, later
 * the console's live view and tracing — without the parts knowing them.
 *
 * A listener that throws neither skips the others nor reaches the emitter, which is in the
 * middle of its own work (a commit's answers, a drain): it is reported as `listener:error`.
 */

/** Every map has this event: a listener of `event` threw `err`. */
export interface ListenerErrors {
  'listener:error': [err: unknown, event: string];
}

type Listener<A extends unknown[]> = (...args: A) => void;

export class EventMap<M extends { [K in keyof M]: unknown[] } & ListenerErrors> {
  readonly #listeners = new Map<PropertyKey, Listener<never>[]>();

  on<K extends keyof M>(event: K, listener: Listener<M[K]>): this {
    const list = this.#listeners.get(event);
    if (list === undefined) this.#listeners.set(event, [listener as Listener<never>]);
    else list.push(listener as Listener<never>);
    return this;
  }

  off<K extends keyof M>(event: K, listener: Listener<M[K]>): this {
    const list = this.#listeners.get(event);
    const i = list?.indexOf(listener as Listener<never>) ?? -1;
    if (i >= 0) list!.splice(i, 1);
    return this;
  }

  /** Whether anyone listens: an emitter skips building an event nobody reads. */
  has(event: keyof M): boolean {
    return (this.#listeners.get(event)?.length ?? 0) > 0;
  }

  /** Calls each listener in the order they subscribed, each on its own. */
  emit<K extends keyof M>(event: K, ...args: M[K]): void {
    const list = this.#listeners.get(event);
    if (list === undefined) return;
    for (const listener of list.length === 1 ? list : [...list]) {
      try {
        (listener as Listener<M[K]>)(...args);
      } catch (err) {
        if (event === 'listener:error') continue; // the reporter failed: nothing more to do
        this.emit('listener:error', ...([err, String(event)] as unknown as M['listener:error']));
      }
    }
  }
}
