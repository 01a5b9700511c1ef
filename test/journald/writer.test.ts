import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { JournalWriter } from '../../src/journald/writer.js';
import { bytesOf, startJournal, type TestJournal } from '../helpers/journald.js';

let journal: TestJournal;
beforeAll(async () => {
  journal = await startJournal();
});
afterAll(async () => {
  await journal?.destroy();
});

function capture() {
  const lines: string[] = [];
  return { lines, stream: { write: (l: string) => lines.push(l) } };
}

describe('JournalWriter', () => {
  it('round-trips multi-line UTF-8, a 200 KB field, binary bytes and odd keys exactly', async () => {
    const writer = new JournalWriter({ socketPath: journal.socket });
    const tag = `rt-${Date.now()}`;
    const message = 'first line — ünïcödé ✓ 日本語 🚀\nsecond line\n\nfourth after an empty one';
    const big = 'é'.repeat(100 * 1024); // 200 KiB of UTF-8
    const binary = Buffer.from([0, 1, 2, 0xff, 0xfe, 10, 13, 0x80]);
    writer.write({
      MESSAGE: message,
      SYSLOG_IDENTIFIER: tag,
      BIG_FIELD: big,
      'weird-key.name': 'a=b=c',
      _private: 'no leading underscore',
      '9lives': 'no leading digit',
      lowercase: 'upper-cased',
      BLOB: binary,
      ['K'.repeat(80)]: 'cut to 64',
    });
    await writer.flush();
    writer.close();
    expect(writer.stats).toMatchObject({ sent: 1, dropped: 0, toStderr: 0 });
    await journal.settled();
    const [e] = journal.read(`SYSLOG_IDENTIFIER=${tag}`);
    expect(e).toBeDefined();
    expect(bytesOf(e!.MESSAGE).toString('utf8')).toBe(message);
    expect(bytesOf(e!.BIG_FIELD).toString('utf8')).toBe(big);
    expect(e!.WEIRD_KEY_NAME).toBe('a=b=c');
    expect(e!.PRIVATE).toBe('no leading underscore');
    expect(e!.X9LIVES).toBe('no leading digit');
    expect(e!.LOWERCASE).toBe('upper-cased');
    expect(bytesOf(e!.BLOB).equals(binary)).toBe(true);
    expect(e!['K'.repeat(64)]).toBe('cut to 64');
  });

  it('cuts an entry too large for one datagram at its largest field, with a marker', async () => {
    const writer = new JournalWriter({ socketPath: journal.socket });
    const tag = `cut-${Date.now()}`;
    const huge = 'z'.repeat(writer.maxEntryBytes + 50_000);
    writer.write({ MESSAGE: 'huge', SYSLOG_IDENTIFIER: tag, HUGE: huge, SMALL: 'kept' });
    await writer.flush();
    writer.close();
    expect(writer.stats.sent).toBe(1);
    await journal.settled();
    const [e] = journal.read(`SYSLOG_IDENTIFIER=${tag}`);
    const value = bytesOf(e!.HUGE).toString('utf8');
    expect(value.length).toBeLessThan(huge.length);
    expect(value).toMatch(/^z+\n\[\.\.\. truncated by agent-gateway/);
    expect(e!.AGW_TRUNCATED).toBe(`HUGE:${huge.length}`);
    expect(e!.SMALL).toBe('kept');
  });

  it('a burst of 20,000 entries: all stored, or the drop count says exactly how many are not', {
    timeout: 60_000, // about 3 s alone; vitest's default 5 s is not a bound on a loaded machine
  }, async () => {
    const writer = new JournalWriter({ socketPath: journal.socket });
    const tag = `burst-${Date.now()}`;
    for (let i = 0; i < 20_000; i++)
      writer.write({ MESSAGE: `line ${i}`, SYSLOG_IDENTIFIER: tag, N: i });
    await writer.flush();
    writer.close();
    await journal.settled();
    const stored = journal.read(`SYSLOG_IDENTIFIER=${tag}`);
    expect(writer.stats.toStderr).toBe(0);
    expect(stored.length + writer.stats.dropped).toBe(20_000);
    expect(writer.stats.sent).toBe(stored.length);
    // no entry twice
    expect(new Set(stored.map((e) => e.N)).size).toBe(stored.length);
  });

  it('past its bound it drops, counts exactly, and reports the count', async () => {
    // journald paused: its socket takes a few datagrams, then nothing; with 1 MiB allowed in
    // the queue, 2,000 entries of 16 KiB cannot all wait, and the rest are dropped and counted
    const writer = new JournalWriter({ socketPath: journal.socket, maxQueuedBytes: 1024 * 1024 });
    const tag = `bound-${Date.now()}`;
    const pad = 'p'.repeat(16 * 1024);
    journal.pause();
    try {
      for (let i = 0; i < 2000; i++)
        writer.write({ MESSAGE: `line ${i}`, SYSLOG_IDENTIFIER: tag, N: i, PAD: pad });
      expect(writer.stats.queuedBytes).toBeLessThanOrEqual(1024 * 1024);
    } finally {
      journal.resume();
    }
    await writer.flush();
    writer.close();
    await journal.settled();
    const stored = journal.read(`SYSLOG_IDENTIFIER=${tag}`);
    expect(writer.stats.dropped).toBeGreaterThan(0);
    expect(stored.length + writer.stats.dropped).toBe(2000);
    const reports = journal.read(
      'SYSLOG_IDENTIFIER=agent-gateway',
      `AGW_DROPPED_TOTAL=${writer.stats.dropped}`,
    );
    expect(reports.map((e) => Number(e.AGW_DROPPED))).toEqual([writer.stats.dropped]);
  });

  it('when journald goes away entries go to stderr as <2>, and it picks journald up again', async () => {
    const err = capture();
    const writer = new JournalWriter({
      socketPath: journal.socket,
      recheckMs: 50,
      stderr: err.stream,
    });
    const tag = `restart-${Date.now()}`;
    writer.write({ MESSAGE: 'before', SYSLOG_IDENTIFIER: tag, PRIORITY: 2 });
    await writer.flush();
    await journal.settled(); // stored before journald stops
    await journal.stop();
    // the writer's clock (Date) is faked from here: it looks for the socket again once
    // recheckMs has passed on it, and the test moves it by exactly that much
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      writer.write({ MESSAGE: 'while away', SYSLOG_IDENTIFIER: tag, PRIORITY: 2 });
      await writer.flush();
      expect(writer.available).toBe(false);
      expect(err.lines.some((l) => l.startsWith('<2>while away'))).toBe(true);
      await journal.start();
      vi.advanceTimersByTime(50); // recheckMs
      writer.write({ MESSAGE: 'after', SYSLOG_IDENTIFIER: tag, PRIORITY: 2 });
      await writer.flush();
    } finally {
      vi.useRealTimers();
    }
    writer.close();
    expect(writer.available).toBe(true);
    await journal.settled();
    const messages = journal.read(`SYSLOG_IDENTIFIER=${tag}`).map((e) => e.MESSAGE);
    expect(messages).toEqual(['before', 'after']);
    expect(writer.stats).toMatchObject({ sent: 2, toStderr: 1, dropped: 0 });
  });
});
