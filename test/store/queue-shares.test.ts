/**
 * The fairness rules both stores call (src/store/rules/queue-shares.ts), white-box: whose copy a full
 * queue evicts, and who may add a critical copy. The stores' behaviour is held to them by the
 * conformance suite; these pin the choices it does not reach (ties, the fair part, the reserve).
 */
import { describe, expect, it } from 'vitest';
import {
  admitCritical,
  alertReserve,
  criticalShare,
  evictionSender,
  type Holding,
} from '../../src/store/rules/queue-shares.js';

const held = (sender: string, open: number, evictable = open, critical = 0): Holding => ({
  sender,
  open,
  critical,
  evictable,
});

describe('evictionSender', () => {
  it("takes the largest holder's copy, the new copy counted with its own sender", () => {
    expect(evictionSender([held('pm', 10), held('engineering', 490)], 'engineering')).toBe(
      'engineering',
    );
    expect(evictionSender([held('pm', 10), held('engineering', 490)], 'pm')).toBe('engineering');
    // a sender new to the queue holds 1 with its copy: never the one evicted while others hold more
    expect(evictionSender([held('pm', 250), held('qa', 250)], 'research')).toBe('pm');
  });

  it("breaks a tie for the new copy's own sender, then by name", () => {
    expect(evictionSender([held('pm', 2), held('qa', 3)], 'pm')).toBe('pm'); // 3 and 3
    expect(evictionSender([held('qa', 2), held('pm', 2)], 'research')).toBe('pm');
  });

  it('passes over a large holder with nothing to evict, but never down to one below the average', () => {
    // engineering's copies are all leased: qa (4, over the average of 11 / 3) gives one up
    expect(evictionSender([held('engineering', 5, 0), held('qa', 4), held('pm', 1)], 'pm')).toBe(
      'qa',
    );
    // nobody at or over the average has one: the store refuses a normal copy instead
    expect(evictionSender([held('engineering', 4, 0), held('pm', 1)], 'pm')).toBeUndefined();
  });

  it('never takes a copy of a sender holding no more than capacity / senders while another holds more', () => {
    const capacity = 12;
    for (let a = 0; a <= capacity; a++) {
      for (let b = 0; a + b <= capacity; b++) {
        const c = capacity - a - b;
        const holdings = [held('a', a), held('b', b), held('c', c)].filter((h) => h.open > 0);
        for (const incoming of ['a', 'b', 'c', 'd']) {
          const victim = evictionSender(holdings, incoming);
          const count = (s: string) =>
            (holdings.find((h) => h.sender === s)?.open ?? 0) + (s === incoming ? 1 : 0);
          const senders = new Set([...holdings.map((h) => h.sender), incoming]).size;
          if (victim !== undefined && count(victim) <= capacity / senders) {
            const max = Math.max(...['a', 'b', 'c', 'd'].map(count));
            expect(max, `${a}/${b}/${c} +${incoming} took ${victim}`).toBe(count(victim));
          }
        }
      }
    }
  });
});

describe('admitCritical', () => {
  it('gives each of the topology’s agents an equal share, at least 1', () => {
    expect(criticalShare(20, 6)).toBe(3);
    expect(criticalShare(5000, 6)).toBe(833);
    expect(criticalShare(2, 6)).toBe(1);
    expect(criticalShare(20, 1)).toBe(20);
  });

  it('reads counts only once the total reaches the share, and refuses a sender at its share', () => {
    expect(admitCritical('pm', { total: 2 }, 20, 6)).toBe('admit');
    expect(admitCritical('pm', { total: 3 }, 20, 6)).toBe('needs-counts');
    expect(admitCritical('pm', { total: 3, sender: 3, adapter: 0 }, 20, 6)).toBe('refuse');
    expect(admitCritical('qa', { total: 3, sender: 0, adapter: 0 }, 20, 6)).toBe('admit');
  });

  it("counts the agents' copies against the capacity, and gives the adapter a reserve above it", () => {
    expect(alertReserve(20)).toBe(10);
    expect(alertReserve(5000)).toBe(500);
    // 19 of agents' copies and 5 alerts: room for one more of an agent's; 20: none
    expect(admitCritical('qa', { total: 24, sender: 0, adapter: 5 }, 20, 1)).toBe('admit');
    expect(admitCritical('qa', { total: 25, sender: 0, adapter: 5 }, 20, 1)).toBe('refuse');
    expect(admitCritical('adapter', { total: 29 }, 20, 6)).toBe('admit');
    expect(admitCritical('adapter', { total: 30 }, 20, 6)).toBe('refuse');
    // an operator's replay: the capacity alone
    expect(admitCritical(undefined, { total: 19 }, 20, 6)).toBe('admit');
    expect(admitCritical(undefined, { total: 20 }, 20, 6)).toBe('refuse');
  });
});
