/**
 * Durability per commit (docs/design/durability.md): a commit that holds a message is fsynced
 * (AGW_SYNC=full), one that holds only leases, acks and marks is not. Checked twice: the mode
 * SQLite reads at COMMIT, and the fsync calls themselves, counted by strace on a real process.
 */
import { execFileSync } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { MessageDraft } from '../../src/store/store.js';
import { tempDir } from '../helpers/topology.js';

const DIST = fileURLToPath(new URL('../../dist/', import.meta.url));

function draft(key = randomUUID()): MessageDraft {
  return {
    sender: 'pm',
    idempotencyKey: key,
    fingerprint: createHash('sha256').update(key).digest(),
    channel: '@qa',
    kind: 'status',
    priority: 'normal',
    replyTo: null,
    payloadJson: '{}',
    receivedAt: Date.now(),
    recipients: ['qa'],
  };
}

let dir: string;
let cleanup: () => void;
beforeEach(async () => {
  ({ dir, cleanup } = tempDir('agw-durable-'));
});
afterEach(() => cleanup());

describe('the mode each commit runs with', () => {
  it('is FULL for a group that sends or replays a dead letter, NORMAL for leases, acks, sweeps', async () => {
    const store = new SqliteStore(join(dir, 'a.db'), {
      delivery: { maxRetries: 0, leaseMs: 1000, alertsTo: 'orchestrator' },
    });
    await store.ensureChannels(['@qa']);
    await store.commit([{ op: 'append', drafts: [draft()] }]);
    expect(store.synchronous).toBe('full');
    const now = Date.now();
    const [leased] = (await store.commit([{ op: 'lease', agent: 'qa', max: 10, now }])).results;
    expect(store.synchronous).toBe('normal');
    const ids = (leased !== undefined && 'ok' in leased ? leased.ok : []) as {
      delivery_id: number;
    }[];
    expect(ids).toHaveLength(1);
    await store.commit([{ op: 'heartbeat', agent: 'qa', now }]);
    expect(store.synchronous).toBe('normal');
    await store.commit([{ op: 'sweep', now: now + 10 }]); // nothing ran out
    expect(store.synchronous).toBe('normal');
    await store.commit([{ op: 'sweep', now: now + 5000 }]); // dead-lettered, and an alert written
    const [dead] = (await store.deadLetters(0, 10)).map((d) => JSON.parse(d) as { id: number });
    expect(dead).toBeDefined();
    await store.commit([{ op: 'ack', agent: 'qa', ids: [] }]);
    expect(store.synchronous).toBe('normal');
    await store.commit([{ op: 'replay_dead_letter', id: dead!.id, now: now + 6000 }]);
    expect(store.synchronous).toBe('full');
    // a group that mixes an ack with a send is FULL
    await store.commit([
      { op: 'ack', agent: 'qa', ids: ids.map((d) => d.delivery_id) },
      { op: 'append', drafts: [draft()] },
    ]);
    expect(store.synchronous).toBe('full');
    await store.close();
  });

  it('makes a group of leases durable when an alert (a message) fell due in it', async () => {
    const store = new SqliteStore(join(dir, 'alerts.db'), {
      delivery: { maxRetries: 0, leaseMs: 1000, alertsTo: 'orchestrator' },
    });
    await store.ensureChannels(['@qa']);
    await store.commit([{ op: 'append', drafts: [draft()] }]);
    const now = Date.now();
    await store.commit([{ op: 'lease', agent: 'qa', max: 10, now }]);
    expect(store.synchronous).toBe('normal');
    const { effects } = await store.commit([{ op: 'sweep', now: now + 5000 }]);
    expect(effects.alerts.map((a) => a.kind)).toEqual(['alert/dead-letter']);
    expect(store.synchronous).toBe('full');
    await store.close();
  });

  it("is FULL for a scheduled message's send and for its cancel (204: it must never fire)", async () => {
    const store = new SqliteStore(join(dir, 'cancel.db'));
    await store.ensureChannels(['@qa']);
    const later = { ...draft(), deliverAt: Date.now() + 60_000 };
    const [sent] = (await store.commit([{ op: 'append', drafts: [later] }])).results;
    expect(store.synchronous).toBe('full');
    const outcome = sent !== undefined && 'ok' in sent ? sent.ok : [];
    const [scheduled] = outcome as { status: number; assignment: { message_id: string } }[];
    await store.commit([{ op: 'heartbeat', agent: 'qa', now: Date.now() }]);
    expect(store.synchronous).toBe('normal');
    const { results } = await store.commit([
      {
        op: 'cancel_scheduled',
        sender: 'pm',
        messageId: scheduled!.assignment.message_id,
        now: Date.now(),
      },
    ]);
    expect(results).toEqual([{ ok: { cancelled: true, changed: true } }]);
    expect(store.synchronous).toBe('full');
    await store.close();
  });

  it('stays NORMAL throughout with AGW_SYNC=normal', async () => {
    const store = new SqliteStore(join(dir, 'n.db'), { sync: 'normal' });
    await store.ensureChannels(['@qa']);
    await store.commit([{ op: 'append', drafts: [draft()] }]);
    expect(store.synchronous).toBe('normal');
    await store.close();
  });
});

/**
 * Runs `body` (an ES module's text, with `dist` the built package's folder) under strace and
 * answers how many fsync and fdatasync calls it made.
 */
function fsyncsOf(body: string): number {
  const log = join(dir, `strace-${randomUUID()}.txt`);
  const script = `const dist = ${JSON.stringify(DIST)};\n${body}`;
  execFileSync(
    'strace',
    [
      '-f',
      '-qq',
      '-e',
      'trace=fsync,fdatasync',
      '-o',
      log,
      process.execPath,
      '--input-type=module',
      '-e',
      script,
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const text = execFileSync('cat', [log], { encoding: 'utf8' });
  return text.split('\n').filter((l) => /\b(fsync|fdatasync)\(/.test(l)).length;
}

describe('fsync calls, counted on a real process', () => {
  const N = 40;
  const adapterScript = (ops: string) => `
    const { SqliteStore } = await import(dist + 'store/sqlite/sqlite-store.js');
    const { createHash, randomUUID } = await import('node:crypto');
    const store = new SqliteStore(process.env.DIR + '/a-' + randomUUID() + '.db', {
      delivery: { maxRetries: 0, leaseMs: 1000, alertsTo: 'orchestrator' } });
    const T = Date.now();
    await store.ensureChannels(['@qa']);
    const draft = () => { const key = randomUUID(); return { sender: 'pm', idempotencyKey: key,
      fingerprint: createHash('sha256').update(key).digest(), channel: '@qa', kind: 'status',
      priority: 'normal', replyTo: null, payloadJson: '{}', receivedAt: Date.now(), recipients: ['qa'] }; };
    for (let i = 0; i < ${N}; i++) { ${ops} }
    await store.close();`;

  // a few node processes under strace: seconds on a loaded machine
  it('the adapter fsyncs each commit that holds a message, and no lease or ack', {
    timeout: 60_000,
  }, async () => {
    process.env.DIR = dir;
    const sends = fsyncsOf(
      adapterScript("await store.commit([{ op: 'append', drafts: [draft()] }]);"),
    );
    // open, migrations and the channel counter: a few fsyncs; measured the same way
    const base = fsyncsOf(adapterScript(''));
    const trips = fsyncsOf(
      adapterScript(`
        await store.commit([{ op: 'append', drafts: [draft()] }]);
        const [r] = (await store.commit([{ op: 'lease', agent: 'qa', max: 1, now: Date.now() }])).results;
        await store.commit([{ op: 'ack', agent: 'qa', ids: r.ok.map((d) => d.delivery_id) }]);
        await store.commit([{ op: 'heartbeat', agent: 'qa', now: Date.now() }]);`),
    );
    expect(sends - base).toBeGreaterThanOrEqual(N);
    // a trip of send, lease, ack and heartbeat costs what the send alone costs
    expect(trips - base).toBeLessThanOrEqual(sends - base + 2);
    expect(trips - base).toBeGreaterThanOrEqual(N);
    // a lease that runs out, dead-lettered by a sweep that writes the alert: fsynced too
    const alerts = fsyncsOf(
      adapterScript(`
        const t = T + i * 100000;
        await store.commit([{ op: 'append', drafts: [{ ...draft(), receivedAt: t }] }]);
        await store.commit([{ op: 'lease', agent: 'qa', max: 1, now: t }]);
        const { effects } = await store.commit([{ op: 'sweep', now: t + 5000 }]);
        if (effects.alerts.length !== 1) throw new Error('no alert in sweep ' + i);`),
    );
    expect(alerts - base).toBeGreaterThanOrEqual(2 * N);
  });

  it("the sidecar fsyncs each message it queues, and none of inbox repair's marks", {
    timeout: 60_000,
  }, async () => {
    process.env.DIR = dir;
    const sidecar = (ops: string) => `
      const { SidecarFile } = await import(dist + 'store/sidecar/sidecar-file.js');
      const file = new SidecarFile(process.env.DIR + '/s-' + Math.random() + '.db');
      for (let i = 0; i < ${N}; i++) { ${ops} }
      file.close();`;
    const base = fsyncsOf(sidecar(''));
    const queued = fsyncsOf(sidecar("file.enqueue('k' + i, '{}', Date.now());"));
    const marks = fsyncsOf(
      sidecar(`
        file.setHanded(new Map([['@qa', i + 1]]));
        file.markAcked(['m' + i], Date.now());
        file.flushBehind(); // their commit, as at the end of a turn: one per iteration
        file.setState('breaker', { i });`),
    );
    expect(queued - base).toBeGreaterThanOrEqual(N);
    expect(marks - base).toBeLessThan(N / 4);
  });
});
