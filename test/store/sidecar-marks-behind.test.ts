/**
 * The sidecar's handed marks and ack memory are written behind (sidecar-file.ts): in force in
 * memory at once, on disk WRITE_BEHIND_MS after the first of them, together in one commit; kept
 * when that commit fails and written with the next; flushed when the file closes. Read back
 * through a second connection to the real file, as a restarted sidecar would see it; the delay
 * runs on fake timers.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeEach, expect, it, vi } from 'vitest';
import { SidecarFile, WRITE_BEHIND_MS } from '../../src/store/sidecar/sidecar-file.js';
import { tempDir } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-marks-');
afterAll(cleanup);

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
});
afterEach(() => {
  vi.useRealTimers();
});
/** The write-behind delay passes. */
const later = () => vi.advanceTimersByTime(WRITE_BEHIND_MS);
let n = 0;
function files() {
  const path = join(dir, `s-${++n}.db`);
  const errors: unknown[] = [];
  const file = new SidecarFile(path, { onWriteError: (e) => errors.push(e) });
  const other = new Database(path);
  const onDisk = () => ({
    handed: other.prepare('SELECT channel, last_seq FROM handed ORDER BY channel').all(),
    acked: other
      .prepare('SELECT message_id FROM acked ORDER BY message_id')
      .pluck()
      .all() as string[],
  });
  return { path, file, other, onDisk, errors };
}

it('marks are in force at once and on disk after the delay, together', async () => {
  const { file, other, onDisk } = files();
  file.setHanded(new Map([['@qa', 3]]));
  file.markAcked(['m1'], 1000);
  vi.advanceTimersByTime(WRITE_BEHIND_MS - 1);
  // made later in the delay: they go with the first ones
  file.markAcked(['m2'], 1000);
  file.setHanded(new Map([['@qa', 2]])); // never back
  expect(file.handed('@qa')).toBe(3);
  expect(file.isAcked('m1')).toBe(true);
  expect(file.isAcked('m3')).toBe(false);
  expect(onDisk()).toEqual({ handed: [], acked: [] });
  vi.advanceTimersByTime(1);
  expect(onDisk()).toEqual({ handed: [{ channel: '@qa', last_seq: 3 }], acked: ['m1', 'm2'] });
  expect(file.isAcked('m2')).toBe(true); // now from the file
  other.close();
  file.close();
});

it('a failed commit keeps its marks for the next one and says so', async () => {
  const { file, other, onDisk, errors } = files();
  file.setHanded(new Map([['@qa', 1]]));
  later();
  // the table goes away under the sidecar's connection: its next commit fails
  other.exec('ALTER TABLE acked RENAME TO acked_away');
  file.markAcked(['m1'], 1000);
  file.setHanded(new Map([['@qa', 5]]));
  later();
  expect(errors).toHaveLength(1);
  expect(String(errors[0])).toMatch(/acked/);
  expect(file.isAcked('m1')).toBe(true);
  expect(file.handed('@qa')).toBe(5);
  expect(other.prepare('SELECT last_seq FROM handed').pluck().get()).toBe(1); // rolled back whole
  other.exec('ALTER TABLE acked_away RENAME TO acked');
  file.markAcked(['m2'], 2000);
  later();
  expect(errors).toHaveLength(1);
  expect(onDisk()).toEqual({ handed: [{ channel: '@qa', last_seq: 5 }], acked: ['m1', 'm2'] });
  other.close();
  file.close();
});

it('closing writes what waits, and a new file on it starts from there', () => {
  const { path, file, other } = files();
  other.close();
  file.setHanded(new Map([['@all-agents', 7]]));
  file.markAcked(['m9'], 1000);
  file.close();
  const again = new SidecarFile(path);
  expect(again.handed('@all-agents')).toBe(7);
  expect(again.isAcked('m9')).toBe(true);
  again.close();
});

it('acks older than the memory are forgotten with the next commit', async () => {
  const { file, other, onDisk } = files();
  file.markAcked(['old'], 1000);
  later();
  file.markAcked(['new'], 5000, 2000);
  expect(onDisk().acked).toEqual(['old']);
  later();
  expect(onDisk().acked).toEqual(['new']);
  other.close();
  file.close();
});
