/**
 * PRAGMA quick_check reads every page: seconds on a large file. It runs on its own read-only
 * connection in a worker thread so the adapter serves meanwhile (server.ts). The worker is plain
 * JavaScript evaluated from a string so it runs the same from src/ (tests) and dist/.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

const QUICK_CHECK_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.module);
let db;
try {
  db = new Database(workerData.file, { readonly: true, fileMustExist: true });
  parentPort.postMessage({ rows: db.pragma('quick_check', { simple: false }).map((r) => r.quick_check) });
} catch (err) {
  parentPort.postMessage({ rows: ['cannot run quick_check: ' + err.message] });
} finally {
  if (db) db.close();
}`;

/** Resolves with the problems quick_check found in `file` (none: []). */
export function quickCheck(file: string): Promise<string[]> {
  const module = createRequire(import.meta.url).resolve('better-sqlite3');
  return new Promise((resolve, reject) => {
    const worker = new Worker(QUICK_CHECK_WORKER, { eval: true, workerData: { file, module } });
    worker.once('message', (m: { rows: string[] }) => resolve(m.rows.filter((r) => r !== 'ok')));
    worker.once('error', reject);
  });
}
