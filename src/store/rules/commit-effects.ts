/**
 * What the parts of the SQLite store note during one group's transaction, handed back with the
 * commit as one CommitEffects value (store.ts) and cleared for the next group.
 */
import type { CommitEffects, DeadLettered, SentAlert } from '../store.js';

export class CommitEffectsLog {
  alerts: SentAlert[] = [];
  woken = new Set<string>();
  timingChanged = false;
  deadLettered: DeadLettered[] = [];

  /** The effects of the group just committed; the log starts empty for the next one. */
  take(): CommitEffects {
    const fx = {
      alerts: this.alerts,
      woken: this.woken,
      timingChanged: this.timingChanged,
      deadLettered: this.deadLettered,
    };
    this.clear();
    return fx;
  }

  clear(): void {
    this.alerts = [];
    this.woken = new Set();
    this.timingChanged = false;
    this.deadLettered = [];
  }
}
