/**
 * What the property tests and the bounded fuzz throw at both programs: Object.prototype's names
 * (a lookup in a plain object keyed by a sender's string finds them: kind "constructor" was a
 * 500), JSON text with own `__proto__` keys, and mutations of a valid body. All fast-check
 * arbitraries, so a failure repeats from its seed.
 */
import fc from 'fast-check';
import { expect } from 'vitest';
import { ERRORS } from '../../src/protocol/errors.js';
import type { Json } from './http.js';

/** constructor, __proto__, toString, valueOf, hasOwnProperty, __defineGetter__, ... */
export const PROTO_NAMES: readonly string[] = Object.getOwnPropertyNames(Object.prototype);
export const protoName = fc.constantFrom(...PROTO_NAMES);

/** A value that is JSON text as it stands (an object written out with its keys as given). */
export class ObjectText {
  constructor(readonly text: string) {}
}

/** An object as JSON text: written out, since an object literal cannot hold an own __proto__. */
export function objectText(entries: readonly (readonly [string, unknown])[]): ObjectText {
  return new ObjectText(
    `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${asText(v)}`).join(',')}}`,
  );
}

export function asText(v: unknown): string {
  if (v instanceof ObjectText) return v.text;
  if (Array.isArray(v)) return `[${v.map(asText).join(',')}]`;
  return JSON.stringify(v) ?? 'null';
}

/** What a field may get instead of its right value: a prototype name, a bound, any JSON. */
export const wrongValue: fc.Arbitrary<unknown> = fc.oneof(
  protoName,
  fc.constantFrom('', null, true, -1, 0, 1.5, 2 ** 53, 1e308, '0x10', '1e1', '5 ', '@', []),
  fc.jsonValue({ maxDepth: 3 }),
  fc.dictionary(protoName, fc.jsonValue({ maxDepth: 1 }), { maxKeys: 3 }),
);

const STRAY = ['{', '}', '[', ']', '"', ',', ':', '\\', '\u0000', ' ', '\ud800'];

/**
 * Mutations of a valid body as JSON text: one field's value replaced, a field added under an
 * Object.prototype name (`__proto__` an own key), a field renamed to one, the text cut
 * anywhere, or one character of it replaced. Fields are the object's own, in order.
 */
export function mutated(valid: fc.Arbitrary<Record<string, unknown>>): fc.Arbitrary<string> {
  const entries = valid.map((v) => Object.entries(v));
  return fc.oneof(
    fc
      .tuple(entries, fc.nat(), wrongValue)
      .map(([e, i, x]) => objectText(e.map(([k, v], j) => [k, j === i % e.length ? x : v])).text),
    fc
      .tuple(entries, protoName, fc.oneof(wrongValue, fc.constant({})))
      .map(([e, k, x]) => objectText([...e, [k, x]]).text),
    fc
      .tuple(entries, fc.nat(), protoName)
      .map(
        ([e, i, name]) => objectText(e.map(([k, v], j) => [j === i % e.length ? name : k, v])).text,
      ),
    fc.tuple(entries, fc.nat()).map(([e, at]) => {
      const text = objectText(e).text;
      return text.slice(0, at % text.length);
    }),
    fc.tuple(entries, fc.nat(), fc.constantFrom(...STRAY)).map(([e, at, c]) => {
      const text = objectText(e).text;
      const i = at % text.length;
      return text.slice(0, i) + c + text.slice(i + 1);
    }),
  );
}

/** A body: valid (a third of the time), mutated, or any JSON, any text. */
export function bodies(valid: fc.Arbitrary<Record<string, unknown>>): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 2, arbitrary: valid.map((v) => JSON.stringify(v)) },
    { weight: 4, arbitrary: mutated(valid) },
    { weight: 1, arbitrary: fc.json({ maxDepth: 3 }) },
    { weight: 1, arbitrary: fc.string({ maxLength: 40 }) },
  );
}

const documented = new Set(Object.keys(ERRORS));

/**
 * The property every answer keeps: no 5xx, and a refusal is JSON with a documented code (the
 * request and its answer in the message, so that a failure says what to send again).
 */
export function expectAnsweredWell(
  what: string,
  res: { status: number; body: Json },
  code: (body: Json) => unknown = (b) => b?.error,
): void {
  const where = `${what} -> ${res.status} ${JSON.stringify(res.body)}`;
  expect(res.status, where).toBeLessThan(500);
  if (res.status >= 400) expect(documented.has(code(res.body) as string), where).toBe(true);
}
