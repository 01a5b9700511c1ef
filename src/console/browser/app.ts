/**
 * The console's entry module: the sign-in form, the hash routes (`#/agents`,
 * `#/messages?q=...`, `#/journey/ID`, ...) and the view each renders. Nothing is fetched but the
 * adapter's JSON API at this origin (api.ts); the page's HTML and styles are in page.ts.
 */

import { agentsView } from './agents.js';
import { api, clearToken, setToken, token } from './api.js';
import { auditView } from './audit.js';
import { channelsView } from './channels.js';
import { deadLettersView } from './dead-letters.js';
import { clearAlert, el, fail, SIGNED_OUT } from './dom.js';
import { journeyView } from './journey.js';
import { messagesView } from './messages.js';
import { threadsView } from './threads.js';
import type { View } from './view.js';

const VIEWS: Record<string, View> = {
  agents: agentsView,
  channels: channelsView,
  messages: messagesView,
  'dead-letters': deadLettersView,
  threads: threadsView,
  audit: auditView,
  journey: journeyView,
};

const DEFAULT_ROUTE = '#/agents';

const main = document.getElementById('view')!;
const signOut = document.getElementById('sign-out') as HTMLButtonElement;

/** The view shown ('' before the first and on the sign-in form). */
let shown = '';

/** Stops the view shown: its timers and its requests in flight. */
let leave: () => void = () => {};

function stop(): void {
  leave();
  leave = () => {};
}

/** `#/journey/ID?x=y` → { name: 'journey', arg: 'ID', params: x=y }. */
function parse(hash: string): { name: string; arg: string; params: URLSearchParams } {
  const path = hash.replace(/^#\/?/, '');
  const qAt = path.indexOf('?');
  const head = qAt < 0 ? path : path.slice(0, qAt);
  const params = new URLSearchParams(qAt < 0 ? '' : path.slice(qAt + 1));
  const slash = head.indexOf('/');
  const name = slash < 0 ? head : head.slice(0, slash);
  let arg = slash < 0 ? '' : head.slice(slash + 1);
  try {
    arg = decodeURIComponent(arg);
  } catch {}
  return { name, arg, params };
}

function markNav(name: string): void {
  for (const a of document.querySelectorAll<HTMLAnchorElement>('nav a')) {
    if (a.getAttribute('href') === `#/${name}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function navigate(hash: string): void {
  if (location.hash === hash) render();
  else location.hash = hash; // hashchange renders it
}

function render(): void {
  stop();
  clearAlert();
  if (token() === null) {
    showSignIn();
    return;
  }
  signOut.hidden = false;
  const { name, arg, params } = parse(location.hash);
  const view = VIEWS[name];
  if (view === undefined) {
    location.replace(DEFAULT_ROUTE);
    return;
  }
  markNav(name === 'journey' ? 'messages' : name);
  const controller = new AbortController();
  main.replaceChildren();
  const stopView = view({ root: main, params, arg, signal: controller.signal, navigate });
  leave = () => {
    controller.abort();
    stopView?.();
  };
  const heading = main.querySelector('h2');
  if (heading !== null) {
    heading.tabIndex = -1;
    document.title = `${heading.textContent} · agent-gateway console`;
    // a new view (not a new search in the same one): focus goes to its heading, as a page load
    // would put a screen reader at the top
    if (shown !== '' && shown !== name) heading.focus();
  }
  shown = name;
}

function showSignIn(): void {
  stop();
  shown = '';
  signOut.hidden = true;
  markNav('');
  document.title = 'Sign in · agent-gateway console';
  const input = el('input', {
    type: 'password',
    name: 'token',
    autocomplete: 'off',
    required: true,
    id: 'token',
  });
  const button = el('button', { type: 'submit' }, 'Sign in');
  const form = el(
    'form',
    { class: 'sign-in', 'aria-labelledby': 'sign-in-title' },
    el('h2', { id: 'sign-in-title' }, 'Sign in'),
    el('p', {}, "An operator's token. It stays in this tab and is sent only to this adapter."),
    el('div', { class: 'field' }, el('label', { for: 'token' }, 'Token'), input),
    button,
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const candidate = input.value.trim();
    if (candidate === '') return;
    button.disabled = true;
    clearAlert();
    // an operator-only read: an agent's token (even alerts_to's) is refused here, 403
    api('GET', '/v1/audit?limit=1', { token: candidate })
      .then(() => {
        setToken(candidate);
        if (parse(location.hash).name in VIEWS) render();
        else location.hash = DEFAULT_ROUTE;
      })
      .catch((err) => {
        button.disabled = false;
        input.value = '';
        fail(err);
      });
  });
  main.replaceChildren(form);
  input.focus();
}

signOut.addEventListener('click', () => {
  clearToken();
  stop();
  clearAlert();
  showSignIn();
});

// the adapter refused the token (401): back to the form, the alert left to say why
window.addEventListener(SIGNED_OUT, () => {
  clearToken();
  showSignIn();
});

// "Skip to content" moves focus without touching the hash, which names the view
document.querySelector('.skip')?.addEventListener('click', (e) => {
  e.preventDefault();
  main.focus();
});

window.addEventListener('hashchange', render);
render();
