/**
 * An operation of the sidecar's service called in-process, answered as its HTTP endpoint would
 * answer it (the same rendering: src/sidecar/routes.ts answerOf): status, parsed JSON body and
 * Retry-After; a refusal as the catalogue's body with its status.
 */
import type { JsonText, OperationName, Outputs } from '../../src/protocol/agent-api.js';
import { isGatewayError } from '../../src/protocol/errors.js';
import { answerOf } from '../../src/sidecar/routes.js';
import type { Json } from './http.js';

export interface HttpAnswer {
  readonly status: number;
  readonly body: Json;
  readonly retryAfterS?: number;
}

export async function httpAnswer(name: OperationName, call: () => unknown): Promise<HttpAnswer> {
  try {
    const a = answerOf(name, (await call()) as JsonText | Outputs[OperationName]);
    return {
      status: a.status ?? 200,
      body: typeof a.body === 'string' ? JSON.parse(a.body) : a.body,
    };
  } catch (err) {
    if (!isGatewayError(err)) throw err;
    return {
      status: err.status,
      body: err.toJSON(),
      ...(err.retryAfterS === undefined ? {} : { retryAfterS: err.retryAfterS }),
    };
  }
}
