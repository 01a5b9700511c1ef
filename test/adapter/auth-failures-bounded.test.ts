/**
 * Failed authentications are audited per source address and minute (CONTRACT.md, "Audit log"),
 * one entry for each of the first MAX_SOURCES addresses of a minute; the failures of the
 * addresses past them are counted together in one entry more, never dropped. The Credentials
 * door itself, given requests as node:http hands them over (their socket's remote address and
 * headers): it never looks further.
 */
import type { IncomingMessage } from 'node:http';
import { pino } from 'pino';
import { afterEach, expect, it } from 'vitest';
import { Credentials, MAX_SOURCES, OTHER_SOURCES } from '../../src/adapter/credentials.js';
import { compileTopology } from '../../src/adapter/topology.js';
import type { AuditDraft } from '../../src/store/store.js';
import { topologyObject } from '../helpers/topology.js';

let door: Credentials | undefined;
afterEach(() => door?.close());

const request = (address: string, token = 'not a token of anyone') =>
  ({
    socket: { remoteAddress: address },
    headers: { authorization: `Bearer ${token}` },
  }) as unknown as IncomingMessage;

it('counts every failure: one entry per address up to the bound, the rest in one more', () => {
  const entries: AuditDraft[] = [];
  const now = Date.parse('2026-12-07T10:00:30Z');
  door = new Credentials({
    topology: compileTopology(topologyObject()),
    mtls: false,
    audit: (e) => entries.push(e),
    logger: pino({ level: 'silent' }),
    now: () => now,
  });
  const address = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
  for (let i = 0; i < MAX_SOURCES + 3; i++)
    expect(() => door!.authenticate(request(address(i)))).toThrow(/belongs to no agent/);
  // one of the first addresses again: still its own entry
  expect(() => door!.authenticate(request(address(0)))).toThrow();
  door.flushFailures();
  expect(entries).toHaveLength(MAX_SOURCES + 1);
  expect(entries.every((e) => e.action === 'auth_failed' && e.actor === 'adapter')).toBe(true);
  expect(entries.find((e) => e.target === address(0))!.detail).toMatchObject({ count: 2 });
  expect(entries.find((e) => e.target === OTHER_SOURCES)!.detail).toEqual({
    minute: '2026-12-07T10:00:00.000Z',
    count: 3,
    codes: { unauthorized: 3 },
  });
  const counted = entries.reduce((n, e) => n + (e.detail.count as number), 0);
  expect(counted).toBe(MAX_SOURCES + 4);
});
