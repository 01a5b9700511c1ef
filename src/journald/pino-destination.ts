/**
 * A pino destination that writes each log line to journald (AGW_LOG=journald). It runs on the
 * main thread (see writer.ts for why): pino calls write() with one JSON line per log call.
 *
 * PRIORITY from the pino level (fatal 2, error 3, warn 4, info 6, debug and trace 7); MESSAGE
 * from msg; nested objects as JSON values; err.stack as ERR_STACK; pino's time, pid and hostname
 * are dropped because journald records its own (_SOURCE_REALTIME_TIMESTAMP, _PID, _HOSTNAME).
 */
import type { Fields } from './native-protocol.js';
import type { JournalWriter } from './writer.js';

export function pinoLevelToPriority(level: number): number {
  if (level >= 60) return 2;
  if (level >= 50) return 3;
  if (level >= 40) return 4;
  if (level >= 30) return 6;
  return 7;
}

const DROPPED = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'err', 'v']);

export function journaldDestination(
  writer: JournalWriter,
  identifier: string,
): { write(line: string): void } {
  return {
    write(line: string) {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        writer.write({ PRIORITY: 6, MESSAGE: line.trimEnd(), SYSLOG_IDENTIFIER: identifier });
        return;
      }
      const fields: Fields = {
        PRIORITY: pinoLevelToPriority(Number(entry.level ?? 30)),
        MESSAGE: typeof entry.msg === 'string' ? entry.msg : '',
        SYSLOG_IDENTIFIER: typeof entry.name === 'string' ? entry.name : identifier,
      };
      const err = entry.err as { stack?: unknown; message?: unknown; type?: unknown } | undefined;
      if (err !== undefined && err !== null && typeof err === 'object') {
        if (typeof err.stack === 'string') fields.ERR_STACK = err.stack;
        if (typeof err.message === 'string') fields.ERR_MESSAGE = err.message;
        if (typeof err.type === 'string') fields.ERR_TYPE = err.type;
      }
      for (const [k, v] of Object.entries(entry)) {
        if (DROPPED.has(k) || k === 'name' || v === undefined || v === null) continue;
        fields[k] = typeof v === 'object' ? JSON.stringify(v) : (v as string | number | boolean);
      }
      writer.write(fields);
    },
  };
}
