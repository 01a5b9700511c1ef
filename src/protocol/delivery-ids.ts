/**
 * The body of POST /v1/acks and /v1/nacks, for both programs: `{"delivery_ids": [...]}`, 1 to
 * 1000 integers. The adapter's ids are positive; the sidecar also hands out negative ones of its
 * own (replayed copies), so it accepts those too.
 */
import { z } from 'zod';
import { GatewayError } from './errors.js';
import { parseJson } from './http.js';

const Positive = z.strictObject({ delivery_ids: z.array(z.int().positive()).min(1).max(1000) });
const NonZero = z.strictObject({
  delivery_ids: z
    .array(z.int().refine((n) => n !== 0))
    .min(1)
    .max(1000),
});

export function parseDeliveryIds(body: Buffer, opts: { negativeToo?: boolean } = {}): number[] {
  const parsed = (opts.negativeToo ? NonZero : Positive).safeParse(parseJson(body));
  if (!parsed.success) {
    throw new GatewayError(
      'invalid_request',
      'delivery_ids: must be an array of 1 to 1000 delivery ids',
      {
        field: 'delivery_ids',
      },
    );
  }
  return parsed.data.delivery_ids;
}
