/**
 * undici's Pool, loaded alone, for the sidecar's calls to the adapter. `import { Pool } from
 * 'undici'` evaluates all of undici's index (fetch, WebSocket, EventSource, caches, mocks: 110
 * modules) for the one class the sidecar uses; the pool's own file and what it requires are 22.
 * Measured on the sidecar idle 30 s after start (bench/sidecar/sidecar.mjs's reading, 2 runs each):
 * 64.3 MiB RSS with the index, 60.0-60.4 MiB with this.
 *
 * Without the index, a pool has `dispatch`, `close` and `destroy` but not the API methods the
 * index adds to every dispatcher (`request`, `stream`, `pipeline`, `connect`, `upgrade`): the
 * type below leaves them out, so a call to one does not compile. The path is undici's, not a
 * documented export: the version is pinned exactly in package.json, and
 * test/sidecar/undici-pool.test.ts fails if this is not the very class undici exports.
 */
import { createRequire } from 'node:module';
import type { Pool as UndiciPool } from 'undici';

type ApiMethod = 'request' | 'stream' | 'pipeline' | 'connect' | 'upgrade';
export type Pool = Omit<UndiciPool, ApiMethod>;

export const Pool = createRequire(import.meta.url)('undici/lib/dispatcher/pool.js') as new (
  url: string | URL,
  options?: UndiciPool.Options,
) => Pool;
