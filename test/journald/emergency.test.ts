/**
 * The emergency channel end to end against a real journald: the emergency command, watch,
 * rate limits, the pino destination, the adapter's CRIT entries for dead letters, sd_notify.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { EMERGENCY_MESSAGE_ID, Emergencies } from '../../src/journald/emergency.js';
import { UnixDgram } from '../../src/journald/unix-dgram.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { createLogger } from '../../src/log.js';
import { CLI, runCli, spawnAdapter } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { tempDir, writeTopology } from '../helpers/topology.js';

let journal: TestJournal;
const { dir, cleanup } = tempDir('agw-jd-');
beforeAll(async () => {
  journal = await startJournal();
});
afterAll(async () => {
  await journal?.destroy();
  cleanup();
});

/**
 * A datagram socket bound at `path` (NUL first: abstract) that keeps what it receives, in
 * order. `settled()` resolves once it has read everything sent to it before the call: it sends
 * itself a marker and waits for it, and a socket's datagrams are read in the order they came.
 */
function datagrams(path: string) {
  const got: string[] = [];
  const markers = new Map<string, () => void>();
  const socket = new UnixDgram({
    onMessage: (buf) => {
      const text = buf.toString();
      const marker = markers.get(text);
      if (marker === undefined) got.push(text);
      else marker();
    },
  });
  socket.bind(path);
  return {
    got,
    settled: () =>
      new Promise<void>((resolve) => {
        const marker = `settled-${randomUUID()}`;
        markers.set(marker, resolve);
        const sender = new UnixDgram();
        expect(sender.send(Buffer.from(marker), path)).toBe('sent');
        sender.close();
      }),
    close: () => socket.close(),
  };
}

describe('agent-gateway emergency and watch', () => {
  it('watch prints an emergency as one JSON line with its fields once it is written', {
    timeout: 30_000,
  }, async () => {
    const since = `${new Date(Date.now() - 1000).toISOString().replace('T', ' ').slice(0, 19)} UTC`;
    const watcher = spawn(
      process.execPath,
      [CLI, 'watch', '--namespace', journal.namespace, '--since', since],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const exited = new Promise<number | null>((r) => watcher.once('exit', (code) => r(code)));
    try {
      // how soon it prints is a speed, for bench/, not asserted here: the test waits for the line
      const seen = new Promise<Record<string, unknown>>((resolve) => {
        createInterface({ input: watcher.stdout! }).on('line', (line) => resolve(JSON.parse(line)));
      });
      const res = await runCli(
        ['emergency', '--reason', 'manual', 'the adapter is gone; ünïcode\nand a second line'],
        {
          AGW_JOURNAL_SOCKET: journal.socket,
          AGW_AGENT_ID: 'qa',
          POD_NAME: 'qa-7f9c',
          POD_NAMESPACE: 'agents',
        },
      );
      expect(res.code).toBe(0);
      const entry = await seen;
      expect(entry).toMatchObject({
        message: 'the adapter is gone; ünïcode\nand a second line',
        priority: 2,
        message_id: EMERGENCY_MESSAGE_ID,
        identifier: 'agent-gateway',
        AGW_AGENT_ID: 'qa',
        AGW_REASON: 'manual',
        AGW_POD: 'qa-7f9c',
        AGW_NAMESPACE: 'agents',
      });
    } finally {
      watcher.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
  });

  it('emergency says clearly when it could not reach journald, and exits non-zero', {
    timeout: 30_000, // two CLI processes: vitest's default 5 s is not a bound on a loaded machine
  }, async () => {
    const res = await runCli(['emergency', '--reason', 'manual', 'help'], {
      AGW_JOURNAL_SOCKET: join(dir, 'no-such.socket'),
      AGW_AGENT_ID: 'qa',
    });
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('<2>help');
    expect(res.stderr).toContain('journald did not take the entry');
    const bad = await runCli(['emergency', 'no reason given'], { AGW_AGENT_ID: 'qa' });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--reason');
  });
});

describe('watch --forward', () => {
  it('POSTs each entry to the URL, retrying a 503', { timeout: 30_000 }, async () => {
    const { createServer } = await import('node:http');
    const bodies: { status: number; body: Record<string, unknown> }[] = [];
    const marker = `forward-${randomUUID()}`;
    let markerTaken = () => {};
    const taken = new Promise<void>((resolve) => {
      markerTaken = resolve;
    });
    const server = createServer((req, res) => {
      let text = '';
      req.on('data', (d: Buffer) => {
        text += d;
      });
      req.on('end', () => {
        const body = JSON.parse(text) as Record<string, unknown>;
        // the first attempt for our entry fails
        const status =
          body.message === marker && !bodies.some((b) => b.body.message === marker) ? 503 : 200;
        bodies.push({ status, body });
        res.writeHead(status).end();
        if (status === 200 && body.message === marker) markerTaken();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const since = `${new Date(Date.now() - 1000).toISOString().replace('T', ' ').slice(0, 19)} UTC`;
    const watcher = spawn(
      process.execPath,
      [
        CLI,
        'watch',
        '--namespace',
        journal.namespace,
        '--since',
        since,
        '--forward',
        `http://127.0.0.1:${port}/alerts`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const exited = new Promise<number | null>((r) => watcher.once('exit', (code) => r(code)));
    try {
      const res = await runCli(['emergency', '--reason', 'manual', marker], {
        AGW_JOURNAL_SOCKET: journal.socket,
        AGW_AGENT_ID: 'pm',
      });
      expect(res.code).toBe(0);
      await taken; // the server took our entry (200), after the 503
      const mine = bodies.filter((b) => b.body.message === marker);
      expect(mine.map((b) => b.status)).toEqual([503, 200]);
      expect(mine[1]!.body).toMatchObject({
        AGW_AGENT_ID: 'pm',
        AGW_REASON: 'manual',
        priority: 2,
      });
    } finally {
      watcher.kill('SIGTERM');
      server.close();
    }
    expect(await exited).toBe(0);
  });
});

describe('Emergencies', () => {
  it('rate-limits automatic reasons per reason and reports what it held back; explicit ones pass up to the budget', async () => {
    let now = 1_000_000;
    const writer = new JournalWriter({ socketPath: journal.socket });
    const agent = `rl-${randomUUID()}`;
    const e = new Emergencies(writer, { agentId: agent, now: () => now });
    const written = [
      e.raise({ reason: 'outbox_full', message: 'full 1' }),
      e.raise({ reason: 'outbox_full', message: 'full 2' }),
      e.raise({ reason: 'outbox_full', message: 'full 3' }),
      e.raise({ reason: 'circuit_open', message: 'open 1' }),
    ];
    now += 30_000;
    written.push(e.raise({ reason: 'outbox_full', message: 'full 4' }));
    // the explicit budget's burst (20), then refused (test/journald/bounds.test.ts has the rest)
    for (let i = 0; i < 21; i++)
      written.push(e.raise({ reason: 'manual', message: `manual ${i}` }, { explicit: true }));
    await writer.flush();
    writer.close();
    expect(written.slice(0, 5)).toEqual([true, false, false, true, true]);
    expect(written.slice(5, 25).every(Boolean)).toBe(true);
    expect(written[25]).toBe(false);
    await journal.settled();
    const entries = journal.read(`AGW_AGENT_ID=${agent}`);
    const full = entries.filter((x) => x.AGW_REASON === 'outbox_full');
    expect(full.map((x) => [x.MESSAGE, x.AGW_SUPPRESSED])).toEqual([
      ['full 1', undefined],
      ['full 4', '2'],
    ]);
    expect(entries.filter((x) => x.AGW_REASON === 'manual')).toHaveLength(20);
    expect(entries.every((x) => x.PRIORITY === '2' && x.MESSAGE_ID === EMERGENCY_MESSAGE_ID)).toBe(
      true,
    );
  });
});

describe('AGW_LOG=journald', () => {
  it('maps pino levels to PRIORITY, nested objects to JSON, err.stack to ERR_STACK', async () => {
    const writer = new JournalWriter({ socketPath: journal.socket });
    const name = `log-${randomUUID()}`;
    const logger = createLogger(name, 'trace', writer);
    logger.fatal('f');
    logger.error({ err: new Error('boom') }, 'e');
    logger.warn({ ctx: { a: 1, b: [2] } }, 'w');
    logger.info('i');
    logger.debug('d');
    logger.trace('t');
    await writer.flush();
    writer.close();
    await journal.settled();
    const entries = journal.read(`SYSLOG_IDENTIFIER=${name}`);
    expect(entries.map((x) => [x.MESSAGE, x.PRIORITY])).toEqual([
      ['f', '2'],
      ['e', '3'],
      ['w', '4'],
      ['i', '6'],
      ['d', '7'],
      ['t', '7'],
    ]);
    expect(String(entries[1]!.ERR_STACK)).toMatch(/^Error: boom\n\s+at /);
    expect(JSON.parse(String(entries[2]!.CTX))).toEqual({ a: 1, b: [2] });
  });
});

describe('the adapter on journald', () => {
  it('writes a CRIT entry for a dead letter, and sd_notify READY=1 then STOPPING=1', {
    timeout: 30_000,
  }, async () => {
    const notifyPath = join(dir, 'notify.sock');
    const notify = datagrams(notifyPath);
    const states = notify.got;
    const adapter = await spawnAdapter(
      [
        '--topology',
        writeTopology(dir),
        '--db',
        join(dir, 'a.db'),
        '--lease-ms',
        '100',
        '--max-retries',
        '0',
      ],
      { AGW_JOURNAL_SOCKET: journal.socket, NOTIFY_SOCKET: notifyPath },
    );
    try {
      const sent = await call(adapter.url, 'POST', '/v1/messages', {
        agent: 'pm',
        body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: {} },
      });
      await call(adapter.url, 'GET', '/v1/inbox', { agent: 'qa' }); // leased, never acked
      // the lease runs out: the dead letter's CRIT entry, followed as journald stores it
      await journal.next(`MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`, 'AGW_REASON=dead_letter');
      const crit = journal.read(`MESSAGE_ID=${EMERGENCY_MESSAGE_ID}`, 'AGW_REASON=dead_letter');
      expect(crit).toHaveLength(1);
      expect(crit[0]).toMatchObject({
        PRIORITY: '2',
        AGW_AGENT_ID: 'adapter',
        AGW_RECIPIENT: 'qa',
        AGW_DETAIL: 'lease_expired',
        AGW_MESSAGE_IDS: sent.body.message_id,
      });
      expect(states).toContain('READY=1');
    } finally {
      adapter.child.kill('SIGTERM');
      await adapter.exited;
      await notify.settled(); // everything the adapter sent before it exited has been read
      notify.close();
    }
    expect(states).toEqual(['READY=1', 'STOPPING=1']);
  });
});

describe('SdNotify', () => {
  it('speaks to an abstract NOTIFY_SOCKET (@name) and sends WATCHDOG=1 at half of WATCHDOG_USEC', async () => {
    const name = `agw-notify-${randomUUID()}`;
    const socket = datagrams(`\0${name}`);
    const got = socket.got;
    // the watchdog is an interval in this process: fake intervals step it exactly
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const { SdNotify } = await import('../../src/journald/sd-notify.js');
      const n = new SdNotify({ NOTIFY_SOCKET: `@${name}`, WATCHDOG_USEC: '100000' });
      await n.ready();
      vi.advanceTimersByTime(49);
      await socket.settled();
      expect(got).toEqual(['READY=1']); // not yet: every 50 ms
      vi.advanceTimersByTime(1);
      await socket.settled();
      expect(got).toEqual(['READY=1', 'WATCHDOG=1']);
      vi.advanceTimersByTime(100);
      await n.stopping();
      vi.advanceTimersByTime(100); // stopped: no more
      n.close();
      await socket.settled();
    } finally {
      vi.useRealTimers();
      socket.close();
    }
    expect(got[0]).toBe('READY=1');
    expect(got.filter((s) => s === 'WATCHDOG=1').length).toBeGreaterThanOrEqual(1);
    expect(got).toEqual(['READY=1', 'WATCHDOG=1', 'WATCHDOG=1', 'WATCHDOG=1', 'STOPPING=1']);
    expect(got.at(-1)).toBe('STOPPING=1');
  });
});
