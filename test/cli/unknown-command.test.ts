/**
 * A command the program does not have is one line naming it and exit 2, also when it is the
 * name of an Object.prototype member: `agent-gateway constructor` found Object in the command
 * table and crashed with a stack (exit 1). Runs the built CLI (dist/).
 */
import { expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';

it('refuses an unknown command with exit 2, Object.prototype names included', {
  timeout: 60_000,
}, async () => {
  for (const command of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'nope']) {
    const r = await runCli([command]);
    expect([r.code, r.stderr.split('\n')[0]], command).toEqual([
      2,
      `agent-gateway: unknown command "${command}"`,
    ]);
  }
});
