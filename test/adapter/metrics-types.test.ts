/**
 * The adapter's /metrics by Prometheus' conventions: every `*_total` is a counter and only
 * counters end in `_total` (a rate() of a gauge is wrong across restarts, and the OpenMetrics
 * parser of a scraper drops a `_total` that is not a counter), times are in seconds, and the
 * totals a scrape reads from the store count what happened.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestAdapter, type TestAdapter } from '../helpers/adapter.js';
import { call, pollAs, sendAs } from '../helpers/http.js';

let a: TestAdapter;
beforeAll(async () => {
  a = await startTestAdapter();
});
afterAll(() => a?.stop());

/** Each metric's `# TYPE`, from the exposition text. */
function typesOf(text: string): Map<string, string> {
  return new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!] as const));
}

it('exports every *_total as a counter, and no counter without _total', async () => {
  await sendAs(a.url, 'pm', '@qa', 'status');
  const [d] = await pollAs(a.url, 'qa');
  await call(a.url, 'POST', '/v1/acks', { agent: 'qa', body: { delivery_ids: [d.delivery_id] } });
  const scrape = await call(a.url, 'GET', '/metrics');
  expect(scrape.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  const text = scrape.body as string;
  const types = typesOf(text);
  for (const name of [
    'agw_messages_total',
    'agw_commit_errors_total',
    'agw_deliveries_enqueued_total',
    'agw_deliveries_handed_out_total',
    'agw_redeliveries_total',
    'agw_acks_total',
    'agw_alerts_total',
    'agw_dead_letters_total',
  ])
    expect(types.get(name), name).toBe('counter');
  for (const [name, type] of types) {
    expect(name.endsWith('_total'), `${name} is a ${type}`).toBe(type === 'counter');
    // base units: no milliseconds, no kilobytes
    expect(name, name).not.toMatch(/_(ms|milliseconds|kb|kib|mb|mib)(_|$)/);
  }
  for (const name of [
    'agw_queue_depth',
    'agw_agent_oldest_pending_age_seconds',
    'agw_agent_last_poll_timestamp_seconds',
    'agw_agent_stalled',
    'agw_agent_parked_polls',
  ])
    expect(types.get(name), name).toBe('gauge');
  expect(types.get('agw_commit_seconds')).toBe('histogram');
  // the counters read from the store at scrape time count what happened, once
  expect(text).toMatch(/^agw_deliveries_enqueued_total 1$/m);
  expect(text).toMatch(/^agw_deliveries_handed_out_total 1$/m);
  expect(text).toMatch(/^agw_acks_total 1$/m);
  expect(text).toMatch(/^agw_dead_letters_total\{reason="evicted"\} 0$/m);
  // a second scrape reads them again: still 1, not 2
  const again = (await call(a.url, 'GET', '/metrics')).body as string;
  expect(again).toMatch(/^agw_acks_total 1$/m);
  expect(again).toMatch(/^agw_agent_last_poll_timestamp_seconds\{agent="qa"\} [1-9]/m);
});
