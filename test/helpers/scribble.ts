/**
 * Breaks a stopped adapter's SQLite file for real, where only a full check looks: pages holding
 * message rows are overwritten, so their b-tree structure is gone while the schema and the
 * tables that start and the first sweep read (channels, deliveries, alerts, senders' totals) stay
 * whole. The pages are found with SQLite's dbstat table, not guessed from offsets: where a
 * table lands moves whenever a migration grows the schema.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import Database from 'better-sqlite3';

export function scribbleOverMessages(file: string, pages = 8): void {
  const db = new Database(file, { readonly: true });
  let found: { pageno: number; pgsize: number }[];
  try {
    found = db
      .prepare<[], { pageno: number; pgsize: number }>(
        "SELECT pageno, pgsize FROM dbstat WHERE name = 'messages' AND pagetype = 'leaf' ORDER BY pageno",
      )
      .all();
  } finally {
    db.close();
  }
  if (found.length < pages) throw new Error(`only ${found.length} leaf pages of messages`);
  const from = Math.floor((found.length - pages) / 2); // from the middle
  const fd = openSync(file, 'r+');
  try {
    for (const { pageno, pgsize } of found.slice(from, from + pages)) {
      writeSync(fd, Buffer.alloc(pgsize, 0x5a), 0, pgsize, (pageno - 1) * pgsize);
    }
  } finally {
    closeSync(fd);
  }
}
