/**
 * A list read page by page: a table, and a "More" button while the API's `next_after` says there
 * is more. The cursor is the API's and opaque: it goes back as `after` as it came.
 */
import type { Json } from './api.js';
import { type Column, dataTable, el, fail } from './dom.js';

export interface Page<T> {
  readonly rows: readonly T[];
  /** The `after` of the next page; null when there is none. */
  readonly next: Json;
}

export interface PagedList {
  readonly element: HTMLElement;
  /** Reads the first page again (after a change). */
  reload(): Promise<void>;
}

export function pagedList<T>(
  label: string,
  columns: readonly Column<T>[],
  read: (after: Json) => Promise<Page<T>>,
): PagedList {
  const table = dataTable(label, columns);
  const more = el('button', { type: 'button', hidden: true }, 'More');
  let next: Json = null;
  let generation = 0;
  const list: PagedList = {
    element: el('div', { class: 'paged' }, table.element, more),
    reload: () => load(null, true),
  };
  async function load(after: Json, fresh: boolean): Promise<void> {
    const mine = ++generation;
    more.disabled = true;
    try {
      const page = await read(after);
      if (mine !== generation) return; // a newer load won
      if (fresh) table.clear();
      table.append(page.rows);
      // an empty page ends the list, whatever its cursor says
      next = page.rows.length === 0 ? null : page.next;
      more.hidden = next === null || next === undefined;
    } catch (err) {
      fail(err);
    } finally {
      if (mine === generation) more.disabled = false;
    }
  }
  more.addEventListener('click', () => {
    void load(next, false);
  });
  return list;
}
