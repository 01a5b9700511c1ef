import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { ERRORS } from '../../src/protocol/errors.js';

const doc = readFileSync(new URL('../../docs/reference/errors.md', import.meta.url), 'utf8');
const rows = [...doc.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \| (yes|no) \|/gm)].map((m) => ({
  code: m[1]!,
  status: Number(m[2]),
  retryable: m[3] === 'yes',
}));

it('documents every error code with its status and retryability, and nothing stale', () => {
  const catalogue = Object.entries(ERRORS).map(([code, spec]) => ({ code, ...spec }));
  expect(rows.sort((a, b) => a.code.localeCompare(b.code))).toEqual(
    catalogue.sort((a, b) => a.code.localeCompare(b.code)),
  );
});
