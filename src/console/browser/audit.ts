/** Audit: the operators' and alerts_to's acts, oldest first, a page at a time. */
import { api, type Json, query } from './api.js';
import { el, text, time } from './dom.js';
import { pagedList } from './paged.js';
import type { View } from './view.js';

export const auditView: View = ({ root, signal }) => {
  const list = pagedList<Json>(
    'Audit log',
    [
      { header: 'Seq', cell: (e) => text(e.seq), rowHeader: true, className: 'num' },
      { header: 'At', cell: (e) => time(e.at) },
      { header: 'Actor', cell: (e) => text(e.actor) },
      { header: 'Action', cell: (e) => text(e.action) },
      { header: 'Target', cell: (e) => text(e.target) },
      { header: 'Detail', cell: (e) => el('code', { class: 'payload' }, text(e.detail)) },
    ],
    async (after) => {
      const body = await api('GET', `/v1/audit${query({ after, limit: 100 })}`, { signal });
      return { rows: body.entries ?? [], next: body.next_after };
    },
  );
  root.append(el('h2', {}, 'Audit'), list.element);
  void list.reload();
  return undefined;
};
