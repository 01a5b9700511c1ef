/**
 * The logger both programs use: pino, JSON lines on stdout by default; with AGW_LOG=journald,
 * each line goes to journald through the journald writer instead (same fields, PRIORITY from
 * the level).
 */
import { type Logger, pino } from 'pino';
import { journaldDestination } from './journald/pino-destination.js';
import type { JournalWriter } from './journald/writer.js';

export function createLogger(name: string, level: string, journal?: JournalWriter): Logger {
  const opts = { name, level, base: { pid: process.pid } };
  return journal === undefined ? pino(opts) : pino(opts, journaldDestination(journal, name));
}
