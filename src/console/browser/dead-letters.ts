/**
 * Dead letters: the open ones, filtered (reason, recipient, channel, text), and redrive, of the
 * rows ticked or of everything the filter matches. A redrive runs at the adapter in steps; its
 * progress is read every 500 ms until it is done, then the list is read again.
 */
import { api, type Json, query } from './api.js';
import { el, fail, field, journeyLink, payloadCell, text, time } from './dom.js';
import { pagedList } from './paged.js';
import { route, type View } from './view.js';

const REASONS = [
  'max_retries',
  'rejected',
  'evicted',
  'queue_full',
  'overrun',
  'expired',
  'corrupt',
  'integrity',
  'lease_expired',
  'nacked',
] as const;

/** How often a running redrive's progress is read. */
const PROGRESS_MS = 500;
/** A filtered redrive's pace, dead letters a second (the API's default too). */
const REDRIVE_RATE = 100;

const FILTERS = ['reason', 'recipient', 'channel', 'q'] as const;

export const deadLettersView: View = ({ root, params, signal, navigate }) => {
  const q = el('input', { type: 'search', name: 'q', value: params.get('q') ?? '' });
  const reason = el(
    'select',
    { name: 'reason' },
    el('option', { value: '' }, 'any'),
    ...REASONS.map((r) => el('option', { value: r }, r)),
  );
  reason.value = params.get('reason') ?? '';
  const recipient = el('input', { type: 'text', name: 'recipient', autocomplete: 'off' });
  recipient.value = params.get('recipient') ?? '';
  const channel = el('input', { type: 'text', name: 'channel', autocomplete: 'off' });
  channel.value = params.get('channel') ?? '';
  const form = el(
    'form',
    { role: 'search', class: 'filters', 'aria-label': 'Filter dead letters' },
    field('Search', q),
    field('Reason', reason),
    field('Recipient', recipient),
    field('Channel', channel),
    el('button', { type: 'submit' }, 'Find'),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    navigate(
      route('dead-letters', {
        q: q.value.trim(),
        reason: reason.value,
        recipient: recipient.value.trim(),
        channel: channel.value.trim(),
      }),
    );
  });

  // the filter of the list shown (the URL's), not what is typed but not yet searched
  const filter: Record<string, string> = {};
  for (const name of FILTERS) {
    const v = params.get(name)?.trim() ?? '';
    if (v !== '') filter[name] = v;
  }

  /** Dead letter id → its checkbox, for the rows shown. */
  const boxes = new Map<number, HTMLInputElement>();
  const list = pagedList<Json>(
    'Dead letters, oldest first',
    [
      {
        header: 'Select',
        cell: (d) => {
          const id = d.message?.message_id ?? `dead letter ${d.id}`;
          const box = el('input', { type: 'checkbox', 'aria-label': String(id) });
          boxes.set(Number(d.id), box);
          return box;
        },
      },
      {
        header: 'Message',
        cell: (d) => (d.message ? journeyLink(String(d.message.message_id)) : '(quarantined)'),
        rowHeader: true,
      },
      { header: 'Recipient', cell: (d) => text(d.recipient) },
      { header: 'Reason', cell: (d) => text(d.reason) },
      { header: 'Note', cell: (d) => text(d.note) },
      { header: 'Attempts', cell: (d) => text(d.attempts), className: 'num' },
      { header: 'Channel', cell: (d) => text(d.message?.channel) },
      { header: 'Seq', cell: (d) => text(d.message?.channel_sequence_id), className: 'num' },
      { header: 'Kind', cell: (d) => text(d.message?.kind) },
      { header: 'Sender', cell: (d) => text(d.message?.sender) },
      { header: 'Dead-lettered', cell: (d) => time(d.dead_lettered_at) },
      { header: 'Payload', cell: (d) => payloadCell(d.message?.payload) },
    ],
    async (after) => {
      if (after === null) boxes.clear();
      const path = `/v1/dead-letters${query({ ...filter, after, limit: 100 })}`;
      const body = await api('GET', path, { signal });
      return { rows: body.dead_letters ?? [], next: body.next_after };
    },
  );

  const progress = el('progress', {
    max: 1,
    value: 0,
    'aria-label': 'Redrive progress',
    hidden: true,
  });
  const progressText = el('span');
  const status = el('div', { role: 'status', class: 'status' }, progress, progressText);
  const selected = el('button', { type: 'button' }, 'Redrive selected');
  const all = el('button', { type: 'button' }, 'Redrive all matching');
  let timer: ReturnType<typeof setTimeout> | undefined;

  async function redrive(body: unknown): Promise<void> {
    selected.disabled = all.disabled = true;
    try {
      const r = await api('POST', '/v1/dead-letters/redrive', { body, signal });
      if (Number(r.count) === 0) {
        progress.hidden = true;
        progressText.textContent = 'Nothing matched';
        selected.disabled = all.disabled = false;
        return;
      }
      watch(String(r.redrive_id));
    } catch (err) {
      selected.disabled = all.disabled = false;
      fail(err);
    }
  }

  function watch(id: string): void {
    const step = async () => {
      try {
        const r = await api('GET', `/v1/redrives/${encodeURIComponent(id)}`, { signal });
        const total = Number(r.total);
        progress.hidden = false;
        progress.max = Math.max(total, 1);
        progress.value = Number(r.done) + Number(r.skipped);
        progressText.textContent = `${r.done}/${total} (skipped ${r.skipped})`;
        if (r.state === 'done') {
          selected.disabled = all.disabled = false;
          await list.reload();
          return;
        }
        timer = setTimeout(step, PROGRESS_MS);
      } catch (err) {
        selected.disabled = all.disabled = false;
        fail(err);
      }
    };
    void step();
  }

  selected.addEventListener('click', () => {
    const ids = [...boxes].filter(([, box]) => box.checked).map(([id]) => id);
    if (ids.length === 0) {
      progress.hidden = true;
      progressText.textContent = 'Select the dead letters to redrive first.';
      return;
    }
    void redrive({ ids });
  });
  all.addEventListener('click', () => {
    void redrive({ filter, rate: REDRIVE_RATE });
  });

  root.append(
    el('h2', {}, 'Dead letters'),
    form,
    el('div', { class: 'actions' }, selected, all, status),
    list.element,
  );
  void list.reload();
  return () => clearTimeout(timer);
};
