/**
 * A message's journey: the message, and for each recipient where its copy is now (state, cause,
 * the adapter's sentence that explains it) and every event of its delivery.
 */
import { api, type Json } from './api.js';
import { dataTable, el, fail, text, time } from './dom.js';
import type { View } from './view.js';

/** A `<dl>` of label and value pairs. */
function facts(pairs: readonly [string, Node | string][]): HTMLDListElement {
  return el(
    'dl',
    { class: 'facts' },
    ...pairs.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]),
  );
}

function threadLink(id: unknown): Node | string {
  if (typeof id !== 'string' || id === '') return '—';
  return el('a', { href: `#/threads/${encodeURIComponent(id)}` }, id);
}

function recipient(r: Json): HTMLElement {
  const behind = r.waiting_behind;
  const events = dataTable<Json>(
    `Events of ${text(r.agent)}'s copy`,
    [
      { header: 'At', cell: (e) => time(e.at) },
      { header: 'Event', cell: (e) => text(e.event) },
      { header: 'Attempt', cell: (e) => text(e.attempt), className: 'num' },
      { header: 'Detail', cell: (e) => el('code', { class: 'payload' }, text(e.detail)) },
    ],
    { showCaption: true },
  );
  events.append(Array.isArray(r.events) ? r.events : []);
  return el(
    'section',
    { class: 'recipient', 'aria-label': `Recipient ${text(r.agent)}` },
    el('h4', {}, text(r.agent)),
    el('p', { class: 'explanation' }, text(r.explanation, '')),
    facts([
      ['State', text(r.state)],
      ['Cause', text(r.cause)],
      ['Attempts', text(r.attempts)],
      ['Last poll', time(r.last_poll, 'never')],
      ...(r.reason === null || r.reason === undefined
        ? []
        : ([
            ['Dead-letter reason', text(r.reason)],
            ['Note', text(r.note)],
          ] as [string, string][])),
      ...(behind === null || behind === undefined
        ? []
        : ([
            [
              'Waiting behind',
              el(
                'span',
                {},
                el(
                  'a',
                  { href: `#/journey/${encodeURIComponent(String(behind.message_id))}` },
                  String(behind.message_id),
                ),
                ` (#${text(behind.channel_sequence_id)}, ${text(behind.cause)})`,
              ),
            ],
          ] as [string, Node][])),
    ]),
    events.element,
  );
}

export const journeyView: View = ({ root, arg, signal }) => {
  root.append(el('h2', {}, 'Journey'));
  if (arg === '') {
    root.append(el('p', {}, 'Open a message from Messages or Dead letters to see its journey.'));
    return undefined;
  }
  const body = el('div', { class: 'journey' }, el('p', {}, `Loading ${arg}…`));
  root.append(body);
  api('GET', `/v1/messages/${encodeURIComponent(arg)}/journey`, { signal })
    .then((j: Json) => {
      const m = j.message ?? {};
      const recipients: Json[] = Array.isArray(j.recipients) ? j.recipients : [];
      body.replaceChildren(
        el('h3', {}, 'Message'),
        facts([
          ['Message id', text(m.message_id ?? arg)],
          ['Channel', text(m.channel)],
          ['Sequence', text(m.channel_sequence_id)],
          ['Sender', text(m.sender)],
          ['Kind', text(m.kind)],
          ['Priority', text(m.priority)],
          ['Sent', time(m.timestamp_iso8601 ?? m.created_at)],
          ['Accepted', time(j.accepted_at)],
          ['Thread', threadLink(m.thread_id)],
        ]),
        el('pre', { class: 'payload-full' }, JSON.stringify(m.payload ?? null, null, 2)),
        el('h3', {}, `Recipients (${recipients.length})`),
        ...(j.explanation === undefined
          ? []
          : [el('p', { class: 'explanation' }, text(j.explanation))]),
        ...recipients.map(recipient),
      );
    })
    .catch((err) => {
      body.replaceChildren();
      fail(err);
    });
  return undefined;
};
