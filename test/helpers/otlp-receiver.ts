/**
 * A real OTLP/HTTP trace receiver for tests, on 127.0.0.1 and a free port: what an OpenTelemetry
 * exporter sends to `url + '/v1/traces'` is decoded into plain spans, in arrival order. Both
 * encodings of ExportTraceServiceRequest are read: protobuf (application/x-protobuf, decoded here
 * from the wire format, no protobuf library) and OTLP/JSON (application/json, as the JS exporter
 * writes it: hex ids, times as strings or numbers, enums as numbers), either one gzipped or not.
 * Each request is answered 200 with an empty ExportTraceServiceResponse; another path or method
 * is answered 404, another content type or encoding 415, a body that does not decode 400.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

export interface ReceivedSpan {
  /** Lowercase hex. */
  traceId: string;
  spanId: string;
  /** Absent when the span is a root (an empty parent_span_id). */
  parentSpanId?: string;
  name: string;
  /** OTLP SpanKind: 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  startNs: bigint;
  endNs: bigint;
  /** string | number | boolean | arrays of them; also bigint (an int64 beyond 2^53), Uint8Array, objects (kvlist). */
  attributes: Record<string, unknown>;
  events: { name: string; timeNs: bigint; attributes: Record<string, unknown> }[];
  links: {
    traceId: string;
    spanId: string;
    traceState?: string;
    attributes: Record<string, unknown>;
  }[];
  traceState?: string;
  /** OTLP StatusCode: 0 unset, 1 ok, 2 error. */
  status: { code: number; message?: string };
  /** The resource's service.name ('' when it has none). */
  service: string;
  resource: Record<string, unknown>;
  /** The instrumentation scope's name. */
  scope: string;
  protocol: 'protobuf' | 'json';
}

export interface OtlpReceiver {
  /** http://127.0.0.1:PORT, no path: exporters send to url + '/v1/traces'. */
  readonly url: string;
  /** Everything received so far, in arrival order. */
  readonly spans: ReceivedSpan[];
  /**
   * Resolves with the spans once pred(spans) is true; rejects after timeoutMs (default 20000)
   * with a message listing span names received. Checks on each arrival, no polling sleep.
   */
  waitFor(pred: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number): Promise<ReceivedSpan[]>;
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// Protobuf wire format

/** A protobuf message's bytes, read field by field. */
class Reader {
  pos = 0;
  constructor(readonly buf: Uint8Array) {}

  get done(): boolean {
    return this.pos >= this.buf.length;
  }

  /** A base-128 varint, up to 64 bits (10 bytes), unsigned. */
  varint(): bigint {
    let result = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (this.pos >= this.buf.length) throw new Error('protobuf: truncated varint');
      const b = this.buf[this.pos++]!;
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return BigInt.asUintN(64, result);
    }
    throw new Error('protobuf: varint longer than 10 bytes');
  }

  /** A varint that must fit a JS number (lengths, tags, enums, uint32). */
  uint(): number {
    const v = this.varint();
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`protobuf: value ${v} too large`);
    return Number(v);
  }

  private take(n: number): Uint8Array {
    if (this.pos + n > this.buf.length) throw new Error('protobuf: truncated field');
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  fixed64(): bigint {
    const b = this.take(8);
    return new DataView(b.buffer, b.byteOffset, 8).getBigUint64(0, true);
  }

  fixed32(): number {
    const b = this.take(4);
    return new DataView(b.buffer, b.byteOffset, 4).getUint32(0, true);
  }

  double(): number {
    const b = this.take(8);
    return new DataView(b.buffer, b.byteOffset, 8).getFloat64(0, true);
  }

  bytes(): Uint8Array {
    return this.take(this.uint());
  }

  string(): string {
    return new TextDecoder('utf-8', { fatal: true }).decode(this.bytes());
  }

  /** The next field's number and wire type; undefined at the end. */
  tag(): { field: number; wire: number } | undefined {
    if (this.done) return undefined;
    const t = this.uint();
    const field = Math.floor(t / 8);
    if (field === 0) throw new Error('protobuf: field number 0');
    return { field, wire: t & 7 };
  }

  /** Passes over a field not read (unknown, or read as something else). */
  skip(wire: number): void {
    switch (wire) {
      case 0:
        this.varint();
        return;
      case 1:
        this.take(8);
        return;
      case 2:
        this.take(this.uint());
        return;
      case 5:
        this.take(4);
        return;
      default:
        throw new Error(`protobuf: unsupported wire type ${wire}`);
    }
  }
}

/** Wire types. */
const VARINT = 0;
const I64 = 1;
const LEN = 2;
const I32 = 5;

/**
 * Reads a message: `on(field, wire, r)` reads the fields it knows and answers true; the others
 * (and known fields sent with an unexpected wire type) are skipped.
 */
function readMessage(
  buf: Uint8Array,
  on: (field: number, wire: number, r: Reader) => boolean,
): void {
  const r = new Reader(buf);
  for (let t = r.tag(); t !== undefined; t = r.tag()) {
    if (!on(t.field, t.wire, r)) r.skip(t.wire);
  }
}

const hex = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.length).toString('hex');

/** An int64 as a number when it is safe, else as a bigint. */
const int64 = (v: bigint): number | bigint => {
  const s = BigInt.asIntN(64, v);
  return s >= BigInt(Number.MIN_SAFE_INTEGER) && s <= BigInt(Number.MAX_SAFE_INTEGER)
    ? Number(s)
    : s;
};

/** AnyValue; undefined when no value is set. */
function pbAnyValue(buf: Uint8Array): unknown {
  let value: unknown;
  readMessage(buf, (field, wire, r) => {
    if (field === 1 && wire === LEN) value = r.string();
    else if (field === 2 && wire === VARINT) value = r.varint() !== 0n;
    else if (field === 3 && wire === VARINT) value = int64(r.varint());
    else if (field === 4 && wire === I64) value = r.double();
    else if (field === 5 && wire === LEN) {
      const values: unknown[] = [];
      readMessage(r.bytes(), (f, w, rr) => {
        if (f !== 1 || w !== LEN) return false;
        values.push(pbAnyValue(rr.bytes()));
        return true;
      });
      value = values;
    } else if (field === 6 && wire === LEN) value = pbKeyValues(r.bytes(), 1);
    else if (field === 7 && wire === LEN) value = new Uint8Array(r.bytes());
    else return false;
    return true;
  });
  return value;
}

/** KeyValue{key=1; value=2}. */
function pbKeyValue(buf: Uint8Array): [string, unknown] {
  let key = '';
  let value: unknown;
  readMessage(buf, (field, wire, r) => {
    if (field === 1 && wire === LEN) key = r.string();
    else if (field === 2 && wire === LEN) value = pbAnyValue(r.bytes());
    else return false;
    return true;
  });
  return [key, value];
}

/** The repeated KeyValue field `attrField` of a message, as a record. */
function pbKeyValues(buf: Uint8Array, attrField: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  readMessage(buf, (field, wire, r) => {
    if (field !== attrField || wire !== LEN) return false;
    const [k, v] = pbKeyValue(r.bytes());
    out[k] = v;
    return true;
  });
  return out;
}

type Event = ReceivedSpan['events'][number];
type Link = ReceivedSpan['links'][number];
type SpanFields = Omit<ReceivedSpan, 'service' | 'resource' | 'scope' | 'protocol'>;

function pbEvent(buf: Uint8Array): Event {
  const e: Event = { name: '', timeNs: 0n, attributes: {} };
  readMessage(buf, (field, wire, r) => {
    if (field === 1 && wire === I64) e.timeNs = r.fixed64();
    else if (field === 2 && wire === LEN) e.name = r.string();
    else if (field === 3 && wire === LEN) {
      const [k, v] = pbKeyValue(r.bytes());
      e.attributes[k] = v;
    } else return false;
    return true;
  });
  return e;
}

function pbLink(buf: Uint8Array): Link {
  const l: Link = { traceId: '', spanId: '', attributes: {} };
  readMessage(buf, (field, wire, r) => {
    if (field === 1 && wire === LEN) l.traceId = hex(r.bytes());
    else if (field === 2 && wire === LEN) l.spanId = hex(r.bytes());
    else if (field === 3 && wire === LEN) {
      const s = r.string();
      if (s !== '') l.traceState = s;
    } else if (field === 4 && wire === LEN) {
      const [k, v] = pbKeyValue(r.bytes());
      l.attributes[k] = v;
    } else return false;
    return true;
  });
  return l;
}

function pbStatus(buf: Uint8Array): ReceivedSpan['status'] {
  const s: ReceivedSpan['status'] = { code: 0 };
  readMessage(buf, (field, wire, r) => {
    if (field === 2 && wire === LEN) {
      const m = r.string();
      if (m !== '') s.message = m;
    } else if (field === 3 && wire === VARINT) s.code = r.uint();
    else return false;
    return true;
  });
  return s;
}

function pbSpan(buf: Uint8Array): SpanFields {
  const s: SpanFields = {
    traceId: '',
    spanId: '',
    name: '',
    kind: 0,
    startNs: 0n,
    endNs: 0n,
    attributes: {},
    events: [],
    links: [],
    status: { code: 0 },
  };
  readMessage(buf, (field, wire, r) => {
    if (field === 1 && wire === LEN) s.traceId = hex(r.bytes());
    else if (field === 2 && wire === LEN) s.spanId = hex(r.bytes());
    else if (field === 3 && wire === LEN) {
      const ts = r.string();
      if (ts !== '') s.traceState = ts;
    } else if (field === 4 && wire === LEN) {
      const p = r.bytes();
      if (p.length > 0) s.parentSpanId = hex(p);
    } else if (field === 5 && wire === LEN) s.name = r.string();
    else if (field === 6 && wire === VARINT) s.kind = r.uint();
    else if (field === 7 && wire === I64) s.startNs = r.fixed64();
    else if (field === 8 && wire === I64) s.endNs = r.fixed64();
    else if (field === 9 && wire === LEN) {
      const [k, v] = pbKeyValue(r.bytes());
      s.attributes[k] = v;
    } else if (field === 11 && wire === LEN) s.events.push(pbEvent(r.bytes()));
    else if (field === 13 && wire === LEN) s.links.push(pbLink(r.bytes()));
    else if (field === 15 && wire === LEN) s.status = pbStatus(r.bytes());
    else if (field === 16 && wire === I32)
      r.fixed32(); // flags: read, not kept
    else return false;
    return true;
  });
  return s;
}

/** InstrumentationScope{name=1; version=2; attributes=3}: its name. */
function pbScopeName(buf: Uint8Array): string {
  let name = '';
  readMessage(buf, (field, wire, r) => {
    if (field !== 1 || wire !== LEN) return false;
    name = r.string();
    return true;
  });
  return name;
}

/** ExportTraceServiceRequest → spans. */
export function decodeProtobufRequest(buf: Uint8Array): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  readMessage(buf, (field, wire, r) => {
    if (field !== 1 || wire !== LEN) return false;
    // ResourceSpans{resource=1; scope_spans=2; schema_url=3}: the resource may follow the spans
    let resource: Record<string, unknown> = {};
    const scoped: { scope: string; spans: SpanFields[] }[] = [];
    readMessage(r.bytes(), (f, w, rr) => {
      if (f === 1 && w === LEN) resource = pbKeyValues(rr.bytes(), 1);
      else if (f === 2 && w === LEN) {
        // ScopeSpans{scope=1; spans=2; schema_url=3}
        const ss = { scope: '', spans: [] as SpanFields[] };
        readMessage(rr.bytes(), (f2, w2, r2) => {
          if (f2 === 1 && w2 === LEN) ss.scope = pbScopeName(r2.bytes());
          else if (f2 === 2 && w2 === LEN) ss.spans.push(pbSpan(r2.bytes()));
          else return false;
          return true;
        });
        scoped.push(ss);
      } else return false;
      return true;
    });
    for (const { scope, spans } of scoped)
      for (const s of spans) out.push(finish(s, resource, scope, 'protobuf'));
    return true;
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// OTLP/JSON

// biome-ignore lint/suspicious/noExplicitAny: a parsed JSON body, checked field by field
type J = any;

const SPAN_KINDS = [
  'SPAN_KIND_UNSPECIFIED',
  'SPAN_KIND_INTERNAL',
  'SPAN_KIND_SERVER',
  'SPAN_KIND_CLIENT',
  'SPAN_KIND_PRODUCER',
  'SPAN_KIND_CONSUMER',
];
const STATUS_CODES = ['STATUS_CODE_UNSET', 'STATUS_CODE_OK', 'STATUS_CODE_ERROR'];

/** An enum given as its number or its name. */
function jsonEnum(v: J, names: string[]): number {
  if (v === undefined || v === null) return 0;
  if (typeof v === 'number') return v;
  const i = names.indexOf(String(v));
  if (i >= 0) return i;
  if (/^\d+$/.test(String(v))) return Number(v);
  throw new Error(`OTLP/JSON: unknown enum value ${JSON.stringify(v)}`);
}

/** A uint64/int64 given as a decimal string or a number. */
function jsonBig(v: J): bigint {
  if (v === undefined || v === null || v === '') return 0n;
  if (typeof v === 'number') return BigInt(Math.round(v));
  return BigInt(String(v));
}

/** Trace/span ids: hex in OTLP/JSON. */
function jsonId(v: J): string {
  if (v === undefined || v === null) return '';
  const s = String(v).toLowerCase();
  if (!/^(?:[0-9a-f]{2})*$/.test(s)) throw new Error(`OTLP/JSON: id ${JSON.stringify(v)} not hex`);
  return s;
}

function jsonAnyValue(v: J): unknown {
  if (v === undefined || v === null) return undefined;
  if ('stringValue' in v) return String(v.stringValue);
  if ('boolValue' in v) return Boolean(v.boolValue);
  if ('intValue' in v) {
    const i = v.intValue;
    return typeof i === 'number' && Number.isSafeInteger(i) ? i : int64(jsonBig(i));
  }
  if ('doubleValue' in v) return Number(v.doubleValue);
  if ('arrayValue' in v) return ((v.arrayValue?.values ?? []) as J[]).map(jsonAnyValue);
  if ('kvlistValue' in v) return jsonKeyValues(v.kvlistValue?.values);
  if ('bytesValue' in v) return new Uint8Array(Buffer.from(String(v.bytesValue), 'base64'));
  return undefined;
}

function jsonKeyValues(list: J): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of (list ?? []) as J[]) out[String(kv.key)] = jsonAnyValue(kv.value);
  return out;
}

const nonEmpty = (v: J): string | undefined =>
  v === undefined || v === null || v === '' ? undefined : String(v);

function jsonSpan(s: J): SpanFields {
  const out: SpanFields = {
    traceId: jsonId(s.traceId),
    spanId: jsonId(s.spanId),
    name: String(s.name ?? ''),
    kind: jsonEnum(s.kind, SPAN_KINDS),
    startNs: jsonBig(s.startTimeUnixNano),
    endNs: jsonBig(s.endTimeUnixNano),
    attributes: jsonKeyValues(s.attributes),
    events: ((s.events ?? []) as J[]).map((e) => ({
      name: String(e.name ?? ''),
      timeNs: jsonBig(e.timeUnixNano),
      attributes: jsonKeyValues(e.attributes),
    })),
    links: ((s.links ?? []) as J[]).map((l) => {
      const link: Link = {
        traceId: jsonId(l.traceId),
        spanId: jsonId(l.spanId),
        attributes: jsonKeyValues(l.attributes),
      };
      const ts = nonEmpty(l.traceState);
      if (ts !== undefined) link.traceState = ts;
      return link;
    }),
    status: { code: jsonEnum(s.status?.code, STATUS_CODES) },
  };
  const parent = jsonId(s.parentSpanId);
  if (parent !== '') out.parentSpanId = parent;
  const ts = nonEmpty(s.traceState);
  if (ts !== undefined) out.traceState = ts;
  const message = nonEmpty(s.status?.message);
  if (message !== undefined) out.status.message = message;
  return out;
}

/** ExportTraceServiceRequest in OTLP/JSON → spans. */
export function decodeJsonRequest(body: J): ReceivedSpan[] {
  if (typeof body !== 'object' || body === null) throw new Error('OTLP/JSON: not an object');
  const out: ReceivedSpan[] = [];
  for (const rs of (body.resourceSpans ?? []) as J[]) {
    const resource = jsonKeyValues(rs.resource?.attributes);
    for (const ss of (rs.scopeSpans ?? []) as J[]) {
      const scope = String(ss.scope?.name ?? '');
      for (const s of (ss.spans ?? []) as J[])
        out.push(finish(jsonSpan(s), resource, scope, 'json'));
    }
  }
  return out;
}

function finish(
  s: SpanFields,
  resource: Record<string, unknown>,
  scope: string,
  protocol: ReceivedSpan['protocol'],
): ReceivedSpan {
  const service = resource['service.name'];
  return {
    ...s,
    service: typeof service === 'string' ? service : '',
    resource,
    scope,
    protocol,
  };
}

// ---------------------------------------------------------------------------------------------
// The server

interface Waiter {
  pred: (spans: ReceivedSpan[]) => boolean;
  resolve: (spans: ReceivedSpan[]) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/** A receiver listening on 127.0.0.1 and a free port. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const problems: string[] = []; // requests refused, for the message of a waitFor that times out
  const waiters = new Set<Waiter>();

  const settle = (w: Waiter, err?: Error) => {
    clearTimeout(w.timer);
    waiters.delete(w);
    if (err) w.reject(err);
    else w.resolve([...spans]);
  };
  const check = () => {
    for (const w of [...waiters]) {
      let ok: boolean;
      try {
        ok = w.pred(spans);
      } catch (err) {
        settle(w, err as Error);
        continue;
      }
      if (ok) settle(w);
    }
  };

  const answer = (res: ServerResponse, status: number, type: string, body: string) => {
    res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
  const refuse = (req: IncomingMessage, res: ServerResponse, status: number, why: string) => {
    problems.push(`${req.method} ${req.url}: ${status} ${why}`);
    answer(res, status, 'text/plain', `${why}\n`);
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (req.method !== 'POST' || path !== '/v1/traces')
      return refuse(req, res, 404, 'only POST /v1/traces is served here');
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/x-protobuf' && type !== 'application/json')
      return refuse(req, res, 415, `unsupported content-type ${JSON.stringify(type)}`);
    const encoding = (req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
    if (encoding !== 'identity' && encoding !== 'gzip')
      return refuse(req, res, 415, `unsupported content-encoding ${JSON.stringify(encoding)}`);
    let received: ReceivedSpan[];
    try {
      let body = Buffer.concat(chunks);
      if (encoding === 'gzip') body = gunzipSync(body);
      received =
        type === 'application/json'
          ? decodeJsonRequest(JSON.parse(body.toString('utf8')))
          : decodeProtobufRequest(new Uint8Array(body.buffer, body.byteOffset, body.length));
    } catch (err) {
      return refuse(req, res, 400, `undecodable ${type}: ${(err as Error).message}`);
    }
    spans.push(...received);
    if (type === 'application/json') answer(res, 200, 'application/json', '{}');
    else answer(res, 200, 'application/x-protobuf', '');
    if (received.length > 0) check();
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (!res.headersSent) refuse(req, res, 500, err.message);
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    waitFor(pred, timeoutMs = 20_000) {
      return new Promise<ReceivedSpan[]>((resolve, reject) => {
        const w: Waiter = {
          pred,
          resolve,
          reject,
          timer: setTimeout(() => {
            const names = spans.map((s) => `${s.service}:${s.name}`).join(', ') || 'none';
            const refused = problems.length > 0 ? `; refused: ${problems.join('; ')}` : '';
            settle(
              w,
              new Error(
                `OTLP receiver: condition not met within ${timeoutMs} ms; ${spans.length} span(s) received: ${names}${refused}`,
              ),
            );
          }, timeoutMs),
        };
        waiters.add(w);
        check();
      });
    },
    close() {
      for (const w of [...waiters]) settle(w, new Error('OTLP receiver closed'));
      return new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      });
    },
  };
}
