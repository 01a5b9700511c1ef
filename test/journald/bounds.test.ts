/**
 * Bounded emergencies (docs/reference/journald.md, "Emergencies") against a real journald: the
 * explicit budget (one token bucket per process, whatever the reason), the caps on an entry,
 * automatic alarms that the budget cannot silence, and watch --forward's bounded queue with a
 * target that never answers.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CLIP_MARKER,
  EMERGENCY_DEFAULTS,
  EMERGENCY_MESSAGE_ID,
  Emergencies,
  type RaiseResult,
} from '../../src/journald/emergency.js';
import { watch } from '../../src/journald/watch.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { CLI } from '../helpers/cli.js';
import { bytesOf, startJournal, type TestJournal } from '../helpers/journald.js';

let journal: TestJournal;
beforeAll(async () => {
  journal = await startJournal();
});
afterAll(async () => {
  await journal?.destroy();
});

/** An entry's size as the caps count it: its own fields (not journald's _ ones), name + value + 10. */
function entrySize(entry: Record<string, unknown>): number {
  let n = 0;
  for (const [k, v] of Object.entries(entry))
    if (!k.startsWith('_')) n += k.length + 10 + bytesOf(v).length;
  return n;
}

describe('the explicit emergency budget and the caps on an entry', () => {
  it('5,000 explicit emergencies with different reasons and big fields: the burst is written, capped; the rest refused with a retry time; the bucket refills', {
    timeout: 60_000,
  }, async () => {
    let now = 1_000_000_000;
    const writer = new JournalWriter({ socketPath: journal.socket });
    const agent = `budget-${randomUUID()}`;
    const e = new Emergencies(writer, { agentId: agent, pod: 'pod-1', now: () => now });
    const big = 'x'.repeat(10 * 1024);
    // even: 50 fields of 10 KB; odd: 40 small ones. Both try to spoof the gateway's own fields.
    const bigFields: Record<string, string> = {};
    for (let i = 0; i < 50; i++) bigFields[`field-${i}.big`] = big;
    const smallFields: Record<string, string> = {};
    for (let i = 0; i < 40; i++) smallFields[`small.${String(i).padStart(2, '0')}`] = `v${i}`;
    const spoof = { agw_agent_id: 'spoofed', priority: '7', Message: 'spoofed', agw_refused: 0 };
    const message = `${'ü'.repeat(10_000)}end`; // 20,003 bytes of UTF-8
    const results: RaiseResult[] = [];
    for (let i = 0; i < 5000; i++) {
      const fields = { ...(i % 2 === 0 ? bigFields : smallFields), ...spoof };
      results.push(e.tryRaise({ reason: `reason_${i}`, message, fields }, { explicit: true }));
    }
    expect(results.slice(0, 20).every((r) => r.written && r.clipped)).toBe(true);
    const refused = results.slice(20);
    expect(refused).toHaveLength(4980);
    // nothing refilled (the clock stood still): a token is 6 s away at 10 a minute
    expect(
      refused.every((r) => !r.written && r.why === 'rate_limited' && r.retryAfterS === 6),
    ).toBe(true);
    expect(e.stats).toMatchObject({ written: 20, refused: 4980, suppressed: 0, clipped: 20 });
    expect(e.explicitAvailable).toBe(0);

    // half a token later: 3 s more to wait
    now += 3000;
    expect(e.tryRaise({ reason: 'manual', message: 'too soon' }, { explicit: true })).toEqual({
      written: false,
      why: 'rate_limited',
      retryAfterS: 3,
    });
    // a minute after the burst: 10 tokens, whatever the reasons
    now += 57_000;
    expect(e.explicitAvailable).toBe(10);
    const refill: RaiseResult[] = [];
    for (let i = 0; i < 100; i++)
      refill.push(
        e.tryRaise({ reason: `refill_${i}`, message: `refill ${i}` }, { explicit: true }),
      );
    expect(refill.filter((r) => r.written)).toHaveLength(10);
    expect(refill.slice(0, 10).every((r) => r.written)).toBe(true);
    expect(refill[10]).toEqual({ written: false, why: 'rate_limited', retryAfterS: 6 });
    // an hour later the bucket holds its burst, no more
    now += 3_600_000;
    expect(e.explicitAvailable).toBe(EMERGENCY_DEFAULTS.explicitBurst);
    let later = 0;
    for (let i = 0; i < 100; i++)
      if (e.raise({ reason: 'manual', message: `later ${i}` }, { explicit: true })) later++;
    expect(later).toBe(20);
    expect(e.stats.refused).toBe(4980 + 1 + 90 + 80);

    await writer.flush();
    writer.close();
    await journal.settled();
    const entries = journal.read(`AGW_AGENT_ID=${agent}`);
    expect(entries).toHaveLength(20 + 10 + 20);
    expect(journal.read('AGW_AGENT_ID=spoofed')).toHaveLength(0);
    for (const x of entries) {
      expect(x).toMatchObject({
        PRIORITY: '2',
        MESSAGE_ID: EMERGENCY_MESSAGE_ID,
        AGW_POD: 'pod-1',
      });
      expect(entrySize(x)).toBeLessThanOrEqual(EMERGENCY_DEFAULTS.maxEntryBytes);
    }
    const burst = entries.slice(0, 20);
    expect(burst.map((x) => x.AGW_REASON)).toEqual(
      Array.from({ length: 20 }, (_, i) => `reason_${i}`),
    );
    for (const [i, x] of burst.entries()) {
      const msg = bytesOf(x.MESSAGE);
      expect(msg.length).toBeLessThanOrEqual(EMERGENCY_DEFAULTS.maxMessageBytes);
      const text = msg.toString('utf8');
      expect(text.endsWith(CLIP_MARKER)).toBe(true);
      expect(text).not.toContain('\uFFFD'); // cut at a character boundary
      const extra = Object.keys(x).filter((k) => k.startsWith('FIELD_') || k.startsWith('SMALL_'));
      expect(extra.length).toBeLessThanOrEqual(EMERGENCY_DEFAULTS.maxFields);
      // the spoofed names were dropped (AGW_REFUSED is the gateway's, absent before any refusal)
      expect(x.AGW_REFUSED).toBeUndefined();
      const offered = (i % 2 === 0 ? 50 : 40) + Object.keys(spoof).length;
      expect(Number(x.AGW_FIELDS_DROPPED)).toBe(offered - extra.length);
      if (i % 2 === 0) {
        // 4 KiB of MESSAGE leave room for one big field, cut with the marker
        expect(extra).toEqual(['FIELD_0_BIG']);
        expect(bytesOf(x.FIELD_0_BIG).toString('utf8')).toMatch(/^x+ \[\.\.\. truncated/);
        expect(x.AGW_TRUNCATED).toBe(`MESSAGE:20003,FIELD_0_BIG:${10 * 1024}`);
      } else {
        // the first 16 small fields, in order, whole
        expect(extra.sort()).toEqual(
          Array.from({ length: 16 }, (_, n) => `SMALL_${String(n).padStart(2, '0')}`),
        );
        expect(x.SMALL_15).toBe('v15');
        expect(x.AGW_TRUNCATED).toBe('MESSAGE:20003');
      }
    }
    expect(e.stats.fieldsDropped).toBe(burst.reduce((n, x) => n + Number(x.AGW_FIELDS_DROPPED), 0));
    // the first entry written after the refusals says how many there were
    expect(entries[20]).toMatchObject({ MESSAGE: 'refill 0', AGW_REFUSED: String(4980 + 1) });
    expect(entries[21]!.AGW_REFUSED).toBeUndefined();
    expect(entries[30]).toMatchObject({ MESSAGE: 'later 0', AGW_REFUSED: '90' });
  });

  it('an automatic emergency goes through when the explicit budget is spent; explicit ones with its reason do not touch its window', async () => {
    let now = 2_000_000_000;
    const writer = new JournalWriter({ socketPath: journal.socket });
    const agent = `auto-${randomUUID()}`;
    const e = new Emergencies(writer, { agentId: agent, now: () => now });
    // an agent spends the whole budget claiming the sidecar's own reasons
    let explicitWritten = 0;
    for (let i = 0; i < 100; i++) {
      const reason = i % 2 === 0 ? 'circuit_open' : 'outbox_full';
      if (e.raise({ reason, message: `agent says ${reason}` }, { explicit: true }))
        explicitWritten++;
    }
    expect(explicitWritten).toBe(20);
    expect(e.tryRaise({ reason: 'manual', message: 'one more' })).toMatchObject({
      written: false,
      why: 'rate_limited',
    });
    // the sidecar's own alarms: not charged, not refused
    expect(e.tryRaise({ reason: 'circuit_open', message: 'auto circuit' })).toEqual({
      written: true,
      clipped: false,
    });
    expect(
      e.tryRaise({ reason: 'outbox_full', message: 'auto outbox', fields: { AGW_DEPTH: 7 } }),
    ).toEqual({ written: true, clipped: false });
    // their own window still holds per reason, and says when it ends
    now += 10_000;
    expect(e.tryRaise({ reason: 'circuit_open', message: 'auto circuit again' })).toEqual({
      written: false,
      why: 'suppressed',
      retryAfterS: 20,
    });
    expect(e.stats).toMatchObject({ written: 22, refused: 81, suppressed: 1 });
    expect(e.explicitAvailable).toBe(1); // 10 s refilled 1.67 tokens; the automatic ones took none
    await writer.flush();
    writer.close();
    await journal.settled();
    const auto = journal.read(`AGW_AGENT_ID=${agent}`, 'MESSAGE=auto circuit');
    expect(auto).toHaveLength(1);
    expect(auto[0]).toMatchObject({ PRIORITY: '2', AGW_REASON: 'circuit_open' });
    const outbox = journal.read(`AGW_AGENT_ID=${agent}`, 'MESSAGE=auto outbox');
    expect(outbox).toHaveLength(1);
    expect(outbox[0]).toMatchObject({ AGW_DEPTH: '7' });
    expect(outbox[0]!.AGW_TRUNCATED).toBeUndefined();
    expect(journal.read(`AGW_AGENT_ID=${agent}`)).toHaveLength(22);
  });
});

/**
 * A server that takes requests and does not answer them, until `release()`: then it answers
 * those it holds and every later one 200. It keeps the bodies it was sent, in order.
 */
async function hangingServer() {
  const bodies: Record<string, unknown>[] = [];
  const held: ServerResponse[] = [];
  let answering = false;
  const waiters: { test: () => boolean; resolve: () => void }[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let text = '';
    req.on('data', (d: Buffer) => {
      text += d;
    });
    req.on('end', () => {
      bodies.push(JSON.parse(text) as Record<string, unknown>);
      if (answering) res.writeHead(200).end();
      else held.push(res);
      for (const w of waiters.splice(0))
        if (w.test()) w.resolve();
        else waiters.push(w);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  /** Resolves once `test` holds of the bodies received. */
  const until = (test: () => boolean) =>
    test() ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ test, resolve }));
  return {
    url: `http://127.0.0.1:${port}/alerts`,
    bodies,
    firstRequest: () => until(() => bodies.length > 0),
    until,
    release: () => {
      answering = true;
      for (const res of held.splice(0)) res.writeHead(200).end();
    },
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

/** Writes `n` gateway CRIT entries straight to journald (no budget) and waits until stored. */
async function writeCrit(j: TestJournal, n: number, tag: string) {
  const writer = new JournalWriter({ socketPath: j.socket });
  for (let i = 0; i < n; i++)
    writer.write({
      PRIORITY: 2,
      MESSAGE: `${tag} ${i}`,
      SYSLOG_IDENTIFIER: 'agent-gateway',
      MESSAGE_ID: EMERGENCY_MESSAGE_ID,
      AGW_AGENT_ID: 'flood',
      AGW_REASON: 'manual',
    });
  await writer.flush();
  writer.close();
  expect(writer.stats).toMatchObject({ sent: n, dropped: 0 });
  await j.settled();
}

const BURST_LINE =
  /forward queue full \((\d+) waiting\): dropped the (\d+) oldest waiting entries \((\d+) in all\)/;
const EXIT_LINE =
  /forward to \S+ at exit: (\d+) forwarded, (\d+) dropped from the full queue \(bound (\d+)\), (\d+) failed, (\d+) still waiting and not forwarded/;

describe('watch --forward to a target that does not answer', () => {
  it('keeps at most forwardQueue entries waiting and drops the oldest, a report line per burst; when the target is back it gets the newest', {
    timeout: 60_000,
  }, async () => {
    const own = await startJournal(); // only this test's entries
    const server = await hangingServer();
    const N = 400;
    const QUEUE = 50;
    const DROPPED = N - QUEUE - 1; // one in flight (the first), QUEUE waiting
    try {
      await writeCrit(own, N, 'fwd');
      const errors: string[] = [];
      const seen: string[] = [];
      let maxQueued = 0;
      let allSeen = () => {};
      const seenAll = new Promise<void>((r) => {
        allSeen = r;
      });
      let burstReported = () => {};
      const burst = new Promise<void>((r) => {
        burstReported = r;
      });
      const started = Date.now();
      const w = watch({
        namespace: own.namespace,
        since: '2000-01-01 00:00:00 UTC',
        forward: server.url,
        forwardQueue: QUEUE,
        onEntry: (entry) => {
          maxQueued = Math.max(maxQueued, w.forwarding!.queued);
          seen.push(String(entry.message));
          if (seen.length === N) allSeen();
        },
        onError: (m) => {
          errors.push(m);
          if (BURST_LINE.test(m)) burstReported();
        },
      });
      await seenAll; // every entry was handed on (printed, in the CLI)
      await burst; // and the drops were reported while it runs, not only at exit
      await server.firstRequest(); // the oldest entry is in flight, hanging
      const elapsed = Date.now() - started;
      expect(seen).toEqual(Array.from({ length: N }, (_, i) => `fwd ${i}`));
      expect(w.forwarding).toEqual({
        forwarded: 0,
        failed: 0,
        dropped: DROPPED,
        abandoned: 0,
        queued: QUEUE,
      });
      expect(maxQueued).toBe(QUEUE); // what waits never went past the bound
      const bursts = errors.filter((m) => BURST_LINE.test(m));
      const counts = bursts.map((m) => BURST_LINE.exec(m)!.slice(1).map(Number));
      expect(counts.every(([bound]) => bound === QUEUE)).toBe(true);
      // every drop so far is in exactly one line, and the lines carry the running total
      expect(counts.reduce((n, c) => n + c[1]!, 0)).toBe(DROPPED);
      expect(counts.at(-1)![2]).toBe(DROPPED);
      // one line per burst: at most one a second (dropReportMs), not one per drop
      expect(bursts.length).toBeLessThanOrEqual(Math.floor(elapsed / 1000) + 1);

      // the target is back: the one in flight, then the newest QUEUE, in order
      server.release();
      await server.until(() => server.bodies.some((b) => b.message === `fwd ${N - 1}`));
      w.stop();
      expect(await w.done).toBe(0);
      const got = [...new Set(server.bodies.map((b) => String(b.message)))];
      expect(got).toEqual([
        'fwd 0',
        ...Array.from({ length: QUEUE }, (_, i) => `fwd ${N - QUEUE + i}`),
      ]);
      expect(w.forwarding).toEqual({
        forwarded: QUEUE + 1,
        failed: 0,
        dropped: DROPPED,
        abandoned: 0,
        queued: 0,
      });
      const exit = errors.filter((m) => EXIT_LINE.test(m));
      expect(exit).toHaveLength(1);
      expect(EXIT_LINE.exec(exit[0]!)!.slice(1).map(Number)).toEqual([
        QUEUE + 1,
        DROPPED,
        QUEUE,
        0,
        0,
      ]);
      expect(errors.at(-1)).toBe(exit[0]);
    } finally {
      server.close();
      await own.destroy();
    }
  });

  it('the CLI: 1,000 waiting at most by default, drops on stderr per burst and at exit', {
    timeout: 60_000,
  }, async () => {
    const own = await startJournal();
    const server = await hangingServer();
    const N = 1500;
    const QUEUE = 1000;
    try {
      await writeCrit(own, N, 'cli');
      const watcher = spawn(
        process.execPath,
        [
          CLI,
          'watch',
          '--namespace',
          own.namespace,
          '--since',
          '2000-01-01 00:00:00 UTC',
          '--forward',
          server.url,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      const exited = new Promise<number | null>((r) => watcher.once('exit', (code) => r(code)));
      const stderr: string[] = [];
      let lines = 0;
      const printed = new Promise<void>((resolve) => {
        createInterface({ input: watcher.stdout! }).on('line', () => {
          if (++lines === N) resolve();
        });
      });
      const burst = new Promise<void>((resolve) => {
        createInterface({ input: watcher.stderr! }).on('line', (l) => {
          stderr.push(l);
          if (BURST_LINE.test(l)) resolve();
        });
      });
      try {
        await printed;
        await burst;
        await server.firstRequest();
      } finally {
        watcher.kill('SIGTERM');
      }
      // it gives forwarding its drain time (10 s), then gives up what waits, and says so
      expect(await exited).toBe(0);
      expect(lines).toBe(N);
      const counts = stderr
        .filter((l) => BURST_LINE.test(l))
        .map((l) => BURST_LINE.exec(l)!.slice(1).map(Number));
      expect(counts.every(([bound]) => bound === QUEUE)).toBe(true);
      expect(counts.reduce((n, c) => n + c[1]!, 0)).toBe(N - QUEUE - 1);
      const exit = stderr.filter((l) => EXIT_LINE.test(l));
      expect(exit).toHaveLength(1);
      expect(exit[0]).toMatch(/^agent-gateway watch: /);
      expect(EXIT_LINE.exec(exit[0]!)!.slice(1).map(Number)).toEqual([
        0,
        N - QUEUE - 1,
        QUEUE,
        0,
        QUEUE + 1,
      ]);
      // the oldest, in flight throughout (sent again after each 5 s timeout), and nothing else
      expect([...new Set(server.bodies.map((b) => b.message))]).toEqual(['cli 0']);
    } finally {
      server.close();
      await own.destroy();
    }
  });
});
