/**
 * A check of an envelope that fails in a way it did not foresee (a TypeError from a lookup, as kind
 * "constructor" once made) is the sender's input meeting a bug: a 400 `invalid_request` naming the
 * field being checked, never a retryable 500 `internal` that a sidecar would keep sending.
 * White-box: no JSON body can carry a value that throws when read, so the values here are made
 * in-process.
 */
import { expect, it } from 'vitest';
import { checkEnvelopeFields, EnvelopeSchema, parseEnvelope } from '../../src/protocol/envelope.js';
import { GatewayError } from '../../src/protocol/errors.js';

/** An object whose keys cannot be listed: what a bug deep in a check looks like from outside. */
const unlistable = () =>
  new Proxy(
    {},
    {
      ownKeys() {
        throw new TypeError('boom');
      },
    },
  );

const base = { idempotency_key: 'k-1', to: '@qa', kind: 'status' };

function refusal(run: () => unknown): GatewayError {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(GatewayError);
    return err as GatewayError;
  }
  throw new Error('expected a refusal');
}

it('names the field being checked: the payload', () => {
  const err = refusal(() => parseEnvelope({ ...base, payload: unlistable() }));
  expect([err.code, err.status, err.retryable, err.field]).toEqual([
    'invalid_request',
    400,
    false,
    'payload',
  ]);
  expect(err.message).toBe('payload: could not be checked, so it is refused');
});

it('names the body when the envelope itself cannot be read', () => {
  const body = {
    ...base,
    get payload(): unknown {
      throw new TypeError('boom');
    },
  };
  const err = refusal(() => parseEnvelope(body));
  expect([err.code, err.field]).toEqual(['invalid_request', 'body']);
  const mcp = refusal(() => checkEnvelopeFields(EnvelopeSchema, body));
  expect([mcp.code, mcp.field]).toEqual(['invalid_request', 'body']);
});

it('passes the catalogue refusals through as they are', () => {
  const err = refusal(() => parseEnvelope({ ...base, kind: 'Bad Kind' }));
  expect([err.code, err.field]).toEqual(['invalid_envelope', 'kind']);
});
