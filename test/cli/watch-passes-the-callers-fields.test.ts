/**
 * `agent-gateway watch` passes through the fields an emergency's caller added (issue 37: it kept
 * only the AGW_* ones, so a TICKET was lost on the way to the orchestrator): from `agent-gateway
 * emergency --field NAME=VALUE` and from a sidecar's POST /v1/emergency `fields`, against a real
 * journald in namespace mode. What the gateway writes itself is not the caller's to set (an
 * AGW_* field given is still dropped), and journald's own fields (`_PID`, `__CURSOR`) stay out.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { CLI, runCli, spawnSidecar } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { tempDir, tokenOf } from '../helpers/topology.js';

let journal: TestJournal;
const { dir, cleanup } = tempDir('agw-watch-fields-');
beforeAll(async () => {
  journal = await startJournal();
});
afterAll(async () => {
  await journal?.destroy();
  cleanup();
});

/** `agent-gateway watch` on the test journal; `next(text)`: its first line whose message has it. */
function startWatch() {
  // from a second before now: entries written after it started, however soon that was
  const since = `${new Date(Date.now() - 1000).toISOString().replace('T', ' ').slice(0, 19)} UTC`;
  const child: ChildProcess = spawn(
    process.execPath,
    [CLI, 'watch', '--namespace', journal.namespace, '--since', since],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const lines: Record<string, unknown>[] = [];
  const waiting: { match: string; resolve: (e: Record<string, unknown>) => void }[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const entry = JSON.parse(line) as Record<string, unknown>;
    lines.push(entry);
    for (const w of waiting.splice(0))
      if (String(entry.message).includes(w.match)) w.resolve(entry);
      else waiting.push(w);
  });
  return {
    next: (match: string) =>
      new Promise<Record<string, unknown>>((resolve) => {
        const seen = lines.find((e) => String(e.message).includes(match));
        if (seen !== undefined) resolve(seen);
        else waiting.push({ match, resolve });
      }),
    stop: async () => {
      child.kill('SIGTERM');
      return exited;
    },
  };
}

it("watch prints the fields the emergency's caller added, from the command and a sidecar", {
  timeout: 60_000,
}, async () => {
  const watch = startWatch();
  const run = randomUUID();
  let sidecar: Awaited<ReturnType<typeof spawnSidecar>> | undefined;
  try {
    const cli = await runCli(
      [
        'emergency',
        '--reason',
        'gateway_down',
        '--field',
        'TICKET=T-12',
        '--field',
        'runbook=https://runbooks.example/gateway-down?step=1',
        '--field',
        'AGW_RECIPIENT=pm', // the gateway's name: dropped, and said so
        `${run} from the command`,
      ],
      { AGW_JOURNAL_SOCKET: journal.socket, AGW_AGENT_ID: 'qa' },
    );
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stderr).toContain('AGW_FIELDS_DROPPED counts what was dropped');

    sidecar = await spawnSidecar({
      AGW_ADAPTER_URL: 'http://127.0.0.1:9', // the emergency channel needs no adapter
      AGW_AGENT_ID: 'research',
      AGW_AGENT_TOKEN: tokenOf('research'),
      AGW_OUTBOX: join(dir, 'outbox.db'),
      AGW_JOURNAL_SOCKET: journal.socket,
    });
    const posted = await call(sidecar.url, 'POST', '/v1/emergency', {
      body: {
        reason: 'manual',
        message: `${run} from a sidecar`,
        fields: { ticket: 'T-13', attempts: 3 },
      },
    });
    expect(posted.status).toBe(202);

    const fromCli = await watch.next(`${run} from the command`);
    expect(fromCli).toMatchObject({
      priority: 2,
      AGW_AGENT_ID: 'qa',
      AGW_REASON: 'gateway_down',
      TICKET: 'T-12',
      RUNBOOK: 'https://runbooks.example/gateway-down?step=1',
      AGW_FIELDS_DROPPED: '1',
    });
    expect(fromCli.AGW_RECIPIENT).toBeUndefined();
    const fromSidecar = await watch.next(`${run} from a sidecar`);
    expect(fromSidecar).toMatchObject({
      AGW_AGENT_ID: 'research',
      AGW_REASON: 'manual',
      TICKET: 'T-13',
      ATTEMPTS: '3',
    });
    // the names watch gives journald's fields, not the fields themselves
    for (const e of [fromCli, fromSidecar]) {
      expect(Object.keys(e).filter((k) => k.startsWith('_'))).toEqual([]);
      expect(e).not.toHaveProperty('MESSAGE');
      expect(e).not.toHaveProperty('SYSLOG_IDENTIFIER');
    }
  } finally {
    if (sidecar !== undefined) {
      process.kill(sidecar.pid, 'SIGTERM');
      await sidecar.exited;
    }
    expect(await watch.stop()).toBe(0);
  }
});
