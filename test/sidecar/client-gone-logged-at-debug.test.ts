/**
 * A client that goes away before its answer is no error of the sidecar's: it is logged at debug,
 * without a stack (every client abort was once logged "request failed" at error level with its
 * stack, because the handler checked res.headersSent but not res.destroyed). The log lines of a
 * real sidecar, captured.
 */
import { connect } from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { capturingLogger, startTestSidecar } from '../helpers/sidecar.js';

const stops: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});

it('a client that closes in the middle of its request body is logged at debug, without a stack', async () => {
  const adapter = await startTestAdapter();
  stops.push(adapter.stop);
  const log = capturingLogger();
  const pm = await startTestSidecar('pm', adapter.url, { logger: log.logger });
  stops.push(pm.stop);
  const { port } = new URL(pm.url);
  // a send whose body never arrives whole: the sidecar is reading it when the socket closes
  const socket = connect(Number(port), '127.0.0.1');
  socket.on('error', () => {});
  // its head and the start of its body handed to the kernel, then the socket closed
  await new Promise<void>((resolve) =>
    socket.write(
      `POST /v1/messages HTTP/1.1\r\nHost: localhost:${port}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"to":"@qa",`,
      () => resolve(),
    ),
  );
  socket.destroy();
  const line = await log.line((l) => l.url === '/v1/messages');
  expect(line).toMatchObject({
    level: 20,
    msg: 'the client went away before its answer',
    method: 'POST',
  });
  expect(JSON.stringify(line)).not.toContain('stack');
  expect(log.lines.filter((l) => (l.level as number) >= 50)).toEqual([]);
});
