/**
 * The logger both programs use: pino, JSON lines on stdout. The journald destination
 * (AGW_LOG=journald) joins it with the journald writer.
 */
import { type Logger, pino } from 'pino';

export function createLogger(name: string, level: string): Logger {
  return pino({ name, level, base: { pid: process.pid } });
}
