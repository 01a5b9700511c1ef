/**
 * The audit log's verification rule (store/rules/audit-chain.ts) on chains made in memory by the
 * adapter's own append (auditEntry), then tampered with as a person with the database could:
 * each break is named by the right seq and kind, across page boundaries (pages of 3), and a
 * chain that starts past seq 1 (pruned) is taken from its first entry when no anchor is kept.
 * With the anchor the store keeps beside the log (its newest entry, and where retention
 * pruned), entries removed at either end are named too, the newest entry rewritten with its
 * hash recomputed is, and appends or prunes while the walk reads are not taken for tampering;
 * an append's numbering (nextAudit) never gives a seq twice. The engines' tests
 * (audit-tamper.test.ts) do the same through real SQL.
 */
import { describe, expect, it } from 'vitest';
import {
  type AuditAnchor,
  type AuditPages,
  chainSummary,
  nextAudit,
  prunedTo,
  selfConsistent,
  verifyAuditChain,
} from '../../src/store/rules/audit-chain.js';
import { auditEntry, auditView, GENESIS_HASH } from '../../src/store/rules/operators.js';
import type { AuditDraft, AuditEntry } from '../../src/store/store.js';

const T0 = Date.UTC(2031, 0, 1);

const draft = (i: number): AuditDraft => ({
  at: T0 + i * 1000,
  actor: i % 2 === 0 ? 'operator:alice' : 'orchestrator',
  action: i % 2 === 0 ? 'pause' : 'continuation',
  target: `target-${i}`,
  detail: { i, list: [1, 'two', { three: 3 }], none: null },
});

/** A sound chain of seq 1..n, as the store appends it. */
function chain(n: number): AuditEntry[] {
  const out: AuditEntry[] = [];
  for (let seq = 1; seq <= n; seq++)
    out.push(auditEntry(seq, draft(seq), out.at(-1)?.hash ?? GENESIS_HASH));
  return out;
}

/** Pages over `entries` as a store answers them: seq > after, in seq order (the rows as kept). */
const pages =
  (entries: readonly AuditEntry[]): AuditPages =>
  async (after, limit) =>
    [...entries]
      .sort((a, b) => a.seq - b.seq)
      .filter((e) => e.seq > after)
      .slice(0, limit);

const verify = (entries: readonly AuditEntry[]) =>
  verifyAuditChain(pages(entries), { pageSize: 3 });

/** `e` with its fields changed and its hash recomputed by the forger, as the adapter would. */
const recomputed = (e: AuditEntry, change: Partial<AuditEntry>): AuditEntry => {
  const c = { ...e, ...change };
  return auditEntry(
    c.seq,
    { at: Date.parse(c.at), actor: c.actor, action: c.action, target: c.target, detail: c.detail },
    c.prev_hash,
  );
};

/** Every entry from `from` on renumbered by `by`, fields and hashes left as they were. */
const renumber = (entries: AuditEntry[], from: number, by: number) =>
  entries.map((e) => (e.seq >= from ? { ...e, seq: e.seq + by } : e));

describe('audit chain verification', () => {
  it('an intact chain verifies, in one line, whatever the page size', async () => {
    const log = chain(10);
    for (const pageSize of [1, 3, 10, 500]) {
      const r = await verifyAuditChain(pages(log), { pageSize });
      expect(r).toEqual({ entries: 10, first: 1, last: 10, broken: undefined });
    }
    expect(chainSummary(await verify(log))).toBe('audit log: 10 entries, seq 1..10, chain intact');
    expect(chainSummary(await verify([]))).toBe('audit log: 0 entries, chain intact');
    expect(log.every((e) => selfConsistent(e))).toBe(true);
  });

  it('an entry as stored and read back (JSON text, ms) hashes as it was appended', () => {
    const e = auditEntry(
      1,
      { ...draft(1), detail: { b: [undefined, 1], a: Number.NaN } },
      GENESIS_HASH,
    );
    const row = {
      seq: e.seq,
      at: Date.parse(e.at),
      actor: e.actor,
      action: e.action,
      target: e.target,
      detail: JSON.stringify(e.detail),
      prev_hash: e.prev_hash,
      hash: e.hash,
    };
    expect(selfConsistent(auditView(row))).toBe(true);
  });

  it('a changed field, prev_hash or hash is `changed` at that seq', async () => {
    const cases: Partial<AuditEntry>[] = [
      { actor: 'operator:mallory' },
      { detail: { i: 5, forged: true } },
      { at: new Date(T0).toISOString() },
      { action: 'resume' },
      { prev_hash: 'f'.repeat(64) },
      { hash: 'e'.repeat(64) },
    ];
    for (const change of cases) {
      const log = chain(10);
      log[4] = { ...log[4]!, ...change };
      expect((await verify(log)).broken, JSON.stringify(change)).toMatchObject({
        seq: 5,
        kind: 'changed',
      });
    }
  });

  it('a rewritten entry whose hash the forger recomputed is `changed`: its successor still holds the old hash', async () => {
    const log = chain(10);
    log[4] = recomputed(log[4]!, { actor: 'operator:mallory' });
    expect(selfConsistent(log[4]!)).toBe(true);
    expect((await verify(log)).broken).toMatchObject({ seq: 5, kind: 'changed' });
  });

  it('the first and the last entry changed', async () => {
    const first = chain(5);
    first[0] = { ...first[0]!, actor: 'x' };
    expect((await verify(first)).broken).toMatchObject({ seq: 1, kind: 'changed' });
    const last = chain(5);
    last[4] = { ...last[4]!, target: 'x' };
    expect((await verify(last)).broken).toMatchObject({ seq: 5, kind: 'changed' });
  });

  it('a missing seq is `removed`, named by the first one missing', async () => {
    const one = chain(10).filter((e) => e.seq !== 5);
    expect((await verify(one)).broken).toMatchObject({ seq: 5, kind: 'removed' });
    const three = chain(10).filter((e) => e.seq < 4 || e.seq > 6);
    const r = await verify(three);
    expect(r.broken).toMatchObject({ seq: 4, kind: 'removed' });
    expect(chainSummary(r)).toBe(
      'audit log: chain broken at seq 4 (removed): seq 4..6 are missing between seq 3 and 7',
    );
  });

  it('entries removed and the rest renumbered to close the gap are `removed`', async () => {
    const one = renumber(
      chain(10).filter((e) => e.seq !== 5),
      6,
      -1,
    );
    expect((await verify(one)).broken).toMatchObject({ seq: 5, kind: 'removed' });
    const first = renumber(
      chain(6).filter((e) => e.seq > 2),
      3,
      -2,
    );
    expect((await verify(first)).broken).toMatchObject({ seq: 1, kind: 'removed' });
  });

  it('an entry put in between (the rest renumbered up) is `inserted`, made-up hash or recomputed', async () => {
    const sound = chain(10);
    const forged = (hash: 'made-up' | 'recomputed'): AuditEntry => {
      const base = { ...sound[5]!, seq: 6, actor: 'operator:mallory', prev_hash: sound[4]!.hash };
      return hash === 'made-up' ? { ...base, hash: 'a'.repeat(64) } : recomputed(base, {});
    };
    for (const hash of ['made-up', 'recomputed'] as const) {
      const log = [...renumber(sound, 6, 1), forged(hash)];
      const r = await verify(log);
      expect(r.broken, hash).toMatchObject({ seq: 6, kind: 'inserted' });
    }
    // the forged entry's successor's prev_hash is what fails: the forged one links soundly
    expect(selfConsistent(forged('recomputed'))).toBe(true);
  });

  it('an entry put in at seq 1 (the rest renumbered up) is `inserted`', async () => {
    const sound = chain(4);
    const forged = auditEntry(1, draft(99), GENESIS_HASH);
    const r = await verify([forged, ...renumber(sound, 1, 1)]);
    expect(r.broken).toMatchObject({ seq: 1, kind: 'inserted' });
  });

  it('two entries put in between are `inserted` at the first', async () => {
    const sound = chain(8);
    const a = recomputed({ ...sound[3]!, seq: 4, prev_hash: sound[2]!.hash, actor: 'm1' }, {});
    const b = recomputed({ ...sound[3]!, seq: 5, prev_hash: a.hash, actor: 'm2' }, {});
    const r = await verify([...renumber(sound, 4, 2), a, b]);
    expect(r.broken).toMatchObject({ seq: 4, kind: 'inserted' });
  });

  it('a seq that appears twice is `inserted`', async () => {
    const log = chain(5);
    // one page holds both, as a store without a primary key would answer
    const rows = [...log.slice(0, 3), { ...log[2]!, actor: 'again' }, ...log.slice(3)];
    const twice: AuditPages = async (after, limit) =>
      rows.filter((e) => e.seq > after).slice(0, limit);
    const r = await verifyAuditChain(twice, { pageSize: 10 });
    expect(r.broken).toMatchObject({ seq: 3, kind: 'inserted' });
  });

  it('a log pruned from its oldest end is taken from its anchor, and still checked after it', async () => {
    const pruned = chain(10).filter((e) => e.seq >= 4);
    expect(await verify(pruned)).toEqual({ entries: 7, first: 4, last: 10, broken: undefined });
    const changedAnchor = chain(10).filter((e) => e.seq >= 4);
    changedAnchor[0] = { ...changedAnchor[0]!, actor: 'x' };
    expect((await verify(changedAnchor)).broken).toMatchObject({ seq: 4, kind: 'changed' });
    const afterAnchor = chain(10).filter((e) => e.seq >= 4 && e.seq !== 7);
    expect((await verify(afterAnchor)).broken).toMatchObject({ seq: 7, kind: 'removed' });
    // a forged entry put before the anchor, copying its prev_hash
    const anchor = pruned[0]!;
    const before = auditEntry(3, draft(99), anchor.prev_hash);
    expect((await verify([before, ...pruned])).broken).toMatchObject({ seq: 3, kind: 'inserted' });
  });

  it('a log that starts at seq 1 must start from genesis', async () => {
    const log = chain(3);
    log[0] = auditEntry(1, draft(1), 'f'.repeat(64));
    expect((await verify(log)).broken).toMatchObject({ seq: 1, kind: 'changed' });
  });

  it('pruning while the walk reads is not a removal: the walk starts again from the new anchor', async () => {
    let log = chain(10);
    let reads = 0;
    const read: AuditPages = async (after, limit) => {
      reads++;
      if (reads === 2) log = log.filter((e) => e.seq > 6); // a retention pass between two pages
      return pages(log)(after, limit);
    };
    const r = await verifyAuditChain(read, { pageSize: 3 });
    expect(r).toEqual({ entries: 4, first: 7, last: 10, broken: undefined });
  });
});

/** The anchor a store keeps after appending `log` (its newest) and pruning up to `pruned`. */
const anchorAfter = (log: readonly AuditEntry[], pruned = 0): AuditAnchor => ({
  seq: log.at(-1)?.seq ?? 0,
  hash: log.at(-1)?.hash ?? GENESIS_HASH,
  prunedSeq: pruned,
  prunedHash: pruned === 0 ? GENESIS_HASH : log[pruned - 1]!.hash,
});

const verifyAnchored = (entries: readonly AuditEntry[], anchor: AuditAnchor | undefined) =>
  verifyAuditChain(pages(entries), { pageSize: 3, anchor: async () => anchor });

describe('audit chain verification from the anchor', () => {
  it('a sound log verifies from its anchor; entries missing at the newest end are `removed`, named by the first: one, several, all', async () => {
    const log = chain(10);
    expect(await verifyAnchored(log, anchorAfter(log))).toEqual({
      entries: 10,
      first: 1,
      last: 10,
      broken: undefined,
    });
    const pruned = log.filter((e) => e.seq > 3);
    expect(await verifyAnchored(pruned, anchorAfter(log, 3))).toEqual({
      entries: 7,
      first: 4,
      last: 10,
      broken: undefined,
    });
    expect(await verifyAnchored([], anchorAfter([]))).toEqual({
      entries: 0,
      first: undefined,
      last: undefined,
      broken: undefined,
    });
    const anchor = anchorAfter(log);
    const one = await verifyAnchored(log.slice(0, 9), anchor);
    expect(chainSummary(one)).toBe(
      'audit log: chain broken at seq 10 (removed): seq 10 is missing at the newest end: the last entry is seq 9, the anchor holds seq 10',
    );
    expect((await verifyAnchored(log.slice(0, 6), anchor)).broken).toMatchObject({
      seq: 7,
      kind: 'removed',
      why: 'seq 7..10 are missing at the newest end: the last entry is seq 6, the anchor holds seq 10',
    });
    expect(await verifyAnchored([], anchor)).toEqual({
      entries: 0,
      first: undefined,
      last: undefined,
      broken: {
        seq: 1,
        kind: 'removed',
        why: 'seq 1..10 are missing: the log is empty (nothing was pruned), the anchor holds seq 10',
      },
    });
    // a pruned log emptied: named from the first seq after the pruned ones
    expect((await verifyAnchored([], anchorAfter(log, 4))).broken).toMatchObject({
      seq: 5,
      kind: 'removed',
      why: 'seq 5..10 are missing: the log is empty (retention pruned up to seq 4), the anchor holds seq 10',
    });
  });

  it('entries missing at the oldest end, past what retention pruned, are `removed`', async () => {
    const log = chain(10);
    expect((await verifyAnchored(log.slice(3), anchorAfter(log))).broken).toEqual({
      seq: 1,
      kind: 'removed',
      why: 'seq 1..3 are missing before seq 4, the first entry (nothing was pruned)',
    });
    expect((await verifyAnchored(log.slice(5), anchorAfter(log, 3))).broken).toEqual({
      seq: 4,
      kind: 'removed',
      why: 'seq 4..5 are missing before seq 6, the first entry (retention pruned up to seq 3)',
    });
    // and renumbered down to start where the prune left off: still `removed`
    const renumbered = renumber(log.slice(5), 6, -2);
    expect((await verifyAnchored(renumbered, anchorAfter(log, 3))).broken).toMatchObject({
      seq: 4,
      kind: 'removed',
    });
  });

  it('the first kept entry must link to the hash the prune left; an entry at a pruned seq is `inserted`', async () => {
    const log = chain(10);
    const anchor = anchorAfter(log, 3);
    const kept = log.slice(3);
    // its prev_hash changed and its hash recomputed: the anchor's pruned hash contradicts it
    const relinked = [recomputed(kept[0]!, { prev_hash: 'f'.repeat(64) }), ...kept.slice(1)];
    expect((await verifyAnchored(relinked, anchor)).broken).toMatchObject({
      seq: 4,
      kind: 'changed',
    });
    // a forged entry at seq 3 (pruned), copying the first kept entry's prev_hash
    const before = auditEntry(3, draft(99), kept[0]!.prev_hash);
    expect((await verifyAnchored([before, ...kept], anchor)).broken).toEqual({
      seq: 3,
      kind: 'inserted',
      why: 'seq 3 is one retention pruned up to seq 3',
    });
    // one put in before the first kept entry, the rest renumbered up: its successor links past it
    const forged = recomputed({ ...kept[0]!, actor: 'operator:mallory' }, {});
    expect((await verifyAnchored([forged, ...renumber(kept, 4, 1)], anchor)).broken).toMatchObject({
      seq: 4,
      kind: 'inserted',
    });
  });

  it('the newest entry rewritten with its hash recomputed is `changed`: the anchor holds its hash', async () => {
    const log = chain(10);
    const anchor = anchorAfter(log);
    log[9] = recomputed(log[9]!, { actor: 'operator:mallory' });
    expect((await verifyAnchored(log, anchor)).broken).toEqual({
      seq: 10,
      kind: 'changed',
      why: 'its hash is not the one the anchor holds for it: it was rewritten with its hash recomputed',
    });
  });

  it('a store whose anchor row is gone is broken, after whatever the walk finds first', async () => {
    const log = chain(5);
    expect((await verifyAnchored(log, undefined)).broken).toEqual({
      seq: 6,
      kind: 'removed',
      why: "the anchor (audit_anchor) is gone: what was removed at the log's ends cannot be told",
    });
    const changed = [...log];
    changed[1] = { ...changed[1]!, actor: 'x' };
    expect((await verifyAnchored(changed, undefined)).broken).toMatchObject({
      seq: 2,
      kind: 'changed',
    });
  });

  it('entries appended past the anchor while the walk reads (or by an older adapter) are judged by the chain alone; those before it must all be there', async () => {
    const log = chain(12);
    // the anchor read before the walk held seq 9; 10..12 came since, soundly
    expect(await verifyAnchored(log, anchorAfter(log.slice(0, 9)))).toEqual({
      entries: 12,
      first: 1,
      last: 12,
      broken: undefined,
    });
    // past it, but not sound: named as anywhere else
    const bad = [...log];
    bad[10] = { ...bad[10]!, target: 'x' };
    expect((await verifyAnchored(bad, anchorAfter(log.slice(0, 9)))).broken).toMatchObject({
      seq: 11,
      kind: 'changed',
    });
    // the anchor's own entry, there before the walk began, gone
    expect(
      (await verifyAnchored(log.slice(0, 8), anchorAfter(log.slice(0, 9)))).broken,
    ).toMatchObject({ seq: 9, kind: 'removed' });
  });

  it('pruning while the walk reads is not a removal: the walk starts again from the moved anchor', async () => {
    const full = chain(10);
    let log = full;
    let anchor = anchorAfter(full);
    let reads = 0;
    const read: AuditPages = async (after, limit) => {
      reads++;
      if (reads === 2) {
        // a retention pass between two pages, its anchor moved in its transaction
        log = full.filter((e) => e.seq > 6);
        anchor = anchorAfter(full, 6);
      }
      return pages(log)(after, limit);
    };
    const r = await verifyAuditChain(read, { pageSize: 3, anchor: async () => anchor });
    expect(r).toEqual({ entries: 4, first: 7, last: 10, broken: undefined });
    // a deletion at the oldest end with no prune is reported, however often the walk restarts
    const deleted = full.filter((e) => e.seq > 2);
    expect(
      (await verifyAuditChain(pages(deleted), { anchor: async () => anchorAfter(full) })).broken,
    ).toMatchObject({ seq: 1, kind: 'removed' });
  });
});

describe("an append's place in the log (nextAudit) and a prune's end (prunedTo)", () => {
  const row = (last: [number, string] | null, anchor: [number, string] | null) => ({
    last_seq: last?.[0] ?? null,
    last_hash: last?.[1] ?? null,
    anchor_seq: anchor?.[0] ?? null,
    anchor_hash: anchor?.[1] ?? null,
  });

  it('goes on from the anchor: a seq freed at the newest end is never given again', () => {
    expect(nextAudit(row(null, [0, GENESIS_HASH]))).toEqual({
      seq: 1,
      prevHash: GENESIS_HASH,
      anchored: true,
    });
    expect(nextAudit(row([10, 'h10'], [10, 'h10']))).toEqual({
      seq: 11,
      prevHash: 'h10',
      anchored: true,
    });
    // the newest removed, or all of them: after the anchor, linked to the hash it holds
    expect(nextAudit(row([8, 'h8'], [10, 'h10']))).toEqual({
      seq: 11,
      prevHash: 'h10',
      anchored: true,
    });
    expect(nextAudit(row(null, [10, 'h10']))).toEqual({
      seq: 11,
      prevHash: 'h10',
      anchored: true,
    });
    // entries past the anchor (an older adapter's during a rolling upgrade): after them
    expect(nextAudit(row([12, 'h12'], [10, 'h10']))).toEqual({
      seq: 13,
      prevHash: 'h12',
      anchored: true,
    });
  });

  it('without the anchor row, from the log as it is, and no anchor made up', () => {
    expect(nextAudit(row([7, 'h7'], null))).toEqual({ seq: 8, prevHash: 'h7', anchored: false });
    expect(nextAudit(row(null, null))).toEqual({
      seq: 1,
      prevHash: GENESIS_HASH,
      anchored: false,
    });
    expect(nextAudit(undefined)).toEqual({ seq: 1, prevHash: GENESIS_HASH, anchored: false });
  });

  it('a prune ends at the highest seq it deleted, in whatever order they came back', () => {
    expect(prunedTo([])).toBeUndefined();
    expect(
      prunedTo([
        { seq: 3, hash: 'h3' },
        { seq: 5, hash: 'h5' },
        { seq: 4, hash: 'h4' },
      ]),
    ).toEqual({ seq: 5, hash: 'h5' });
    // PostgreSQL's bigint as text
    expect(prunedTo([{ seq: '12' as unknown as number, hash: 'h12' }])).toEqual({
      seq: 12,
      hash: 'h12',
    });
  });
});
