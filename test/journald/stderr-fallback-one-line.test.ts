/**
 * With no journald socket the writer prints each entry as one `<N>` line on stderr (writer.ts).
 * Whatever an entry holds (NUL, CR, ESC, DEL, C1 controls, U+2028/U+2029, bidi overrides), that
 * line is exactly one line with no control character in it: it cannot end early, forge another
 * `<2>` entry after itself, overwrite itself (CR) or drive the terminal it is read on (ESC).
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { normalizeKey } from '../../src/journald/native-protocol.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { spawnSidecar } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { tempDir, tokenOf } from '../helpers/topology.js';

/** Everything the line must not hold raw: C0, DEL, C1, line separators, bidi controls. */
const FORBIDDEN = [
  ...Array.from({ length: 0x20 }, (_, i) => i),
  ...Array.from({ length: 0x21 }, (_, i) => 0x7f + i),
  0x061c,
  0x200e,
  0x200f,
  0x2028,
  0x2029,
  0x202a,
  0x202b,
  0x202c,
  0x202d,
  0x202e,
  0x2066,
  0x2067,
  0x2068,
  0x2069,
];

/**
 * An agent's attempt to forge entries and drive a terminal (docs/reference/journald.md, "The
 * writer", "No journald").
 */
const EVIL =
  'a\u0000<2>NUL-FORGED\rCR-FORGED\u001b[2J\u007fDEL\u009b31mC1\u0085NEL\u2028<2>LS-FORGED\u2029PS\u202eRTL';

const EVIL_KEY = `key\r\u001b[2J${EVIL}`;

/** The bytes' offsets that are a control byte (but the final \n) or encode a forbidden character. */
function forbiddenIn(bytes: Buffer): string[] {
  const found: string[] = [];
  const text = bytes.toString('utf8');
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (FORBIDDEN.includes(c) && !(c === 0x0a && i === text.length - 1))
      found.push(`U+${c.toString(16).padStart(4, '0')} at ${i}`);
  }
  return found;
}

describe('the stderr fallback prints every entry as exactly one line', () => {
  it("a sidecar with no journald socket: an agent's emergency full of control characters is one <2> line on its stderr, bytes checked", {
    timeout: 30_000,
  }, async () => {
    const { dir, cleanup } = tempDir('agw-stderr-');
    const sidecar = await spawnSidecar({
      AGW_ADAPTER_URL: 'http://127.0.0.1:9', // nothing listens: the emergency channel works without it
      AGW_AGENT_ID: 'qa',
      AGW_AGENT_TOKEN: tokenOf('qa'),
      AGW_OUTBOX: join(dir, 'outbox.db'),
      AGW_JOURNAL_SOCKET: join(dir, 'no-journal.socket'),
    });
    const chunks: Buffer[] = [];
    const marker = `marker-${randomUUID()}`;
    // resolves once stderr holds a full line with the marker: the test waits for it, not a time
    const printed = new Promise<void>((resolve) => {
      sidecar.child.stderr!.on('data', (d: Buffer) => {
        chunks.push(d);
        const all = Buffer.concat(chunks).toString('utf8');
        const at = all.indexOf(marker);
        if (at >= 0 && all.indexOf('\n', at) >= 0) resolve();
      });
    });
    try {
      const res = await call(sidecar.url, 'POST', '/v1/emergency', {
        body: {
          reason: 'manual',
          message: `${marker} ${EVIL}`,
          fields: { note: EVIL, [EVIL_KEY]: 'v' },
        },
      });
      expect(res.status).toBe(202);
      await printed;
    } finally {
      process.kill(sidecar.pid, 'SIGTERM');
      await sidecar.exited;
      cleanup();
    }
    const stderr = Buffer.concat(chunks);
    const lines: Buffer[] = [];
    for (let start = 0; start < stderr.length; ) {
      const end = stderr.indexOf(0x0a, start);
      lines.push(stderr.subarray(start, end < 0 ? stderr.length : end + 1));
      start = end < 0 ? stderr.length : end + 1;
    }
    const entry = lines.filter((l) => l.includes(marker));
    expect(entry).toHaveLength(1);
    const line = entry[0]!;
    expect(line.subarray(0, 3).toString()).toBe('<2>');
    expect(forbiddenIn(line)).toEqual([]);
    // nothing it carried starts a line of its own
    expect(lines.filter((l) => l.includes('FORGED'))).toEqual([line]);
    // what was there is still readable, escaped
    const text = line.toString('utf8');
    for (const escaped of ['a\\x00<2>NUL-FORGED\\x0dCR-FORGED\\x1b[2J\\x7fDEL\\x9b31mC1\\x85NEL'])
      expect(text).toContain(escaped);
    expect(text).toContain('\\u2028<2>LS-FORGED\\u2029PS\\u202eRTL');
    expect(text).toMatch(/ NOTE="a\\u0000<2>NUL-FORGED\\rCR-FORGED\\u001b\[2J\\x7fDEL/);
    expect(text).toContain(` ${normalizeKey(EVIL_KEY)}="v"`);
  });

  it('the writer with no socket: every forbidden character, in MESSAGE, in a value and in a key, comes out escaped on one line', () => {
    const lines: string[] = [];
    const { dir, cleanup } = tempDir('agw-stderr-');
    const writer = new JournalWriter({
      socketPath: join(dir, 'no-journal.socket'),
      stderr: { write: (l: string) => lines.push(l) },
    });
    try {
      for (const c of FORBIDDEN) {
        const ch = String.fromCharCode(c);
        writer.write({
          PRIORITY: 2,
          MESSAGE: `m${ch}m`,
          SYSLOG_IDENTIFIER: 'agent-gateway',
          VALUE: `v${ch}v`,
          BYTES: Buffer.from(`b${ch}b`, 'utf8'),
          [`k${ch}k`]: 'key',
        });
      }
    } finally {
      writer.close();
      cleanup();
    }
    expect(writer.stats.toStderr).toBe(FORBIDDEN.length);
    const entries = lines.slice(1); // the first is the warning that journald is missing
    expect(lines[0]).toMatch(/^<4>agent-gateway: no journald socket at /);
    expect(entries).toHaveLength(FORBIDDEN.length);
    entries.forEach((line, i) => {
      const bytes = Buffer.from(line, 'utf8');
      expect(forbiddenIn(bytes), `U+${FORBIDDEN[i]!.toString(16)}`).toEqual([]);
      expect(bytes.indexOf(0x0a)).toBe(bytes.length - 1);
      expect(line.startsWith('<2>m')).toBe(true);
    });
  });
});
