/**
 * AGW_AUDIT_RETENTION_DAYS (docs/reference/configuration.md): 365 by default, its flag
 * `--audit-retention-days`, and a bad value refused with the one line the adapter prints before
 * exit 2.
 */
import { expect, it } from 'vitest';
import { ADAPTER_SETTINGS, AdapterSettingsSchema } from '../../src/adapter/settings.js';
import { readSettings } from '../../src/cli/settings.js';

const read = (argv: string[], env: Record<string, string> = {}) =>
  readSettings(ADAPTER_SETTINGS, AdapterSettingsSchema, argv, { AGW_TOPOLOGY: 't.json', ...env })
    .settings;

it('defaults to 365 days and is set by its variable or flag', () => {
  expect(ADAPTER_SETTINGS.auditRetentionDays).toEqual({
    env: 'AGW_AUDIT_RETENTION_DAYS',
    default: '365',
  });
  expect(read([]).auditRetentionDays).toBe(365);
  expect(read([], { AGW_AUDIT_RETENTION_DAYS: '30' }).auditRetentionDays).toBe(30);
  expect(read(['--audit-retention-days', '3650']).auditRetentionDays).toBe(3650);
});

it.each([
  [
    { AGW_AUDIT_RETENTION_DAYS: '0' },
    [],
    'AGW_AUDIT_RETENTION_DAYS: must be an integer from 1 to 36500; got "0"',
  ],
  [
    { AGW_AUDIT_RETENTION_DAYS: 'a year' },
    [],
    'AGW_AUDIT_RETENTION_DAYS: must be an integer from 1 to 36500; got "a year"',
  ],
  [
    {},
    ['--audit-retention-days', '36501'],
    'AGW_AUDIT_RETENTION_DAYS (--audit-retention-days): must be an integer from 1 to 36500; got "36501"',
  ],
])('refuses %o %o', (env, argv, line) => {
  expect(() => read(argv, env)).toThrow(line);
});
