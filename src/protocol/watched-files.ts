/**
 * Files a program re-reads when they change: certificates and keys (cert-manager renews them),
 * a JWKS, a projected token (the kubelet rotates it hourly), the topology. Polled with stat
 * on an interval, not inotify: Kubernetes swaps a mounted Secret by renaming a `..data` symlink,
 * which an inotify watch on the old file never sees; stat follows the link and sees the new
 * file's inode and time. Changes of several files close together (a certificate and its key) are
 * told once, after they settle.
 */
import { type Stats, stat, statSync } from 'node:fs';

export interface FileWatch {
  /** Stops watching. */
  close(): void;
}

export interface WatchOptions {
  /** How often each file is stat'ed, ms (default 1,000). */
  readonly intervalMs?: number;
  /** How long after the last change `onChange` waits, ms (default 100), so a pair lands whole. */
  readonly settleMs?: number;
}

/**
 * Calls `onChange` once after any of `paths` changes (its inode, size or time), a file that
 * appears or disappears included. The caller re-reads and decides; a half-written pair that
 * fails to load is refused by the caller and taken at the next change.
 */
export function watchFiles(
  paths: readonly string[],
  onChange: () => void,
  opts: WatchOptions = {},
): FileWatch {
  const interval = opts.intervalMs ?? 1_000;
  const settle = opts.settleMs ?? 100;
  let timer: NodeJS.Timeout | undefined;
  const changed = (): void => {
    clearTimeout(timer);
    timer = setTimeout(onChange, settle);
    timer.unref();
  };
  // The baseline is taken now, synchronously, and every poll compares with the last one seen
  // (fs.watchFile would take its own baseline a tick later and miss a change made in between).
  const watched = [...new Set(paths)].map((path) => ({ path, seen: statOf(path) }));
  let polling = false;
  const poll = (): void => {
    if (polling) return;
    polling = true;
    let left = watched.length;
    for (const w of watched)
      stat(w.path, (err, now) => {
        const current = err ? undefined : now;
        if (!same(current, w.seen)) {
          w.seen = current;
          changed();
        }
        if (--left === 0) polling = false;
      });
  };
  const ticker = setInterval(poll, interval);
  ticker.unref();
  return {
    close() {
      clearInterval(ticker);
      clearTimeout(timer);
    },
  };
}

function statOf(path: string): Stats | undefined {
  try {
    return statSync(path);
  } catch {
    return undefined;
  }
}

function same(a: Stats | undefined, b: Stats | undefined): boolean {
  if (!a || !b) return a === b;
  return a.ino === b.ino && a.size === b.size && a.mtimeMs === b.mtimeMs && a.ctimeMs === b.ctimeMs;
}
