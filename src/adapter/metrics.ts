/**
 * The adapter's Prometheus metrics, on a registry of its own so that several adapters in one
 * process (tests) do not share counters. Updated once per commit and once per answer, never
 * per statement.
 */
import { Counter, Histogram, Registry } from 'prom-client';
import type { CommitStats } from './group-commit.js';

export class AdapterMetrics {
  readonly registry = new Registry();
  readonly #messages = new Counter({
    name: 'agw_messages_total',
    help: 'Messages answered by the write path, by outcome (created, duplicate, or an error code).',
    labelNames: ['outcome'],
    registers: [this.registry],
  });
  readonly #commitSize = new Histogram({
    name: 'agw_commit_messages',
    help: 'Messages per group commit (one transaction, one fsync).',
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    registers: [this.registry],
  });
  readonly #commitSeconds = new Histogram({
    name: 'agw_commit_seconds',
    help: 'Time a group commit holds the event loop: statements, COMMIT and fsync.',
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1],
    registers: [this.registry],
  });
  readonly #commitErrors = new Counter({
    name: 'agw_commit_errors_total',
    help: 'Group commits whose transaction failed and rolled back.',
    registers: [this.registry],
  });

  commit(stats: CommitStats): void {
    this.#commitSize.observe(stats.messages);
    this.#commitSeconds.observe(stats.seconds);
  }

  commitError(): void {
    this.#commitErrors.inc();
  }

  answered(outcome: string, n = 1): void {
    this.#messages.inc({ outcome }, n);
  }
}
