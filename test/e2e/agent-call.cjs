// What an agent does through its sidecar, for test/e2e/podman.sh. It runs inside an agent
// container (`podman exec -i ... node - COMMAND ARGS < agent-call.cjs`), so it talks to the pod's
// own sidecar on 127.0.0.1:7070 exactly as an agent runtime would, and prints one JSON line.
//   get PATH                         {"status", "body"}
//   send TO KIND PAYLOAD_JSON         {"status", "body"} of POST /v1/messages
//   emergency REASON MESSAGE          {"status", "body"} of POST /v1/emergency
//   receive COUNT WITHIN_S            long-polls /v1/inbox until COUNT messages came, acks each,
//                                     prints {"messages": [...]} (fewer if WITHIN_S ran out)
'use strict';
const SIDECAR = 'http://127.0.0.1:7070';

async function call(method, path, body) {
  const res = await fetch(SIDECAR + path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: res.status, body: parsed };
}

async function receive(count, withinS) {
  const deadline = Date.now() + withinS * 1000;
  const messages = [];
  while (messages.length < count && Date.now() < deadline) {
    const wait = Math.max(1, Math.min(10, Math.floor((deadline - Date.now()) / 1000)));
    const r = await call('GET', `/v1/inbox?wait=${wait}&max=10`);
    if (r.status !== 200) {
      // the sidecar answers 503 adapter_unreachable while the adapter is away: poll again
      await new Promise((done) => setTimeout(done, 500));
      continue;
    }
    const ids = [];
    for (const d of r.body.deliveries) {
      messages.push(d.message);
      ids.push(d.delivery_id);
    }
    if (ids.length > 0) {
      const ack = await call('POST', '/v1/acks', { delivery_ids: ids });
      if (ack.status !== 200)
        throw new Error(`ack answered ${ack.status}: ${JSON.stringify(ack.body)}`);
    }
  }
  return { messages };
}

async function main(argv) {
  const [command, ...args] = argv;
  switch (command) {
    case 'get':
      return call('GET', args[0]);
    case 'send':
      return call('POST', '/v1/messages', {
        to: args[0],
        kind: args[1],
        payload: JSON.parse(args[2]),
      });
    case 'emergency':
      return call('POST', '/v1/emergency', { reason: args[0], message: args[1] });
    case 'receive':
      return receive(Number(args[0]), Number(args[1]));
    default:
      throw new Error(`unknown command ${command}`);
  }
}

// `node - ARGS`: argv[1] is "-"
main(process.argv.slice(2)).then(
  (out) => process.stdout.write(`${JSON.stringify(out)}\n`),
  (err) => {
    process.stderr.write(`agent-call: ${err.stack ?? err}\n`);
    process.exit(1);
  },
);
