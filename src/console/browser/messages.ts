/**
 * Messages: full-text search over the retained messages (payload text and kind), with optional
 * channel, sender and kind filters, newest first; each message id links to its journey.
 */
import { api, type Json, query } from './api.js';
import { type Column, el, field, journeyLink, payloadCell, text, time } from './dom.js';
import { pagedList } from './paged.js';
import { route, type View } from './view.js';

/** The columns of a list of messages (here and in a thread). */
export const MESSAGE_COLUMNS: readonly Column<Json>[] = [
  { header: 'Message', cell: (m) => journeyLink(String(m.message_id)), rowHeader: true },
  { header: 'Channel', cell: (m) => text(m.channel) },
  { header: 'Seq', cell: (m) => text(m.channel_sequence_id), className: 'num' },
  { header: 'Sender', cell: (m) => text(m.sender) },
  { header: 'Kind', cell: (m) => text(m.kind) },
  { header: 'Priority', cell: (m) => text(m.priority) },
  { header: 'Sent', cell: (m) => time(m.timestamp_iso8601 ?? m.created_at) },
  { header: 'Thread', cell: (m) => threadLink(m.thread_id) },
  { header: 'Payload', cell: (m) => payloadCell(m.payload) },
];

function threadLink(id: unknown): Node | string {
  if (typeof id !== 'string' || id === '') return '—';
  return el('a', { href: `#/threads/${encodeURIComponent(id)}`, 'aria-label': `Thread ${id}` }, id);
}

const FILTERS = ['channel', 'sender', 'kind'] as const;

export const messagesView: View = ({ root, params, signal, navigate }) => {
  const q = el('input', { type: 'search', name: 'q', value: params.get('q') ?? '' });
  const inputs = FILTERS.map((name) =>
    el('input', { type: 'text', name, value: params.get(name) ?? '', autocomplete: 'off' }),
  );
  const form = el(
    'form',
    { role: 'search', class: 'filters', 'aria-label': 'Filter messages' },
    field('Search', q),
    ...inputs.map((input, i) => field(label(FILTERS[i]!), input)),
    el('button', { type: 'submit' }, 'Find'),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const fields: Record<string, string> = { q: q.value.trim() };
    FILTERS.forEach((name, i) => {
      fields[name] = inputs[i]!.value.trim();
    });
    navigate(route('messages', fields));
  });
  const list = pagedList<Json>('Messages, newest first', MESSAGE_COLUMNS, async (after) => {
    const fields: Record<string, string | number | null> = { q: params.get('q'), after, limit: 50 };
    for (const name of FILTERS) fields[name] = params.get(name);
    const body = await api('GET', `/v1/messages${query(fields)}`, { signal });
    return { rows: body.messages ?? [], next: body.next_after };
  });
  root.append(el('h2', {}, 'Messages'), form, list.element);
  void list.reload();
  return undefined;
};

const label = (name: string) => name[0]!.toUpperCase() + name.slice(1);
