/**
 * A real browser for tests: Debian's Chromium (test/setup.sh installs it), driven headless by
 * playwright-core. The console it loads is the build's (dist/console/, made by `npm run
 * build`), so the tests that use it are system tests.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium } from 'playwright-core';

export const CHROMIUM = process.env.AGW_CHROMIUM ?? '/usr/bin/chromium';

/** No network of its own (updates, sync, QUIC probes): the only requests are the page's. */
const ARGS = [
  '--headless=new',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const BUILT_CONSOLE = fileURLToPath(new URL('../../dist/console/app.js', import.meta.url));

export async function launchBrowser(): Promise<{ browser: Browser; close: () => Promise<void> }> {
  if (!existsSync(BUILT_CONSOLE))
    throw new Error(`${BUILT_CONSOLE} is missing: run \`npm run build\` first`);
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
  return { browser, close: () => browser.close() };
}
