/**
 * AGW_AGENT_TOKEN_FILE is re-read when it changes (a projected service-account token rotates
 * hourly): calls after the change carry the new token and none fails; an empty file is refused
 * with one warning and the token before stays. Against the real adapter, whose topology takes
 * both tokens during the rotation and then only the new one, so a call that still carried the
 * old token would be refused.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { call } from '../helpers/http.js';
import { capturingLogger } from '../helpers/sidecar.js';
import { startEnvSidecar } from '../helpers/sidecar-from-env.js';
import { sha256Hex, tempDir, topologyObject, writeTopology } from '../helpers/topology.js';

const { dir, cleanup } = tempDir('agw-sidecar-token-');
afterAll(cleanup);

/** The test topology with pm known by `tokens` (a list while a token is rotated). */
function topologyWith(tokens: readonly string[]) {
  const t = topologyObject();
  t.agents = t.agents.map((a) =>
    a.id === 'pm' ? { ...a, token_sha256: tokens.map(sha256Hex) } : a,
  );
  return t;
}

it('takes a rotated token under traffic and refuses an empty file', {
  timeout: 30_000,
}, async () => {
  // JWT-shaped, as a projected token is: the sidecar sends it as it is and never parses it
  const first = 'eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJmaXJzdCJ9.c2lnbmF0dXJl';
  const second = 'eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJzZWNvbmQifQ.c2lnbmF0dXJl';
  const a = await startTestAdapter({}, { topology: topologyWith([first, second]) });
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, `${first}\n`);
  const log = capturingLogger();
  const s = await startEnvSidecar(
    'pm',
    dir,
    { AGW_ADAPTER_URL: a.url, AGW_AGENT_TOKEN_FILE: tokenFile },
    log.logger,
  );
  try {
    await s.sidecar.gateOpen;
    const answers: number[] = [];
    let flowing = true;
    const flow = (async () => {
      for (let n = 0; flowing; n++) {
        const r = await call(s.url, 'POST', '/v1/messages', {
          body: { to: '@qa', kind: 'status', payload: { n } },
        });
        answers.push(r.status);
      }
    })();
    const sendsSeen = (n: number) =>
      new Promise<void>((resolve) => {
        const check = () => (answers.length >= n ? resolve() : setImmediate(check));
        check();
      });
    await sendsSeen(5);

    writeFileSync(tokenFile, `${second}\n`); // the trailing newline is not the token's
    const took = await log.line((l) => /took the new token/.test(String(l.msg)));
    // sends are one after another: two more answered, and the one in flight at the change is done
    await sendsSeen(answers.length + 2);
    // the old token is revoked: a call that still carried it would be 401 from here on
    writeTopology(a.dir, topologyWith([second]));
    expect(a.adapter.reload('test: first token revoked').taken).toBe(true);
    const atRevocation = answers.length;
    await sendsSeen(atRevocation + 5);

    // an empty file (a projection caught half-written, a mount gone wrong): refused
    writeFileSync(tokenFile, '');
    // (or, wrongly, taken: the next line either way)
    const refused = await log.line(
      (l) => l.level === 40 || (l !== took && /took the new token/.test(String(l.msg))),
    );
    expect(refused.msg).toBe(
      `AGW_AGENT_TOKEN_FILE ${tokenFile}: is empty; refused, the token read before stays in use`,
    );
    await sendsSeen(answers.length + 5);
    flowing = false;
    await flow;

    expect(answers.length).toBeGreaterThanOrEqual(atRevocation + 10);
    expect(answers.every((status) => status === 201)).toBe(true);
    expect((await call(s.url, 'GET', '/v1/me')).body.agent).toBe('pm');
    expect(log.lines.filter((l) => (l.level as number) >= 40)).toEqual([refused]);
  } finally {
    await s.stop();
    await a.stop();
  }
});
