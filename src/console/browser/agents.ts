/**
 * Agents: each agent's queue, leases, dead letters, stall and pause, read again every 2 s while
 * shown (the contract asks for at least every 5 s; 2 s keeps a pause's effect visible at once
 * for the price of one small GET a tab). Rows are updated in place, so a button being pressed
 * is not replaced under the pointer.
 */
import { api, type Json } from './api.js';
import { dataTable, el, fail, text, time } from './dom.js';
import type { View } from './view.js';

const REFRESH_MS = 2000;

interface Row {
  readonly cells: HTMLTableCellElement[];
  readonly button: HTMLButtonElement;
  paused: boolean;
}

const yesNo = (v: unknown) => (v === true ? 'yes' : 'no');

/** The shown columns, in order (the button's column comes last). */
const COLUMNS: readonly [string, (a: Json) => string][] = [
  ['Agent', (a) => text(a.id)],
  ['Role', (a) => text(a.role)],
  ['Last poll', (a) => time(a.last_poll, 'never')],
  ['Pending', (a) => text(a.pending)],
  ['Critical', (a) => text(a.critical_pending)],
  ['Leased', (a) => text(a.leased)],
  ['Dead letters', (a) => text(a.dead_letters)],
  ['Stalled', (a) => yesNo(a.stalled)],
  ['Paused', (a) => yesNo(a.paused)],
];

export const agentsView: View = ({ root, signal }) => {
  const table = dataTable<Json>('Agents', [
    ...COLUMNS.map(([header], i) => ({
      header,
      cell: () => '',
      rowHeader: i === 0,
      className: i >= 3 && i <= 6 ? 'num' : undefined,
    })),
    { header: 'Deliveries', cell: () => el('button', { type: 'button' }) },
  ]);
  const rows = new Map<string, Row>();
  // at a phone's width the button's column stays in view (console.css)
  table.element.classList.add('agents');
  root.append(el('h2', {}, 'Agents'), table.element);

  async function toggle(id: string): Promise<void> {
    const row = rows.get(id)!;
    row.button.disabled = true;
    try {
      const act = row.paused ? 'resume' : 'pause';
      await api('POST', `/v1/agents/${encodeURIComponent(id)}/${act}`, { signal });
      await refresh();
    } catch (err) {
      fail(err);
    } finally {
      row.button.disabled = false;
    }
  }

  function show(agents: readonly Json[]): void {
    for (const a of agents) {
      const id = String(a.id);
      let row = rows.get(id);
      if (row === undefined) {
        const [tr] = table.append([a]);
        const cells = [...tr!.cells];
        const button = cells[cells.length - 1]!.querySelector('button')!;
        button.addEventListener('click', () => void toggle(id));
        row = { cells, button, paused: false };
        rows.set(id, row);
      }
      COLUMNS.forEach(([, value], i) => {
        const v = value(a);
        if (row.cells[i]!.textContent !== v) row.cells[i]!.textContent = v;
      });
      row.paused = a.paused === true;
      const label = row.paused ? 'Resume' : 'Pause';
      if (row.button.textContent !== label) row.button.textContent = label;
    }
  }

  // only the latest read is shown: one started before a pause must not undo its row
  let latest = 0;
  async function refresh(): Promise<void> {
    const mine = ++latest;
    const body = await api('GET', '/v1/agents', { signal });
    if (mine === latest) show(body.agents ?? []);
  }
  const tick = () => refresh().catch(fail);
  void tick();
  const timer = setInterval(tick, REFRESH_MS);
  return () => clearInterval(timer);
};
