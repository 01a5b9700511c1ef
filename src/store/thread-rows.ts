/**
 * What both engines' thread code shares: a thread page's row, where an accepted message goes in
 * its thread, and the thread fields of rows stored before threads existed
 * (docs/design/threads.md). Engine-neutral, so neither engine imports the other's files.
 */
import { messageIdOf } from '../protocol/wire.js';

/** A stored message as a thread page reads it. */
export interface ThreadRow {
  id: number;
  body: string;
  checksum: number;
}

/** Where an accepted message goes. */
export interface Placement {
  /** Its thread; null when it starts one (the thread is then its own message_id). */
  readonly threadId: string | null;
  readonly hop: number;
  /** The message_id of the message it answers, when it answers one. */
  readonly replyTo: string | null;
  /** Its thread's count of messages of agents once it is stored (a reply's; 0 for a root). */
  readonly count: number;
}

/**
 * A stored message's JSON with thread_id and hop. Rows written before migration 4 lack them;
 * such a row started its own thread (its thread_id column is NULL, its hop 0), and the two
 * fields are put where a new row has them, before the payload: the first `,"payload":` is the
 * envelope's own, since string values escape their quotes. A new row is returned as it is,
 * after a look at the ~300 bytes of its head.
 */
export function withThreadFields(body: string): string {
  const at = body.indexOf(',"payload":');
  if (at < 0 || body.lastIndexOf(',"hop":', at) >= 0) return body;
  return `${body.slice(0, at)},"thread_id":"${messageIdOf(body)}","hop":0${body.slice(at)}`;
}
