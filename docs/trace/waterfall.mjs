#!/usr/bin/env node
/**
 * A trace waterfall as an SVG, from spans as the test OTLP receiver keeps them
 * (test/helpers/otlp-receiver.ts, ReceivedSpan), with startNs/endNs (and events' timeNs) as
 * decimal strings so that they fit in JSON:
 *
 *   node docs/trace/waterfall.mjs spans.json out.svg     (no out.svg: the SVG to stdout)
 *
 * or `import { renderWaterfall } from './waterfall.mjs'` and `renderWaterfall(spans)`.
 *
 * One row per span, as a tree: children under their parent by start time; a span whose parent is
 * not in the set is a root. The traces drawn first are those whose spans link to no other trace of
 * the set; a trace that links to one of them (a consumer's link to the producer, say) is drawn
 * after, marked "linked". Bars share one time axis (ms from the earliest start), coloured by
 * service; a dashed arrow goes from a link's target span to the span that links to it, and the
 * row says "↪ linked to <service · name>". No dependencies.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

// --- layout (px) -------------------------------------------------------------------------------
const WIDTH = 1100;
const PAD = 20;
const LABEL_W = 360; // the label column: "service · name", indented by depth
const INDENT = 14;
const BAR_X0 = PAD + LABEL_W + 10;
const BAR_X1 = WIDTH - PAD - 150; // room on the right for the duration and notes of late bars
const ROW_H = 24;
const BAR_H = 12;
const HEADER_H = 22; // a trace's header row
const TITLE_H = 56;
const AXIS_H = 28;
const FONT = 'font-family="sans-serif"';
/** A white outline under text, to keep it readable where a connector or grid line crosses it. */
const HALO = 'paint-order="stroke" stroke="#fff" stroke-width="3" stroke-linejoin="round"';

/** Service colours (Tableau 10, then repeated darker). */
const PALETTE = [
  '#4e79a7',
  '#f28e2b',
  '#59a14f',
  '#e15759',
  '#76b7b2',
  '#edc948',
  '#b07aa1',
  '#ff9da7',
  '#9c755f',
  '#bab0ac',
];

const KINDS = ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'];

const esc = (s) =>
  String(s)
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;');

/** A time in ns (decimal string, number or bigint) as a bigint. */
function toNs(v) {
  if (typeof v === 'bigint') return v;
  if (typeof v === 'number') return BigInt(Math.round(v));
  if (typeof v === 'string' && /^-?\d+$/.test(v.trim())) return BigInt(v.trim());
  return 0n;
}

/** A duration in ns as milliseconds, with the decimals its size calls for. */
function fmtMs(ns) {
  const ms = Number(ns) / 1e6;
  const abs = Math.abs(ms);
  const digits = abs === 0 || abs >= 100 ? 0 : abs >= 10 ? 1 : abs >= 1 ? 2 : 3;
  return `${ms.toFixed(digits)} ms`;
}

/** A tick step, ms, of 1, 2 or 5 × 10^k giving about `target` ticks over `spanMs`. */
function tickStep(spanMs, target = 8) {
  const raw = spanMs / target;
  const pow = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (raw <= m * pow) return m * pow;
  return 10 * pow;
}

/** Text cut to about `px` pixels at `size` (an average glyph of 0.56em), with an ellipsis. */
function clip(text, px, size = 12) {
  const max = Math.floor(px / (size * 0.56));
  return text.length <= max ? text : `${text.slice(0, Math.max(1, max - 1))}…`;
}

const key = (traceId, spanId) => `${traceId}/${spanId}`;

/** Attributes as "k=v" lines, for a tooltip. */
const attrLines = (attrs) =>
  Object.entries(attrs ?? {}).map(
    ([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`,
  );

/**
 * The spans in drawing order: [{ span, depth, trace, linked }], traces grouped, each as a tree.
 * Spans are normalised: times as bigints, kind/status/attributes defaulted.
 */
function order(input) {
  const seen = new Set();
  const spans = [];
  for (const s of input) {
    const k = key(s.traceId, s.spanId);
    if (seen.has(k)) continue; // the same span received twice
    seen.add(k);
    spans.push({
      ...s,
      service: s.service || '(unknown service)',
      startNs: toNs(s.startNs),
      endNs: toNs(s.endNs),
      kind: Number(s.kind ?? 0),
      events: (s.events ?? []).map((e) => ({ ...e, timeNs: toNs(e.timeNs) })),
      links: s.links ?? [],
      status: s.status ?? { code: 0 },
    });
  }
  const byKey = new Map(spans.map((s) => [key(s.traceId, s.spanId), s]));
  const traces = new Map();
  for (const s of spans) {
    if (!traces.has(s.traceId)) traces.set(s.traceId, []);
    traces.get(s.traceId).push(s);
  }
  const byStart = (a, b) =>
    a.startNs < b.startNs ? -1 : a.startNs > b.startNs ? 1 : a.name.localeCompare(b.name);
  const traceStart = new Map(); // a trace's earliest start (bigints: no Math.min)
  for (const s of spans) {
    const m = traceStart.get(s.traceId);
    if (m === undefined || s.startNs < m) traceStart.set(s.traceId, s.startNs);
  }
  const ids = [...traces.keys()].sort((a, b) => {
    const d = traceStart.get(a) - traceStart.get(b);
    return d < 0n ? -1 : d > 0n ? 1 : 0;
  });
  // a trace is "linked" when one of its spans links to a span of another trace in the set
  const linksOut = (id) =>
    traces
      .get(id)
      .some((s) => s.links.some((l) => l.traceId !== id && byKey.has(key(l.traceId, l.spanId))));
  let primary = ids.filter((id) => !linksOut(id));
  if (primary.length === 0 && ids.length > 0) primary = [ids[0]]; // links in a circle
  const rest = ids.filter((id) => !primary.includes(id));

  const rows = [];
  for (const [id, linked] of [
    ...primary.map((id) => [id, false]),
    ...rest.map((id) => [id, true]),
  ]) {
    const members = traces.get(id);
    const children = new Map();
    const roots = [];
    for (const s of members) {
      const parent = s.parentSpanId && byKey.get(key(id, s.parentSpanId));
      if (parent && parent !== s) {
        if (!children.has(parent)) children.set(parent, []);
        children.get(parent).push(s);
      } else roots.push(s);
    }
    const placed = new Set();
    const visit = (s, depth) => {
      if (placed.has(s)) return; // a cycle of parents: each span once
      placed.add(s);
      rows.push({ span: s, depth, trace: id, linked });
      for (const c of (children.get(s) ?? []).sort(byStart)) visit(c, depth + 1);
    };
    for (const r of roots.sort(byStart)) visit(r, 0);
    for (const s of members.sort(byStart)) visit(s, 0); // spans only reachable through a cycle
  }
  return { rows, traceCount: ids.length, byKey };
}

/** The waterfall of `spans` (ReceivedSpan-shaped, times as decimal strings) as an SVG document. */
export function renderWaterfall(spans) {
  const list = Array.isArray(spans) ? spans : (spans?.spans ?? []);
  const { rows, traceCount, byKey } = order(list);
  if (rows.length === 0) {
    return `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="80" viewBox="0 0 ${WIDTH} 80">
  <rect width="100%" height="100%" fill="#fff"/>
  <text x="${PAD}" y="45" ${FONT} font-size="14" fill="#555">No spans.</text>
</svg>
`;
  }

  // time axis
  let t0 = rows[0].span.startNs;
  let t1 = rows[0].span.endNs;
  for (const { span } of rows) {
    if (span.startNs < t0) t0 = span.startNs;
    if (span.endNs > t1) t1 = span.endNs;
  }
  const totalMs = Math.max(Number(t1 - t0) / 1e6, 0.01);
  const step = tickStep(totalMs);
  const axisMs = Math.ceil(totalMs / step - 1e-9) * step; // the axis ends on a tick
  const xOf = (ns) => BAR_X0 + (Number(ns - t0) / 1e6 / axisMs) * (BAR_X1 - BAR_X0);

  // services, by first appearance
  const services = [];
  for (const { span } of rows) if (!services.includes(span.service)) services.push(span.service);
  const colour = (svc) => PALETTE[services.indexOf(svc) % PALETTE.length];

  // vertical positions: a header row before each trace, then its spans
  let y = TITLE_H + AXIS_H;
  const yOf = new Map(); // span → its row's top
  const headers = [];
  let current;
  for (const row of rows) {
    if (row.trace !== current) {
      current = row.trace;
      headers.push({ y, trace: row.trace, linked: row.linked, count: 0 });
      y += HEADER_H;
    }
    headers.at(-1).count++;
    yOf.set(row.span, y);
    y += ROW_H;
  }
  const rowsEnd = y;
  const legendY = rowsEnd + 24;
  const legendItems = [
    ...services.map((s) => ({ kind: 'service', label: s })),
    { kind: 'event', label: 'event' },
    { kind: 'link', label: 'link (from its target to the span linking it)' },
    { kind: 'error', label: 'status error' },
  ];
  // legend laid out left to right, wrapping
  const legend = [];
  let lx = PAD;
  let ly = legendY + 20;
  for (const item of legendItems) {
    const w = 26 + item.label.length * 6.1 + 24;
    if (lx + w > WIDTH - PAD) {
      lx = PAD;
      ly += 20;
    }
    legend.push({ ...item, x: lx, y: ly });
    lx += w;
  }
  const height = ly + 24;

  const out = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" ${FONT} font-size="12">`,
    '<defs>',
    '  <marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto-start-reverse">',
    '    <path d="M0,0 L8,4 L0,8 z" fill="#666"/>',
    '  </marker>',
    '</defs>',
    `<rect width="100%" height="100%" fill="#fff"/>`,
  );

  // title
  const roots = rows.filter((r) => r.depth === 0).length;
  out.push(
    `<text x="${PAD}" y="28" font-size="18" font-weight="bold" fill="#222">Trace waterfall</text>`,
    `<text x="${PAD}" y="46" fill="#666">${rows.length} span${rows.length === 1 ? '' : 's'} in ${traceCount} trace${traceCount === 1 ? '' : 's'} (${roots} root${roots === 1 ? '' : 's'}), ${esc(fmtMs(t1 - t0))} from first start to last end</text>`,
  );

  // zebra rows and trace headers
  for (const [i, row] of rows.entries()) {
    const ry = yOf.get(row.span);
    if (i % 2 === 1)
      out.push(
        `<rect x="${PAD}" y="${ry}" width="${WIDTH - 2 * PAD}" height="${ROW_H}" fill="#f7f8fa"/>`,
      );
  }
  for (const h of headers) {
    out.push(
      `<rect x="${PAD}" y="${h.y}" width="${WIDTH - 2 * PAD}" height="${HEADER_H}" fill="${h.linked ? '#fdf6e3' : '#eef2f7'}"/>`,
      `<text x="${PAD + 6}" y="${h.y + 15}" font-weight="bold" fill="#333">${h.linked ? 'linked trace' : 'trace'} <tspan font-family="monospace" font-weight="normal">${esc(h.trace)}</tspan><tspan font-weight="normal" fill="#666">  · ${h.count} span${h.count === 1 ? '' : 's'}</tspan></text>`,
    );
    if (h.linked)
      out.push(
        `<rect x="${WIDTH - PAD - 58}" y="${h.y + 4}" width="52" height="14" rx="7" fill="#b58900"/>`,
        `<text x="${WIDTH - PAD - 32}" y="${h.y + 15}" font-size="10" fill="#fff" text-anchor="middle">linked</text>`,
      );
  }

  // axis: ticks, labels and grid lines down through the rows
  const axisY = TITLE_H + AXIS_H - 6;
  out.push(
    `<line x1="${BAR_X0}" y1="${axisY}" x2="${BAR_X1}" y2="${axisY}" stroke="#999"/>`,
    `<text x="${PAD}" y="${axisY - 4}" fill="#666">service · span</text>`,
  );
  const tickDigits = step >= 1 ? 0 : Math.min(3, Math.ceil(-Math.log10(step)));
  for (let i = 0; i * step <= axisMs + 1e-9; i++) {
    const ms = i * step;
    const x = BAR_X0 + (ms / axisMs) * (BAR_X1 - BAR_X0);
    out.push(
      `<line x1="${x.toFixed(1)}" y1="${axisY}" x2="${x.toFixed(1)}" y2="${rowsEnd}" stroke="#e3e6ea"/>`,
      `<line x1="${x.toFixed(1)}" y1="${axisY - 4}" x2="${x.toFixed(1)}" y2="${axisY}" stroke="#999"/>`,
      `<text x="${x.toFixed(1)}" y="${axisY - 8}" fill="#555" text-anchor="middle" font-size="11">${ms.toFixed(tickDigits)} ms</text>`,
    );
  }

  // link connectors, under the bars and text: from the end of the target's bar to the start of
  // the bar of the span that links to it
  const links = rows.flatMap(({ span }) =>
    span.links
      .map((l) => byKey.get(key(l.traceId, l.spanId)))
      .filter((target) => target !== undefined)
      .map((target) => ({ from: target, to: span })),
  );
  for (const { from, to } of links) {
    const fy = yOf.get(from) + ROW_H / 2;
    const ty = yOf.get(to) + ROW_H / 2;
    const fx = Math.max(xOf(from.endNs), xOf(from.startNs) + 2);
    const tx = xOf(to.startNs) - 1;
    const bend = Math.max(Math.abs(ty - fy) / 2, 12);
    const dir = ty >= fy ? 1 : -1;
    out.push(
      `<path d="M${fx.toFixed(1)},${fy + (dir * BAR_H) / 2} C${fx.toFixed(1)},${(fy + dir * bend).toFixed(1)} ${(tx - 14).toFixed(1)},${(ty - dir * bend).toFixed(1)} ${tx.toFixed(1)},${ty}" fill="none" stroke="#666" stroke-width="1.2" stroke-dasharray="4 3" marker-end="url(#arrow)"><title>${esc(`${to.service} · ${to.name} links to ${from.service} · ${from.name}`)}</title></path>`,
    );
  }

  // bars, labels, events
  for (const row of rows) {
    const s = row.span;
    const ry = yOf.get(s);
    const mid = ry + ROW_H / 2;
    const x0 = xOf(s.startNs);
    const x1 = Math.max(xOf(s.endNs), x0 + 2);
    const fill = colour(s.service);
    const error = s.status.code === 2;
    const labelX = PAD + 6 + row.depth * INDENT;
    const label = clip(`${s.service} · ${s.name}`, PAD + LABEL_W - labelX);
    const kind = KINDS[s.kind] ?? String(s.kind);
    const tip = [
      `${s.service} · ${s.name}`,
      `${kind}, ${fmtMs(s.endNs - s.startNs)}, from +${fmtMs(s.startNs - t0)}`,
      `trace ${s.traceId} span ${s.spanId}${s.parentSpanId ? ` parent ${s.parentSpanId}` : ''}`,
      ...(s.status.code
        ? [
            `status ${['unset', 'ok', 'error'][s.status.code] ?? s.status.code}${s.status.message ? `: ${s.status.message}` : ''}`,
          ]
        : []),
      ...attrLines(s.attributes),
    ].join('\n');
    if (row.depth > 0)
      out.push(
        `<path d="M${labelX - INDENT + 4},${ry} V${mid} H${labelX - 2}" fill="none" stroke="#c5cad1"/>`,
      );
    out.push(
      `<g><title>${esc(tip)}</title>`,
      `  <text x="${labelX}" y="${mid + 4}" ${HALO} fill="#222">${esc(label)}</text>`,
      `  <rect x="${x0.toFixed(1)}" y="${mid - BAR_H / 2}" width="${(x1 - x0).toFixed(1)}" height="${BAR_H}" rx="2" fill="${fill}"${error ? ' stroke="#c00" stroke-width="2"' : ''}/>`,
    );
    for (const e of s.events) {
      const ex = xOf(e.timeNs);
      out.push(
        `  <path d="M${ex.toFixed(1)},${mid - 5} l4,5 l-4,5 l-4,-5 z" fill="#fff" stroke="#333" stroke-width="1"><title>${esc([`event ${e.name} at +${fmtMs(e.timeNs - t0)}`, ...attrLines(e.attributes)].join('\n'))}</title></path>`,
      );
    }
    // after the bar: duration, error, links
    let note = fmtMs(s.endNs - s.startNs);
    if (error) note += s.status.message ? `  ⚠ ${s.status.message}` : '  ⚠ error';
    const linkNotes = [];
    for (const l of s.links) {
      const target = byKey.get(key(l.traceId, l.spanId));
      if (target) {
        linkNotes.push(`↪ linked to ${target.name}`);
      } else linkNotes.push(`↪ linked to ${l.traceId.slice(0, 8)}…/${l.spanId} (not here)`);
    }
    const noteText = [note, ...linkNotes].join('   ');
    const noteW = noteText.length * 6.4;
    const right = x1 + 6 + noteW <= WIDTH - PAD;
    const nx = right ? x1 + 6 : Math.max(BAR_X0, x0 - 6);
    out.push(
      `  <text x="${nx.toFixed(1)}" y="${mid + 4}" font-size="11" fill="${error ? '#b00' : '#444'}"${right ? '' : ' text-anchor="end"'}>${esc(note)}${linkNotes.map((n) => `<tspan fill="#666" font-style="italic">   ${esc(n)}</tspan>`).join('')}</text>`,
      '</g>',
    );
  }

  // legend
  out.push(`<line x1="${PAD}" y1="${legendY}" x2="${WIDTH - PAD}" y2="${legendY}" stroke="#ddd"/>`);
  for (const item of legend) {
    const cy = item.y - 4;
    if (item.kind === 'service')
      out.push(
        `<rect x="${item.x}" y="${cy - 6}" width="20" height="12" rx="2" fill="${colour(item.label)}"/>`,
      );
    else if (item.kind === 'event')
      out.push(
        `<path d="M${item.x + 10},${cy - 5} l4,5 l-4,5 l-4,-5 z" fill="#fff" stroke="#333"/>`,
      );
    else if (item.kind === 'link')
      out.push(
        `<path d="M${item.x},${cy} H${item.x + 18}" stroke="#666" stroke-width="1.2" stroke-dasharray="4 3" marker-end="url(#arrow)"/>`,
      );
    else
      out.push(
        `<rect x="${item.x + 1}" y="${cy - 5}" width="18" height="10" rx="2" fill="#fff" stroke="#c00" stroke-width="2"/>`,
      );
    out.push(`<text x="${item.x + 26}" y="${item.y}" fill="#333">${esc(item.label)}</text>`);
  }
  out.push('</svg>', '');
  return out.join('\n');
}

// --- command line ------------------------------------------------------------------------------
if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const [input, output] = process.argv.slice(2);
  if (!input) {
    process.stderr.write('usage: node docs/trace/waterfall.mjs spans.json [out.svg]\n');
    process.exit(2);
  }
  const svg = renderWaterfall(JSON.parse(readFileSync(input, 'utf8')));
  if (output) writeFileSync(output, svg);
  else process.stdout.write(svg);
}
