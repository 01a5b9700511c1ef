/**
 * Building the page: elements from text (never from HTML: payloads are untrusted text), tables
 * with column headers and a caption, labelled fields, and the one alert region.
 */
import { ApiError } from './api.js';

type Child = Node | string | null | undefined | false;

/**
 * `<tag attr=...>children</tag>`. Attributes are set as attributes (a `true` one present and
 * empty, a `false` or undefined one left out); strings become text nodes.
 */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number | boolean | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

/** A `<label>` and its control, side by side in a `.field`. */
export function field(label: string, control: HTMLInputElement | HTMLSelectElement): HTMLElement {
  control.id ||= `f-${label.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  return el('div', { class: 'field' }, el('label', { for: control.id }, label), control);
}

/** A time as the API gave it (an ISO string), or `none` for null. */
export function time(value: unknown, none = '—'): string {
  return typeof value === 'string' && value !== '' ? value : none;
}

/** Any value as one line of text: strings as they are, the rest as JSON. */
export function text(value: unknown, none = '—'): string {
  if (value === null || value === undefined) return none;
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** A payload shown in a cell: its JSON, cut at 300 characters (the journey shows it whole). */
export function payloadCell(payload: unknown): HTMLElement {
  const full = JSON.stringify(payload) ?? '';
  const shown = full.length > 300 ? `${full.slice(0, 300)}…` : full;
  return el('code', { class: 'payload' }, shown);
}

/** A link to a message's journey, named by its id. */
export function journeyLink(messageId: string): HTMLAnchorElement {
  return el('a', { href: `#/journey/${encodeURIComponent(messageId)}` }, messageId);
}

export interface Column<T> {
  readonly header: string;
  readonly cell: (row: T) => Node | string;
  /** The row's name (a `<th scope="row">`): at most one column. */
  readonly rowHeader?: boolean;
  /** A class for the column's cells (`num` right-aligns). */
  readonly className?: string;
}

export interface DataTable<T> {
  /** The table in its scrolling wrapper, with the note shown while it has no rows. */
  readonly element: HTMLElement;
  readonly tbody: HTMLTableSectionElement;
  append(rows: readonly T[]): HTMLTableRowElement[];
  clear(): void;
}

/**
 * A table with a caption (seen only with `showCaption`) and `<th scope="col">` headers, in a wrapper that scrolls sideways on a
 * narrow screen (a named region, focusable, so a keyboard can scroll it too).
 */
export function dataTable<T>(
  label: string,
  columns: readonly Column<T>[],
  { showCaption = false }: { showCaption?: boolean } = {},
): DataTable<T> {
  const head = el(
    'tr',
    {},
    ...columns.map((c) => el('th', { scope: 'col', class: c.className }, c.header)),
  );
  const tbody = el('tbody');
  // the caption names the table for a screen reader; seen, it would repeat the view's heading
  const caption = el('caption', { class: showCaption ? undefined : 'visually-hidden' }, label);
  const table = el('table', {}, caption, el('thead', {}, head), tbody);
  const empty = el('p', { class: 'empty' }, 'Nothing to show.');
  const wrap = el(
    'div',
    { class: 'table-wrap', role: 'region', 'aria-label': label, tabindex: 0 },
    table,
  );
  const element = el('div', { class: 'table-block' }, wrap, empty);
  const row = (r: T) =>
    el(
      'tr',
      {},
      ...columns.map((c) =>
        el(
          c.rowHeader === true ? 'th' : 'td',
          { scope: c.rowHeader === true ? 'row' : undefined, class: c.className },
          c.cell(r),
        ),
      ),
    );
  return {
    element,
    tbody,
    append(rows) {
      const made = rows.map(row);
      tbody.append(...made);
      empty.hidden = tbody.rows.length > 0;
      return made;
    },
    clear() {
      tbody.replaceChildren();
      empty.hidden = false;
    },
  };
}

/** The page's alert region (role="alert"): what went wrong, said once. */
function alertRegion(): HTMLElement {
  return document.getElementById('alert')!;
}

export function showAlert(message: string): void {
  const region = alertRegion();
  region.replaceChildren(el('p', {}, message));
  region.hidden = false;
}

export function clearAlert(): void {
  const region = alertRegion();
  region.replaceChildren();
  region.hidden = true;
}

/** Fired on window when the adapter refuses the token (401): the app shows the sign-in form. */
export const SIGNED_OUT = 'agw:signed-out';

/**
 * Reports a failed call: the server's message and code in the alert; a 401 also signs out. A
 * request aborted because its view was left is no failure.
 */
export function fail(err: unknown): void {
  if (err instanceof DOMException && err.name === 'AbortError') return;
  if (err instanceof ApiError) {
    showAlert(`${err.message} (${err.code})`);
    if (err.status === 401) window.dispatchEvent(new CustomEvent(SIGNED_OUT));
    return;
  }
  showAlert(err instanceof Error ? err.message : String(err));
}
