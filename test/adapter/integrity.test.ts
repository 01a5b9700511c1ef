/**
 * Integrity: one byte of a stored payload flipped in the database file while the adapter is
 * stopped. SQLite's own quick_check cannot see it (the page is well-formed); the per-message
 * checksum does: the read is refused, /health turns 503, and corrupted data is never served.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { type ChildAdapter, spawnAdapter } from '../helpers/cli.js';
import { call } from '../helpers/http.js';
import { tempDir, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-integrity-');
afterAll(cleanup);

it('a flipped byte is refused at read and turns /health to 503', { timeout: 60_000 }, async () => {
  const db = join(dir, 'a.db');
  const args = ['--topology', writeTopology(dir), '--db', db];
  let adapter: ChildAdapter | undefined = await spawnAdapter(args);
  try {
    const marker = 'MARKER-7d1e0c55-payload';
    await call(adapter.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: { idempotency_key: randomUUID(), to: '@qa', kind: 'status', payload: { text: marker } },
    });
    await call(adapter.url, 'POST', '/v1/messages', {
      agent: 'pm',
      body: {
        idempotency_key: randomUUID(),
        to: '@growth',
        kind: 'status',
        payload: { text: 'fine' },
      },
    });
    adapter.child.kill('SIGTERM'); // a clean stop checkpoints the WAL into the main file
    expect((await adapter.exited).code).toBe(0);

    const bytes = readFileSync(db);
    const at = bytes.indexOf(marker);
    expect(at).toBeGreaterThan(0);
    bytes[at] = bytes[at]! ^ 0x01; // 'M' becomes 'L'
    writeFileSync(db, bytes);

    adapter = await spawnAdapter(args); // quick_check passes: the page itself is sound
    expect((await call(adapter.url, 'GET', '/health')).status).toBe(200);
    const replay = await call(adapter.url, 'GET', '/v1/channels/@qa/messages', { agent: 'qa' });
    expect(replay.status).toBe(500);
    expect(replay.body.error).toBe('integrity_error');
    expect(JSON.stringify(replay.body)).not.toContain('LARKER');
    const inbox = await call(adapter.url, 'GET', '/v1/inbox', { agent: 'qa' });
    expect(inbox.body.error).toBe('integrity_error');
    const health = await call(adapter.url, 'GET', '/health');
    expect(health.status).toBe(503);
    expect(health.body.message).toContain('checksum');
    // other messages are still served
    const growth = await call(adapter.url, 'GET', '/v1/channels/@growth/messages', {
      agent: 'growth',
    });
    expect(growth.body.messages).toHaveLength(1);
    // and the alerts_to agent is told
    const alerts = await call(adapter.url, 'GET', '/v1/inbox?wait=5', { agent: 'orchestrator' });
    expect(alerts.body.deliveries[0].message).toMatchObject({
      kind: 'alert/integrity',
      payload: { reason: 'checksum_mismatch', recipient: 'qa' },
    });
    expect(adapter.lines.join('\n')).toContain('integrity');
  } finally {
    adapter?.child.kill('SIGKILL');
    await adapter?.exited;
  }
});
