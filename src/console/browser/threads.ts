/** Threads: one conversation's messages, every channel's, in commit order. */
import { api, type Json, query } from './api.js';
import { el, field } from './dom.js';
import { MESSAGE_COLUMNS } from './messages.js';
import { pagedList } from './paged.js';
import type { View } from './view.js';

export const threadsView: View = ({ root, arg, signal, navigate }) => {
  const input = el('input', { type: 'text', name: 'thread', value: arg, autocomplete: 'off' });
  const form = el(
    'form',
    { class: 'filters', 'aria-label': 'Open a thread' },
    field('Thread id', input),
    el('button', { type: 'submit' }, 'Open'),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const id = input.value.trim();
    if (id !== '') navigate(`#/threads/${encodeURIComponent(id)}`);
  });
  root.append(el('h2', {}, 'Threads'), form);
  if (arg === '') {
    root.append(el('p', {}, 'A thread id is the message id of its first message.'));
    return undefined;
  }
  const list = pagedList<Json>(`Thread ${arg}`, MESSAGE_COLUMNS, async (after) => {
    const path = `/v1/threads/${encodeURIComponent(arg)}/messages${query({ after, limit: 100 })}`;
    const body = await api('GET', path, { signal });
    return { rows: body.messages ?? [], next: body.next_after };
  });
  root.append(list.element);
  void list.reload();
  return undefined;
};
