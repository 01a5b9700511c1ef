import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// the built module, in a process of its own: in this one, other tests' imports of 'undici'
// have already loaded undici's index
const built = fileURLToPath(new URL('../../dist/sidecar/undici-pool.js', import.meta.url));

describe('undici-pool: undici Pool loaded without the rest of undici', () => {
  it("loads undici's Pool, dispatches a request on loopback, and leaves undici's index unloaded", () => {
    const script = `
      import { createServer } from 'node:http';
      import { createRequire } from 'node:module';
      import { Pool } from ${JSON.stringify(built)};
      const require = createRequire(${JSON.stringify(built)});
      const loaded = () => Object.keys(require.cache).filter((k) => /undici[\\\\/]index\\.js$/.test(k)).length;
      const server = createServer((_req, res) => res.end('pong'));
      await new Promise((r) => server.listen(0, '127.0.0.1', r));
      const pool = new Pool('http://127.0.0.1:' + server.address().port);
      const answer = await new Promise((resolve, reject) => {
        let status = 0; const chunks = [];
        pool.dispatch({ method: 'GET', path: '/' }, {
          onConnect() {}, onHeaders(s) { status = s; return true; },
          onData(c) { chunks.push(c); return true; },
          onComplete() { resolve({ status, body: Buffer.concat(chunks).toString() }); },
          onError: reject,
        });
      });
      const indexBefore = loaded();
      const same = require('undici').Pool === Pool;
      await pool.close(); server.close();
      console.log(JSON.stringify({ answer, indexBefore, same }));
    `;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
    });
    expect(JSON.parse(out)).toEqual({
      answer: { status: 200, body: 'pong' },
      indexBefore: 0,
      // a version of undici that moves or replaces the file fails here
      same: true,
    });
  });
});
