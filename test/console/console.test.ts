/**
 * The operator console in a real browser (headless Chromium) against a real adapter over
 * loopback: sign-in, each view, pause and resume, dead letters found by their text and redriven
 * in order, a journey opened from a search, accessibility (axe) at a desktop and a phone size,
 * and that the page fetches nothing but its own origin and keeps no cookie. Elements are found
 * the way a person finds them: by role and accessible name.
 *
 * AGW_CONSOLE_SCREENSHOTS=1 also saves each view at both sizes to docs/console/.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestAdapter } from '../helpers/adapter.js';
import { launchBrowser } from '../helpers/browser.js';
import { call, type Json, pollAs, sendAs } from '../helpers/http.js';
import { startReplicaSet } from '../helpers/replicas.js';
import { AGENTS } from '../helpers/topology.js';
import { until } from '../helpers/wait.js';

const OPERATOR = 'operator:alice';
const OPERATOR_TOKEN = 'token-operator:alice';
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const SHOTS = process.env.AGW_CONSOLE_SCREENSHOTS === '1';
const SHOTS_DIR = fileURLToPath(new URL('../../docs/console/', import.meta.url));
const SIZES = [
  { width: 1280, height: 800 },
  { width: 390, height: 844 },
] as const;

/**
 * The adapter the browser talks to (`url`), and another replica of it on the same store
 * (`other`: on SQLite the same adapter), which sees what was done through the first.
 */
interface Deployment {
  readonly url: string;
  readonly other: string;
  readonly stop: () => Promise<void>;
}

const STORES: readonly { name: string; start: () => Promise<Deployment> }[] = [
  {
    name: 'SQLite',
    start: async () => {
      const a = await startTestAdapter();
      return { url: a.url, other: a.url, stop: a.stop };
    },
  },
  {
    name: 'PostgreSQL, two replicas',
    start: async () => {
      const set = await startReplicaSet([], 2);
      return { url: set.replicas.urlOf(0), other: set.replicas.urlOf(1), stop: set.cleanup };
    },
  },
];

let t: Deployment;
let browser: Browser;
let closeBrowser: () => Promise<void>;
const contexts: BrowserContext[] = [];

beforeAll(async () => {
  ({ browser, close: closeBrowser } = await launchBrowser());
}, 60_000);

afterAll(async () => {
  for (const c of contexts) await c.close().catch(() => {});
  await closeBrowser?.();
});

/** A fresh tab (its own sessionStorage), 1280×800 unless told. */
async function newPage(
  opts: { width?: number; height?: number; bypassCSP?: boolean } = {},
): Promise<Page> {
  const { width = 1280, height = 800, bypassCSP = false } = opts;
  const context = await browser.newContext({ viewport: { width, height }, bypassCSP });
  context.setDefaultTimeout(20_000);
  contexts.push(context);
  return context.newPage();
}

/** Opens the console and signs in with `token`. */
async function signIn(page: Page, token = OPERATOR_TOKEN, hash = ''): Promise<void> {
  await page.goto(`${t.url}/console${hash}`);
  await page.getByLabel('Token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

async function signedIn(page: Page, hash = ''): Promise<void> {
  await signIn(page, OPERATOR_TOKEN, hash);
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}

const agentRow = (page: Page, agent: string) =>
  page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: agent, exact: true }) });

/** The agents as the other replica tells them. */
const agentsAsOperator = async (): Promise<Json[]> => {
  const r = await call(t.other, 'GET', '/v1/agents', { agent: OPERATOR });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.agents as Json[];
};
const pausedOf = async (agent: string) =>
  (await agentsAsOperator()).find((a) => a.id === agent)?.paused as boolean;

/** What the tab keeps as its token (sessionStorage `agw-token`). */
const storedToken = (page: Page) =>
  // biome-ignore lint/suspicious/noExplicitAny: the page's sessionStorage
  page.evaluate(() => (globalThis as any).sessionStorage.getItem('agw-token') as string | null);

/** A word no other message holds, for a full-text search to find exactly ours. */
const uniqueWord = (prefix: string) => `${prefix}${randomUUID().replace(/-/g, '').slice(0, 12)}`;

/** Every view, each reached as a person would, ready once `ready` is visible. */
interface ViewVisit {
  readonly name: string;
  readonly open: (page: Page) => Promise<void>;
}

function views(ctx: { threadId: string; messageId: string; word: string }): ViewVisit[] {
  const nav = (link: string) => async (page: Page) => {
    await page.getByRole('link', { name: link, exact: true }).click();
  };
  const table = (page: Page) => page.getByRole('table').first().waitFor();
  return [
    {
      name: 'agents',
      open: async (page) => {
        await nav('Agents')(page);
        await agentRow(page, 'qa').waitFor();
      },
    },
    {
      name: 'channels',
      open: async (page) => {
        await nav('Channels')(page);
        await page.getByRole('rowheader', { name: 'product', exact: true }).waitFor();
      },
    },
    {
      name: 'messages',
      open: async (page) => {
        await nav('Messages')(page);
        await page.getByLabel('Search').fill(ctx.word);
        await page.getByRole('button', { name: 'Find' }).click();
        await page.getByRole('link', { name: ctx.messageId, exact: true }).waitFor();
      },
    },
    {
      name: 'journey',
      open: async (page) => {
        await page.getByRole('link', { name: ctx.messageId, exact: true }).click();
        await page.getByRole('heading', { name: 'Journey', exact: true }).waitFor();
        await table(page);
      },
    },
    {
      name: 'dead-letters',
      open: async (page) => {
        await nav('Dead letters')(page);
        await page.getByRole('button', { name: 'Redrive all matching' }).waitFor();
        await table(page);
      },
    },
    {
      name: 'threads',
      open: async (page) => {
        await nav('Threads')(page);
        await page.getByLabel('Thread id').fill(ctx.threadId);
        await page.getByRole('button', { name: 'Open' }).click();
        await page.getByRole('link', { name: ctx.threadId, exact: true }).waitFor();
      },
    },
    {
      name: 'audit',
      open: async (page) => {
        await nav('Audit')(page);
        await table(page);
      },
    },
  ];
}

/** The serious and critical axe violations of the page as it is now. */
async function axeViolations(page: Page): Promise<string[]> {
  await page.addScriptTag({ path: AXE });
  const found = await page.evaluate(async () => {
    // biome-ignore lint/suspicious/noExplicitAny: axe-core's global, added just above
    const r = await (globalThis as any).axe.run();
    // biome-ignore lint/suspicious/noExplicitAny: axe-core's result
    return r.violations.map((v: any) => ({
      id: v.id as string,
      impact: v.impact as string,
      // biome-ignore lint/suspicious/noExplicitAny: axe-core's result
      targets: v.nodes.slice(0, 3).map((n: any) => JSON.stringify(n.target)) as string[],
    }));
  });
  return (found as { id: string; impact: string; targets: string[] }[])
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.impact} ${v.id}: ${v.targets.join(' ')}`);
}

async function screenshot(page: Page, name: string): Promise<void> {
  if (!SHOTS) return;
  const size = page.viewportSize()!;
  mkdirSync(SHOTS_DIR, { recursive: true });
  await page.screenshot({ path: `${SHOTS_DIR}${name}-${size.width}x${size.height}.png` });
}

for (const store of STORES)
  describe(`the operator console on ${store.name}`, { timeout: 120_000 }, () => {
    const sqlite = store.name === 'SQLite';
    beforeAll(async () => {
      t = await store.start();
    }, 60_000);
    afterAll(async () => {
      await t?.stop();
    }, 30_000);

    it('is served with a CSP of its own origin and no cookie, and fetches nothing else', async () => {
      const html = await call(t.url, 'GET', '/console');
      expect(html.status).toBe(200);
      expect(html.headers.get('content-type')).toMatch(/^text\/html/);
      expect(html.headers.get('content-security-policy')).toContain("default-src 'self'");
      expect(html.headers.get('set-cookie')).toBeNull();
      for (const asset of ['/console/app.js', '/console/console.css']) {
        const r = await call(t.url, 'GET', asset);
        expect([asset, r.status]).toEqual([asset, 200]);
        expect(r.headers.get('set-cookie')).toBeNull();
      }
      expect((await call(t.url, 'GET', '/console/page.js')).status).toBe(404);
      expect((await call(t.url, 'GET', '/console/nothing-here.js')).status).toBe(404);

      const page = await newPage();
      const requests: string[] = [];
      const refused: string[] = [];
      page.on('request', (r) => requests.push(r.url()));
      page.on('console', (m) => {
        if (/Content Security Policy|Refused to/.test(m.text())) refused.push(m.text());
      });
      await signedIn(page);
      const messageId = await sendAs(t.url, 'pm', 'product', 'status', { text: 'origin check' });
      const ctx = { threadId: messageId, messageId, word: 'origin' };
      for (const view of views(ctx)) await view.open(page);
      expect(requests.length).toBeGreaterThan(8);
      expect(requests.filter((u) => !u.startsWith(`${t.url}/`))).toEqual([]);
      expect(refused).toEqual([]);
      expect(await page.context().cookies()).toEqual([]);
      expect(await storedToken(page)).toBe(OPERATOR_TOKEN);
    });

    it("refuses a wrong token and an agent's, signs in an operator's and signs out", async () => {
      const page = await newPage();
      await signIn(page, 'token-nobody');
      await page.getByRole('alert').filter({ hasText: 'unauthorized' }).waitFor();
      await page.getByLabel('Token').waitFor();
      expect(await storedToken(page)).toBeNull();

      await page.getByLabel('Token').fill('token-qa');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('alert').filter({ hasText: 'not_operator' }).waitFor();
      expect(await storedToken(page)).toBeNull();

      await page.getByLabel('Token').fill(OPERATOR_TOKEN);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await agentRow(page, 'qa').waitFor();
      expect(await page.getByRole('alert').isVisible()).toBe(false);
      for (const link of ['Agents', 'Channels', 'Messages', 'Dead letters', 'Threads', 'Audit'])
        await page.getByRole('link', { name: link, exact: true }).waitFor();

      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByLabel('Token').waitFor();
      expect(await storedToken(page)).toBeNull();

      // a token the adapter stops taking (401) brings the form back, saying why
      await page.evaluate(() =>
        // biome-ignore lint/suspicious/noExplicitAny: the page's sessionStorage
        (globalThis as any).sessionStorage.setItem('agw-token', 'token-revoked'),
      );
      await page.goto(`${t.url}/console#/channels`);
      await page.getByRole('alert').filter({ hasText: 'unauthorized' }).waitFor();
      await page.getByLabel('Token').waitFor();
      expect(await storedToken(page)).toBeNull();
    });

    it('lists the agents, pauses and resumes one, and shows a pause made elsewhere by itself', async () => {
      const page = await newPage();
      await signedIn(page, '#/agents');
      await agentRow(page, 'research').waitFor();
      for (const header of [
        'Agent',
        'Role',
        'Last poll',
        'Pending',
        'Critical',
        'Leased',
        'Dead letters',
        'Stalled',
        'Paused',
      ])
        await page.getByRole('columnheader', { name: header, exact: true }).waitFor();
      expect((await page.getByRole('rowheader').allTextContents()).sort()).toEqual(
        [...AGENTS].sort(),
      );

      const row = agentRow(page, 'research');
      await row.getByRole('button', { name: 'Pause', exact: true }).click();
      await until(() => pausedOf('research'), 'research paused');
      // the other replica holds research's deliveries too (pausedOf asked it)
      await sendAs(t.url, 'pm', '@research', 'status', { text: 'while paused' });
      expect(await pollAs(t.other, 'research')).toEqual([]);
      await row.getByRole('button', { name: 'Resume', exact: true }).click();
      await until(async () => (await pausedOf('research')) === false, 'research resumed');
      await row.getByRole('button', { name: 'Pause', exact: true }).waitFor();

      // the view reads the agents again by itself (the contract: at least every 5 s)
      const paused = await call(t.url, 'POST', '/v1/agents/research/pause', { agent: OPERATOR });
      expect(paused.status, JSON.stringify(paused.body)).toBeLessThan(300);
      await row.getByRole('button', { name: 'Resume', exact: true }).waitFor({ timeout: 6_000 });
      await row.getByRole('button', { name: 'Resume', exact: true }).click();
      await until(async () => (await pausedOf('research')) === false, 'research resumed');
    });

    it('reads the agents every 2 s while they are shown, and stops when the view is left', async () => {
      const page = await newPage();
      await page.clock.install();
      const reads: string[] = [];
      page.on('request', (r) => {
        if (new URL(r.url()).pathname === '/v1/agents') reads.push(r.url());
      });
      await signedIn(page, '#/agents');
      await agentRow(page, 'qa').waitFor();
      const first = reads.length;
      expect(first).toBeGreaterThanOrEqual(1);
      await page.clock.runFor(2_000);
      await until(
        () => reads.length === first + 1,
        () => `one more read of the agents: ${reads.length}`,
      );
      await page.clock.runFor(2_000);
      await until(
        () => reads.length === first + 2,
        () => `another read of the agents: ${reads.length}`,
      );

      await page.getByRole('link', { name: 'Channels', exact: true }).click();
      await page.getByRole('rowheader', { name: 'product', exact: true }).waitFor();
      const left = reads.length;
      await page.clock.runFor(20_000);
      // a read made after the clock ran: any read of the agents the timers made is before it
      const later = page.waitForResponse((r) => new URL(r.url()).pathname === '/v1/messages');
      await page.getByRole('link', { name: 'Messages', exact: true }).click();
      await later;
      expect(reads.length).toBe(left);
    });

    it('finds dead letters by their text, redrives the ticked ones, and qa gets them in order', async () => {
      const word = uniqueWord('quokka');
      const ids: string[] = [];
      for (let i = 1; i <= 3; i++)
        ids.push(await sendAs(t.url, 'pm', '@qa', 'status', { text: `${word} number ${i}` }));
      // qa rejects each (a lane hands over one message of a channel at a time)
      const rejected = new Set<string>();
      await until(async () => {
        for (const d of await pollAs(t.url, 'qa')) {
          const mine = ids.includes(d.message.message_id);
          const r = await call(t.url, 'POST', mine ? '/v1/nacks' : '/v1/acks', {
            agent: 'qa',
            body: mine
              ? { delivery_ids: [d.delivery_id], retry: false, reason: 'x' }
              : { delivery_ids: [d.delivery_id] },
          });
          expect(r.status, JSON.stringify(r.body)).toBe(200);
          if (mine) rejected.add(d.message.message_id);
        }
        return rejected.size === ids.length;
      }, 'qa rejected its three messages');

      const page = await newPage();
      await signedIn(page, '#/dead-letters');
      await page.getByLabel('Search').fill(word);
      await page.getByRole('button', { name: 'Find' }).click();
      // ticked last one first: the order they are ticked in is not the order they are handed over
      for (const id of [...ids].reverse()) await page.getByRole('checkbox', { name: id }).check();
      expect(await page.getByRole('checkbox').count()).toBe(3);
      await page.getByRole('button', { name: 'Redrive selected' }).click();
      await page.getByRole('status').filter({ hasText: '3/3 (skipped 0)' }).waitFor();
      const bar = page.getByRole('progressbar', { name: 'Redrive progress' });
      expect([await bar.getAttribute('max'), await bar.getAttribute('value')]).toEqual(['3', '3']);
      // the list is read again: they left the dead letters
      await until(
        async () => (await page.getByRole('checkbox').count()) === 0,
        'the redriven dead letters gone from the list',
      );

      const got: Json[] = [];
      await until(async () => {
        // through the other replica: the redrive made through the first is in the store
        const deliveries = await pollAs(t.other, 'qa');
        if (deliveries.length > 0) {
          const acked = await call(t.other, 'POST', '/v1/acks', {
            agent: 'qa',
            body: { delivery_ids: deliveries.map((d) => d.delivery_id) },
          });
          expect(acked.status).toBe(200);
        }
        got.push(...deliveries.filter((d) => ids.includes(d.message.message_id)));
        return got.length >= ids.length;
      }, 'qa got the redriven messages again');
      expect(got.map((d) => d.message.message_id)).toEqual(ids);
      const seqs = got.map((d) => d.message.channel_sequence_id as number);
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b));

      // a filter that matches nothing redrives nothing
      await page.getByLabel('Search').fill(uniqueWord('nomatch'));
      await page.getByRole('button', { name: 'Find' }).click();
      await page.getByRole('button', { name: 'Redrive all matching' }).click();
      await page.getByRole('status').filter({ hasText: 'Nothing matched' }).waitFor();
    });

    it('opens a journey from a search: the heading and each recipient with its explanation', async () => {
      const word = uniqueWord('heron');
      const id = await sendAs(t.url, 'pm', 'product', 'status', { text: `${word} journey` });
      const page = await newPage();
      await signedIn(page, '#/messages');
      await page.getByLabel('Search').fill(word);
      await page.getByRole('button', { name: 'Find' }).click();
      await page.getByRole('link', { name: id, exact: true }).click();
      await page.getByRole('heading', { name: 'Journey', exact: true }).waitFor();
      expect(page.url()).toContain(`#/journey/${id}`);
      const journey = await call(t.url, 'GET', `/v1/messages/${id}/journey`, { agent: OPERATOR });
      expect(journey.status).toBe(200);
      await page
        .getByText(journey.body.message.timestamp_iso8601 as string, { exact: true })
        .first()
        .waitFor();
      const recipients = journey.body.recipients as Json[];
      expect(recipients.length).toBeGreaterThan(1);
      for (const r of recipients) {
        const section = page.getByRole('region', { name: `Recipient ${r.agent}`, exact: true });
        await section.getByRole('heading', { name: r.agent, exact: true }).waitFor();
        await section.getByText(r.cause, { exact: true }).first().waitFor();
        // its sentence (it names the agent), then its events in a table
        const sentence = (await section.getByRole('paragraph').first().textContent()) ?? '';
        expect(sentence).toContain(r.agent);
        // as the API says it, up to the first number (times move on between the two reads)
        expect(sentence.startsWith((r.explanation as string).split(/\d/)[0]!)).toBe(true);
        await section
          .getByRole('table')
          .getByRole('cell', { name: 'queued', exact: true })
          .waitFor();
      }
    });

    it('shows a thread and the audit log as tables', async () => {
      const root = await sendAs(t.url, 'pm', 'product', 'status', { text: 'thread root' });
      const page = await newPage();
      await signedIn(page, '#/threads');
      await page.getByLabel('Thread id').fill(root);
      await page.getByRole('button', { name: 'Open' }).click();
      await page.getByRole('link', { name: root, exact: true }).waitFor();
      await page.getByRole('columnheader', { name: 'Payload', exact: true }).waitFor();

      // an act of an operator is in the log
      for (const act of ['pause', 'resume'])
        expect(
          (await call(t.url, 'POST', `/v1/agents/growth/${act}`, { agent: OPERATOR })).status,
        ).toBeLessThan(300);
      await page.getByRole('link', { name: 'Audit', exact: true }).click();
      await page.getByRole('columnheader', { name: 'Actor', exact: true }).waitFor();
      await page.getByRole('cell', { name: OPERATOR, exact: true }).first().waitFor();
      await page.getByRole('cell', { name: 'growth', exact: true }).first().waitFor();
    });

    for (const size of SIZES) {
      // the page is the same whatever the store: checked (and photographed) once
      it.runIf(sqlite)(
        `has no serious or critical axe violation on any view at ${size.width}×${size.height}`,
        async () => {
          const word = uniqueWord('ibis');
          const messageId = await sendAs(t.url, 'pm', 'product', 'status', { text: `${word} axe` });
          // a dead letter, so that its list has a row
          const dead = await sendAs(t.url, 'pm', '@growth', 'status', { text: `${word} dead` });
          await until(async () => {
            const d = (await pollAs(t.url, 'growth', { max: 100 })).filter(
              (x) => x.message.message_id === dead,
            );
            for (const x of d)
              await call(t.url, 'POST', '/v1/nacks', {
                agent: 'growth',
                body: { delivery_ids: [x.delivery_id], retry: false, reason: 'for the axe check' },
              });
            return d.length > 0;
          }, 'growth rejected one');

          // axe-core is added to the page as a script: this context alone bypasses the CSP for it
          const page = await newPage({ ...size, bypassCSP: true });
          await page.goto(`${t.url}/console`);
          await page.getByLabel('Token').waitFor();
          const found: Record<string, string[]> = {};
          found['sign-in'] = await axeViolations(page);
          await screenshot(page, 'sign-in');
          await page.getByLabel('Token').fill(OPERATOR_TOKEN);
          await page.getByRole('button', { name: 'Sign in' }).click();
          for (const view of views({ threadId: messageId, messageId, word })) {
            await view.open(page);
            found[view.name] = await axeViolations(page);
            // nothing widens the page: the tables scroll sideways inside their wrappers
            const width = await page.evaluate(
              // biome-ignore lint/suspicious/noExplicitAny: the page's document
              () => (globalThis as any).document.documentElement.scrollWidth as number,
            );
            if (width > size.width) found[view.name]!.push(`the page is ${width} px wide`);
            await screenshot(page, view.name);
          }
          expect(found).toEqual(Object.fromEntries(Object.keys(found).map((k) => [k, []])));
        },
      );
    }
  });
