/**
 * Files a program re-reads when they change: certificates and keys (cert-manager renews them),
 * a JWKS, a projected token (the kubelet rotates it hourly), the topology. Polled with stat
 * (fs.watchFile), not inotify: Kubernetes swaps a mounted Secret by renaming a `..data` symlink,
 * which an inotify watch on the old file never sees; stat follows the link and sees the new
 * file's inode and time. Changes of several files close together (a certificate and its key) are
 * told once, after they settle.
 */
import { type Stats, unwatchFile, watchFile } from 'node:fs';

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
  const listener = (curr: Stats, prev: Stats): void => {
    if (
      curr.ino === prev.ino &&
      curr.size === prev.size &&
      curr.mtimeMs === prev.mtimeMs &&
      curr.ctimeMs === prev.ctimeMs
    )
      return;
    clearTimeout(timer);
    timer = setTimeout(onChange, settle);
    timer.unref();
  };
  const unique = [...new Set(paths)];
  for (const path of unique) watchFile(path, { interval, persistent: false }, listener);
  return {
    close() {
      clearTimeout(timer);
      for (const path of unique) unwatchFile(path, listener);
    },
  };
}
