/**
 * The one retry rule (isRetryableAnswer): the sidecar queues an answer exactly when the error
 * catalogue marks its code retryable; an answer without one of our codes (a proxy's) is retried
 * for 429 and 5xx only.
 */
import { expect, it } from 'vitest';
import { ERRORS, type ErrorCode, isRetryableAnswer } from '../../src/protocol/errors.js';

it('follows the catalogue for every code, whatever the status says', () => {
  for (const [code, spec] of Object.entries(ERRORS) as [ErrorCode, (typeof ERRORS)[ErrorCode]][]) {
    expect(isRetryableAnswer(spec.status, code), code).toBe(spec.retryable);
  }
  // the case the status alone got wrong: a 500 that will never succeed unchanged
  expect(isRetryableAnswer(500, 'integrity_error')).toBe(false);
  expect(isRetryableAnswer(500, 'internal')).toBe(true);
});

it('retries a code-less 429 or 5xx, and nothing else without a code', () => {
  expect(isRetryableAnswer(502, undefined)).toBe(true);
  expect(isRetryableAnswer(503, '<html>')).toBe(true);
  expect(isRetryableAnswer(429, undefined)).toBe(true);
  expect(isRetryableAnswer(404, undefined)).toBe(false);
  expect(isRetryableAnswer(400, 'no_such_code')).toBe(false);
  expect(isRetryableAnswer(504, 'toString')).toBe(true); // not ours, though every object has it
});
