/**
 * An agent's explicit emergency cannot pass for one of the gateway's own alarms
 * (docs/reference/journald.md, "Emergencies"): against a real journald in namespace mode, read back
 * with journalctl. An automatic reason asked for by an agent is written as `manual` with the reason
 * asked for in AGW_REQUESTED_REASON, and the agent's AGW_* fields (AGW_RECIPIENT, AGW_COUNT,
 * AGW_DETAIL, ...) are dropped and counted; the gateway's own entries keep theirs.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AUTOMATIC_REASONS, Emergencies } from '../../src/journald/emergency.js';
import { JournalWriter } from '../../src/journald/writer.js';
import { runCli, spawnSidecar } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { startJournal, type TestJournal } from '../helpers/journald.js';
import { tempDir, tokenOf } from '../helpers/topology.js';

let journal: TestJournal;
const { dir, cleanup } = tempDir('agw-mimic-');
beforeAll(async () => {
  journal = await startJournal();
});
afterAll(async () => {
  await journal?.destroy();
  cleanup();
});

/** The adapter's dead-letter alarm, as an agent would copy it (delivery.ts). */
const MIMIC = {
  AGW_RECIPIENT: 'pm',
  agw_count: 3,
  'agw.detail': 'lease_expired',
  AGW_MESSAGE_IDS: '0193a1b2-0000-7000-8000-000000000000',
  AGW_STALLED_S: 600,
  ticket: 'T-1',
};

describe("an agent's emergency cannot mimic the gateway's alarms", () => {
  it('POST /v1/emergency at a sidecar with each automatic reason: written as manual, AGW_REQUESTED_REASON kept, the AGW_* fields dropped', {
    timeout: 60_000,
  }, async () => {
    const sidecar = await spawnSidecar({
      AGW_ADAPTER_URL: 'http://127.0.0.1:9', // the emergency channel needs no adapter
      AGW_AGENT_ID: 'qa',
      AGW_AGENT_TOKEN: tokenOf('qa'),
      AGW_OUTBOX: join(dir, 'outbox.db'),
      AGW_JOURNAL_SOCKET: journal.socket,
    });
    const run = randomUUID();
    try {
      for (const reason of AUTOMATIC_REASONS) {
        const res = await call(sidecar.url, 'POST', '/v1/emergency', {
          body: { reason, message: `${run} ${reason}`, fields: MIMIC },
        });
        expect(res.status).toBe(202);
        expect(res.body).toEqual({
          status: 'written',
          clipped: true, // fields were dropped
          reason: 'manual',
          requested_reason: reason,
        });
      }
      // a reason of the agent's own is written as it is
      const own = await call(sidecar.url, 'POST', '/v1/emergency', {
        body: { reason: 'gateway_down', message: `${run} own`, fields: { ticket: 'T-2' } },
      });
      expect(own.body).toEqual({ status: 'written' });
    } finally {
      process.kill(sidecar.pid, 'SIGTERM');
      await sidecar.exited;
    }
    await journal.settled();
    const entries = journal
      .read('AGW_AGENT_ID=qa')
      .filter((e) => String(e.MESSAGE).startsWith(run));
    expect(entries.map((e) => e.MESSAGE)).toEqual([
      ...AUTOMATIC_REASONS.map((r) => `${run} ${r}`),
      `${run} own`,
    ]);
    for (const [i, reason] of AUTOMATIC_REASONS.entries()) {
      const e = entries[i]!;
      expect(e).toMatchObject({
        PRIORITY: '2',
        AGW_REASON: 'manual',
        AGW_REQUESTED_REASON: reason,
        TICKET: 'T-1',
        AGW_FIELDS_DROPPED: '5',
      });
      for (const name of [
        'AGW_RECIPIENT',
        'AGW_COUNT',
        'AGW_DETAIL',
        'AGW_MESSAGE_IDS',
        'AGW_STALLED_S',
      ])
        expect(e[name], `${reason}: ${name}`).toBeUndefined();
    }
    expect(entries[AUTOMATIC_REASONS.length]).toMatchObject({
      AGW_REASON: 'gateway_down',
      TICKET: 'T-2',
    });
    expect(entries[AUTOMATIC_REASONS.length]!.AGW_REQUESTED_REASON).toBeUndefined();
    // journalctl's match for the adapter's alarms finds none of the agent's
    for (const reason of AUTOMATIC_REASONS)
      expect(journal.read('AGW_AGENT_ID=qa', `AGW_REASON=${reason}`)).toEqual([]);
  });

  it('agent-gateway emergency --reason dead_letter: written as manual, and stderr says so', {
    timeout: 30_000,
  }, async () => {
    const message = `cli ${randomUUID()}`;
    const res = await runCli(['emergency', '--reason', 'dead_letter', message], {
      AGW_JOURNAL_SOCKET: journal.socket,
      AGW_AGENT_ID: 'qa',
    });
    expect(res.code).toBe(0);
    expect(res.stderr).toContain('AGW_REASON=manual and AGW_REQUESTED_REASON=dead_letter');
    const entry = await journal.next(`MESSAGE=${message}`);
    expect(entry).toMatchObject({
      AGW_AGENT_ID: 'qa',
      AGW_REASON: 'manual',
      AGW_REQUESTED_REASON: 'dead_letter',
    });
  });

  it("the gateway's own entries keep their reason and AGW_* fields; none of its callers can set AGW_REQUESTED_REASON", async () => {
    const writer = new JournalWriter({ socketPath: journal.socket });
    const agent = `auto-${randomUUID()}`;
    const e = new Emergencies(writer, { agentId: agent });
    expect(
      e.tryRaise({
        reason: 'dead_letter',
        message: 'automatic',
        fields: {
          AGW_RECIPIENT: 'pm',
          AGW_COUNT: 2,
          AGW_DETAIL: 'lease_expired',
          AGW_REQUESTED_REASON: 'x',
        },
      }),
    ).toEqual({ written: true, clipped: true });
    expect(
      e.tryRaise(
        { reason: 'manual', message: 'explicit', fields: { AGW_REQUESTED_REASON: 'integrity' } },
        { explicit: true },
      ),
    ).toEqual({ written: true, clipped: true });
    await writer.flush();
    writer.close();
    await journal.settled();
    const [auto, explicit] = journal.read(`AGW_AGENT_ID=${agent}`);
    expect(auto).toMatchObject({
      MESSAGE: 'automatic',
      AGW_REASON: 'dead_letter',
      AGW_RECIPIENT: 'pm',
      AGW_COUNT: '2',
      AGW_DETAIL: 'lease_expired',
      AGW_FIELDS_DROPPED: '1',
    });
    expect(auto!.AGW_REQUESTED_REASON).toBeUndefined();
    expect(explicit).toMatchObject({ MESSAGE: 'explicit', AGW_REASON: 'manual' });
    expect(explicit!.AGW_REQUESTED_REASON).toBeUndefined();
  });
});
