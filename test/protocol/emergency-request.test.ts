/**
 * An emergency's fields are the agent's, key for key: one named `__proto__` (JSON.parse makes it
 * an own key) was lost without a word, since z.record copied the object key by key and that
 * assignment sets a prototype. Values are still strings, numbers or booleans.
 */
import { expect, it } from 'vitest';
import { EmergencyRequestSchema } from '../../src/protocol/emergency-request.js';
import { PROTO_NAMES } from '../helpers/bad-input.js';

it('keeps every field, Object.prototype names included, as sent', () => {
  const text = `{${PROTO_NAMES.map((k, i) => `${JSON.stringify(k)}:"v${i}"`).join(',')},"n":1,"ok":true}`;
  const parsed = EmergencyRequestSchema.parse({
    reason: 'manual',
    message: 'help',
    fields: JSON.parse(text),
  });
  expect(JSON.stringify(parsed.fields)).toBe(JSON.stringify(JSON.parse(text)));
  expect(Object.keys(parsed.fields!)).toContain('__proto__');
});

it('refuses fields that are not an object of strings, numbers and booleans', () => {
  for (const fields of [[], 'x', null, { a: {} }, { a: [1] }, { a: null }]) {
    const r = EmergencyRequestSchema.safeParse({ reason: 'manual', message: 'help', fields });
    expect(r.success, JSON.stringify(fields)).toBe(false);
    expect(r.error?.issues[0]?.path[0], JSON.stringify(fields)).toBe('fields');
  }
});
