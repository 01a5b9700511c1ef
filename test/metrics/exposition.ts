/**
 * A strict reader of the Prometheus text format (version 0.0.4, what both programs serve), for
 * the metrics tests: it throws on anything Prometheus' own parser would refuse, and on what it
 * takes but a scrape should not hold (a family split in two, a series twice, a sample before its
 * TYPE, a histogram whose buckets do not add up). promtool, where it is installed, checks the
 * same text again (promtool-accepts-both-expositions.test.ts).
 */

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface Family {
  readonly name: string;
  readonly type: MetricType;
  readonly help: string | undefined;
  readonly samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
/**
 * Go's strconv.ParseFloat as Prometheus reads a value: decimal, exponent, and NaN, Inf and
 * Infinity in any case (prom-client writes `Nan`).
 */
const VALUE = /^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf(?:inity)?|nan)$/i;

/** The families of `text`, by name, in their order; throws naming the line of the first fault. */
export function parseExposition(text: string): Map<string, Family> {
  if (!text.endsWith('\n')) throw new Error('the exposition does not end with a newline');
  const families = new Map<string, Family>();
  const series = new Set<string>();
  /** The families whose TYPE has been read (one without is untyped, and may have none). */
  const typed = new Set<string>();
  let current: Family | undefined;
  const lines = text.slice(0, -1).split('\n');
  lines.forEach((line, i) => {
    const at = (why: string) => new Error(`line ${i + 1}: ${why}: ${JSON.stringify(line)}`);
    if (line === '') return;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (m === null) return; // a comment
      const [, keyword, name, rest] = m as unknown as [string, 'HELP' | 'TYPE', string, string];
      if (!NAME.test(name)) throw at('not a metric name');
      let family = families.get(name);
      if (family !== undefined && family !== current) throw at(`${name} comes back after others`);
      if (family === undefined) {
        family = { name, type: 'untyped', help: undefined, samples: [] };
        families.set(name, family);
      }
      current = family;
      if (keyword === 'HELP') {
        if (family.help !== undefined) throw at('a second HELP');
        if (/\\[^\\n]/.test(rest.replaceAll('\\\\', ''))) throw at('an escape HELP does not take');
        (family as { help: string }).help = rest;
      } else {
        if (typed.has(name)) throw at('a second TYPE');
        if (family.samples.length > 0) throw at('a TYPE after its samples');
        if (!TYPES.has(rest)) throw at('not a metric type');
        (family as { type: MetricType }).type = rest as MetricType;
        typed.add(name);
      }
      return;
    }
    const sample = parseSample(line, at);
    const family = familyOf(sample.name, current);
    if (family === undefined)
      throw at(`${sample.name} is not of the family before it (${current?.name})`);
    const key = `${sample.name}{${Object.entries(sample.labels)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(',')}}`;
    if (series.has(key)) throw at('a series given twice');
    series.add(key);
    family.samples.push(sample);
  });
  for (const family of families.values()) if (family.type === 'histogram') checkHistogram(family);
  return families;
}

/** The family a sample belongs to: the current one, by its name or a suffix its type allows. */
function familyOf(name: string, current: Family | undefined): Family | undefined {
  if (current === undefined) return undefined;
  if (name === current.name && current.type !== 'histogram') return current;
  const suffixes =
    current.type === 'histogram'
      ? ['_bucket', '_sum', '_count']
      : current.type === 'summary'
        ? ['_sum', '_count']
        : [];
  return suffixes.some((s) => name === current.name + s) ? current : undefined;
}

function parseSample(line: string, at: (why: string) => Error): Sample {
  const m = /^([^\s{]+)(\{.*\})? (\S+)(?: (-?\d+))?$/.exec(line);
  if (m === null) throw at('not a sample');
  const [, name, braces, value] = m as unknown as [string, string, string | undefined, string];
  if (!NAME.test(name)) throw at('not a metric name');
  if (!VALUE.test(value)) throw at('not a value');
  const labels: Record<string, string> = {};
  if (braces !== undefined) {
    let rest = braces.slice(1, -1);
    while (rest !== '') {
      const l = /^([^=,"\s]+)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/.exec(rest);
      if (l === null) throw at('labels that do not parse');
      const [all, label, raw] = l as unknown as [string, string, string];
      if (!LABEL_NAME.test(label) || label.startsWith('__')) throw at(`label name ${label}`);
      if (Object.hasOwn(labels, label)) throw at(`label ${label} twice`);
      labels[label] = raw.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
      rest = rest.slice(all.length);
    }
  }
  const n = /inf/i.test(value)
    ? (value.startsWith('-') ? -1 : 1) * Infinity
    : /nan/i.test(value)
      ? Number.NaN
      : Number(value);
  return { name, labels, value: n };
}

/** Per label set: buckets with `le`, cumulative, ending at +Inf, which equals _count. */
function checkHistogram(family: Family): void {
  const groups = new Map<string, { buckets: [number, number][]; count?: number; sum?: number }>();
  for (const s of family.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort(([a], [b]) => a.localeCompare(b)));
    const g = groups.get(key) ?? { buckets: [] };
    groups.set(key, g);
    if (s.name.endsWith('_bucket')) {
      if (le === undefined) throw new Error(`${s.name}: a bucket without le`);
      g.buckets.push([le === '+Inf' ? Infinity : Number(le), s.value]);
    } else if (le !== undefined) throw new Error(`${s.name}: le on a sample that is no bucket`);
    else if (s.name.endsWith('_count')) g.count = s.value;
    else g.sum = s.value;
  }
  for (const [key, g] of groups) {
    const where = `${family.name}${key}`;
    const sorted = [...g.buckets].sort(([a], [b]) => a - b);
    if (sorted.at(-1)?.[0] !== Infinity) throw new Error(`${where}: no +Inf bucket`);
    sorted.forEach(([, n], i) => {
      if (i > 0 && n < sorted[i - 1]![1]) throw new Error(`${where}: buckets not cumulative`);
    });
    if (g.count !== sorted.at(-1)![1]) throw new Error(`${where}: _count is not the +Inf bucket`);
    if (g.sum === undefined) throw new Error(`${where}: no _sum`);
  }
}

/** The value of `name` with exactly these labels (all of its labels), or undefined. */
export function sampleValue(
  families: Map<string, Family>,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  for (const f of families.values())
    for (const s of f.samples)
      if (
        s.name === name &&
        Object.keys(s.labels).length === Object.keys(labels).length &&
        Object.entries(labels).every(([k, v]) => s.labels[k] === v)
      )
        return s.value;
  return undefined;
}
