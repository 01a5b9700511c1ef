/**
 * watchFiles: a change is told once it settles, whenever it comes, the first instant after the
 * watch started included (a file rewritten right after the program read it), and a file that
 * disappears or appears is a change too.
 */
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, it } from 'vitest';
import { type FileWatch, watchFiles } from '../../src/protocol/watched-files.js';
import { until } from '../helpers/wait.js';

let watch: FileWatch | undefined;
const dirs: string[] = [];
afterEach(() => {
  watch?.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function dir(): string {
  const d = mkdtempSync(join(tmpdir(), 'agw-watch-'));
  dirs.push(d);
  return d;
}

it('sees a change made in the same tick the watch began', async () => {
  const file = join(dir(), 'a.json');
  writeFileSync(file, 'one');
  let told = 0;
  watch = watchFiles([file], () => told++, { intervalMs: 10, settleMs: 5 });
  writeFileSync(file, 'two, longer');
  await until(() => told === 1, 'the change told');
});

it('tells a pair changed together once, and a file replaced by a rename or removed', async () => {
  const d = dir();
  const cert = join(d, 'cert.pem');
  const key = join(d, 'key.pem');
  writeFileSync(cert, 'c1');
  writeFileSync(key, 'k1');
  let told = 0;
  watch = watchFiles([cert, key, cert], () => told++, { intervalMs: 10, settleMs: 100 });
  writeFileSync(cert, 'c2-renewed');
  writeFileSync(key, 'k2-renewed');
  await until(() => told === 1, 'the pair told');
  writeFileSync(join(d, 'next.pem'), 'c3');
  renameSync(join(d, 'next.pem'), cert);
  await until(() => told === 2, 'the rename told');
  rmSync(key);
  await until(() => told === 3, 'the removal told');
  writeFileSync(key, 'k4');
  await until(() => told === 4, 'the new file told');
});
