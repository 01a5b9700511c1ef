/** Channels: each group channel, its members and its last sequence number. */
import { api, type Json } from './api.js';
import { dataTable, el, fail, text } from './dom.js';
import type { View } from './view.js';

export const channelsView: View = ({ root, signal }) => {
  const table = dataTable<Json>('Channels', [
    { header: 'Channel', cell: (c) => text(c.name), rowHeader: true },
    { header: 'Members', cell: (c) => (Array.isArray(c.members) ? c.members.join(', ') : '—') },
    { header: 'Last sequence', cell: (c) => text(c.last_sequence), className: 'num' },
  ]);
  root.append(el('h2', {}, 'Channels'), table.element);
  api('GET', '/v1/channels', { signal })
    .then((body) => table.append(body.channels ?? []))
    .catch(fail);
  return undefined;
};
