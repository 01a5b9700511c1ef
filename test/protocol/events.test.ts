import { expect, it } from 'vitest';
import { EventMap } from '../../src/protocol/events.js';

interface Events {
  tick: [n: number];
  'listener:error': [err: unknown, event: string];
}

it('runs every listener in order, each on its own: one that throws is told as listener:error', () => {
  const heard: string[] = [];
  const errors: [unknown, string][] = [];
  const events = new EventMap<Events>()
    .on('tick', (n) => heard.push(`a${n}`))
    .on('tick', () => {
      throw new Error('boom');
    })
    .on('tick', (n) => heard.push(`c${n}`))
    .on('listener:error', (err, event) => errors.push([err, event]));
  expect(() => events.emit('tick', 1)).not.toThrow();
  expect(heard).toEqual(['a1', 'c1']);
  expect(errors).toHaveLength(1);
  expect((errors[0]![0] as Error).message).toBe('boom');
  expect(errors[0]![1]).toBe('tick');
});

it('a listener:error listener that throws ends there, without a loop or a throw', () => {
  let calls = 0;
  const events = new EventMap<Events>()
    .on('tick', () => {
      throw new Error('first');
    })
    .on('listener:error', () => {
      calls++;
      throw new Error('second');
    });
  expect(() => events.emit('tick', 1)).not.toThrow();
  expect(calls).toBe(1);
});

it('off removes a listener; has says whether anyone listens; one leaving mid-emit spares the rest', () => {
  const events = new EventMap<Events>();
  expect(events.has('tick')).toBe(false);
  const heard: number[] = [];
  const once = (n: number) => {
    heard.push(n);
    events.off('tick', once);
  };
  events.on('tick', once).on('tick', (n) => heard.push(n * 10));
  expect(events.has('tick')).toBe(true);
  events.emit('tick', 1);
  events.emit('tick', 2);
  expect(heard).toEqual([1, 10, 20]);
});
