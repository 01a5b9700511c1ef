/**
 * The operator console's page and assets, as the adapter serves them (GET /console,
 * GET /console/:file): one HTML page, one stylesheet, and the browser modules compiled from
 * ./browser/ into dist/console/ (src/console/tsconfig.json). Nothing comes from elsewhere, so
 * the page runs under `Content-Security-Policy: default-src 'self'` with no inline script or
 * style. This module is compiled by the main (Node) build; it touches no DOM.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The navigation, in order: route and accessible name (the contract names these links). */
const NAV: readonly [string, string][] = [
  ['agents', 'Agents'],
  ['channels', 'Channels'],
  ['messages', 'Messages'],
  ['dead-letters', 'Dead letters'],
  ['threads', 'Threads'],
  ['audit', 'Audit'],
];

/** The one page. The script fills `<main>`; until it runs, the page says it needs it. */
export const CONSOLE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>agent-gateway console</title>
<link rel="stylesheet" href="/console/console.css">
<script type="module" src="/console/app.js"></script>
</head>
<body>
<a class="skip" href="#view">Skip to content</a>
<header class="top">
<h1 class="brand">agent-gateway console</h1>
<nav aria-label="Console">
<ul>
${NAV.map(([route, name]) => `<li><a href="#/${route}">${name}</a></li>`).join('\n')}
</ul>
</nav>
<button type="button" id="sign-out" class="quiet" hidden>Sign out</button>
</header>
<div id="alert" role="alert" hidden></div>
<main id="view" tabindex="-1">
<noscript><p>The console needs JavaScript.</p></noscript>
</main>
</body>
</html>
`;

/**
 * The styles. Colours keep a contrast of 4.5:1 or more against their background (text #1f2933
 * on white is 14:1, the header's #e5eaf0 on #1f2933 12:1, links #1d4ed8 on white 6.7:1); focus
 * is a 3 px outline on everything focusable. Below 700 px the navigation wraps and tables scroll
 * sideways inside their wrapper rather than widen the page.
 */
export const CONSOLE_CSS = `*, *::before, *::after { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; text-size-adjust: 100%; }
body {
  margin: 0;
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif;
  color: #1f2933;
  background: #ffffff;
}
a { color: #1d4ed8; }
a:visited { color: #5b21b6; }
:focus-visible { outline: 3px solid #b45309; outline-offset: 2px; }
.skip { position: absolute; left: -10000px; top: 0; padding: 8px 12px; background: #ffffff; }
.skip:focus { left: 8px; z-index: 10; }
.top {
  display: flex;
  flex-wrap: wrap;
  align-items: center;
  gap: 8px 24px;
  padding: 10px 20px;
  background: #1f2933;
  color: #e5eaf0;
}
.brand { margin: 0; font-size: 1.1rem; font-weight: 700; }
.top nav ul { display: flex; flex-wrap: wrap; gap: 4px 6px; margin: 0; padding: 0; list-style: none; }
.top nav a {
  display: inline-block;
  padding: 6px 10px;
  border-radius: 4px;
  color: #e5eaf0;
  text-decoration: none;
}
.top nav a:hover { background: #334155; text-decoration: underline; }
.top nav a[aria-current="page"] { background: #e5eaf0; color: #1f2933; }
.top :focus-visible { outline-color: #fbbf24; }
.top .quiet { margin-left: auto; background: transparent; color: #e5eaf0; border-color: #94a3b8; }
.top .quiet:hover { background: #334155; }
main { display: block; padding: 16px 20px 40px; max-width: 1600px; }
main:focus { outline: none; }
h2 { margin: 4px 0 12px; font-size: 1.4rem; }
h3 { margin: 20px 0 8px; font-size: 1.15rem; }
h4 { margin: 0 0 6px; font-size: 1.05rem; }
button {
  font: inherit;
  padding: 6px 14px;
  border: 1px solid #1d4ed8;
  border-radius: 4px;
  background: #1d4ed8;
  color: #ffffff;
  cursor: pointer;
}
button:hover { background: #1e40af; }
button:disabled { background: #e2e8f0; color: #475569; border-color: #94a3b8; cursor: default; }
button[hidden] { display: none; }
input, select {
  font: inherit;
  padding: 5px 8px;
  border: 1px solid #64748b;
  border-radius: 4px;
  background: #ffffff;
  color: #1f2933;
  min-width: 0;
}
input[type="checkbox"] { width: 18px; height: 18px; margin: 0; }
.field { display: flex; flex-direction: column; gap: 2px; }
.field label { font-size: 0.9rem; font-weight: 600; }
.filters { display: flex; flex-wrap: wrap; align-items: flex-end; gap: 10px 14px; margin: 0 0 14px; }
.filters input[type="search"] { width: 18rem; max-width: 100%; }
.filters input[type="text"] { width: 10rem; }
.sign-in { max-width: 26rem; display: flex; flex-direction: column; gap: 12px; align-items: flex-start; }
.sign-in .field, .sign-in input { width: 100%; }
.sign-in h2, .sign-in p { margin: 0; }
#alert { margin: 12px 20px 0; padding: 10px 14px; border: 1px solid #b91c1c; border-left-width: 6px; border-radius: 4px; background: #fef2f2; color: #7f1d1d; }
#alert p { margin: 0; }
#alert[hidden] { display: none; }
.actions { display: flex; flex-wrap: wrap; align-items: center; gap: 10px 14px; margin: 0 0 12px; }
.status { display: flex; align-items: center; gap: 10px; min-height: 1.5em; }
.status progress { width: 12rem; }
.status progress[hidden] { display: none; }
.table-block { margin: 0 0 12px; }
.table-wrap { max-width: 100%; overflow-x: auto; border: 1px solid #cbd5e1; border-radius: 4px; }
table { border-collapse: collapse; width: 100%; font-size: 0.92rem; }
caption.visually-hidden, .visually-hidden { position: absolute; width: 1px; height: 1px; margin: -1px; padding: 0; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; border: 0; }
caption { text-align: left; padding: 8px 10px; font-weight: 600; background: #f1f5f9; }
th, td { padding: 6px 10px; border-top: 1px solid #e2e8f0; text-align: left; vertical-align: middle; white-space: nowrap; }
thead th { background: #f8fafc; border-top: 1px solid #cbd5e1; font-size: 0.85rem; }
tbody th { font-weight: 600; }
tbody tr:hover { background: #f8fafc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code.payload { display: block; width: max-content; max-width: 30rem; white-space: normal; overflow-wrap: anywhere; font-size: 0.85rem; color: #1f2933; }
.empty { margin: 6px 2px; color: #475569; }
.empty[hidden] { display: none; }
.paged > button { margin-top: 4px; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0 0 12px; }
.facts dt { font-weight: 600; }
.facts dd { margin: 0; overflow-wrap: anywhere; }
.payload-full { margin: 0 0 12px; padding: 10px; max-height: 20rem; overflow: auto; background: #f8fafc; border: 1px solid #cbd5e1; border-radius: 4px; white-space: pre-wrap; overflow-wrap: anywhere; }
.recipient { margin: 0 0 18px; padding: 12px 14px; border: 1px solid #cbd5e1; border-radius: 6px; }
.explanation { margin: 0 0 10px; font-size: 1rem; }
@media (max-width: 700px) {
  .top { padding: 8px 12px; }
  main { padding: 12px 12px 32px; }
  #alert { margin: 10px 12px 0; }
  .filters input[type="search"], .filters input[type="text"], .filters select { width: 100%; }
  .filters .field { flex: 1 1 100%; }
  /* the row's first cell stays in view while the rest of the row scrolls under it */
  .table-wrap tr > :first-child { position: sticky; left: 0; z-index: 1; background: #ffffff; box-shadow: 1px 0 0 #cbd5e1; }
  .table-wrap thead tr > :first-child { background: #f8fafc; }
  /* and on the agents view its last, the Pause or Resume button, on the right */
  .agents tr > :last-child { position: sticky; right: 0; z-index: 1; background: #ffffff; box-shadow: -1px 0 0 #cbd5e1; }
  .agents thead tr > :last-child { background: #f8fafc; }
}
`;

/**
 * The built browser modules, found from this module's own place: compiled, this is
 * dist/console/page.js and they sit beside it; run from source (tests), this is
 * src/console/page.ts and ../../dist/console/ is the build's. The same relative path serves both.
 */
const BUILT = new URL('../../dist/console/', import.meta.url);

/** A browser module's name: lowercase and dashes. page.js is this module, never served. */
const MODULE_NAME = /^[a-z-]+\.js$/;

/** The built modules by name, listed at the first request, each read at its first request. */
let built: Map<string, Buffer | undefined> | undefined;

function builtModules(): Map<string, Buffer | undefined> {
  if (built === undefined) {
    let names: string[] = [];
    try {
      names = readdirSync(BUILT).filter((n) => MODULE_NAME.test(n) && n !== 'page.js');
    } catch {} // no build: no modules, and the page says it needs its script
    built = new Map(names.map((n) => [n, undefined]));
  }
  return built;
}

export interface ConsoleAsset {
  readonly body: Buffer | string;
  readonly contentType: string;
}

/**
 * `console.css`, or a built browser module (`app.js`, ...) read once and kept; undefined for any
 * other name (a miss costs a map lookup: nothing is kept for names the build did not make).
 */
export function consoleAsset(name: string): ConsoleAsset | undefined {
  if (name === 'console.css') return { body: CONSOLE_CSS, contentType: 'text/css; charset=utf-8' };
  const modules = builtModules();
  if (!modules.has(name)) return undefined;
  let body = modules.get(name);
  if (body === undefined) {
    try {
      body = readFileSync(fileURLToPath(new URL(name, BUILT)));
    } catch {
      modules.delete(name); // gone since it was listed
      return undefined;
    }
    modules.set(name, body);
  }
  return { body, contentType: 'text/javascript; charset=utf-8' };
}
