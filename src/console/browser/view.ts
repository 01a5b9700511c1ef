/** What the router hands a view, and what a view hands back. */

export interface ViewContext {
  /** The `<main>` element, emptied for the view. */
  readonly root: HTMLElement;
  /** The route's query (`#/messages?q=x` → q=x). */
  readonly params: URLSearchParams;
  /** The path after the view's name (`#/journey/ID` → ID), decoded; '' when none. */
  readonly arg: string;
  /** Aborted when the view is left: its requests end with it. */
  readonly signal: AbortSignal;
  /** Goes to a route (`#/messages?q=x`), rendering it again when it is the current one. */
  navigate(hash: string): void;
}

/** Renders into ctx.root; may answer a function that stops what it started (timers). */
export type View = (ctx: ViewContext) => undefined | (() => void);

/** `#/name?a=b` from a name and fields (empty fields left out). */
export function route(name: string, fields: Record<string, string> = {}): string {
  const q = new URLSearchParams(Object.entries(fields).filter(([, v]) => v !== ''));
  const s = q.toString();
  return `#/${name}${s === '' ? '' : `?${s}`}`;
}
