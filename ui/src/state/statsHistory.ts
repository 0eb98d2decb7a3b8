/** A ring buffer of recent stats samples for the chart (outside the store: it changes often). */
import type { StatsSnapshot } from "../api/types";

export interface Sample {
  t: number;
  fp16: number;
  held: number;
  tokens: number;
}

export class History {
  readonly capacity: number;
  #items: Sample[] = [];
  #version = 0;

  constructor(capacity = 900) {
    this.capacity = capacity;
  }

  push(s: StatsSnapshot): void {
    const last = this.#items[this.#items.length - 1];
    // Out-of-order or duplicate timestamps would fold the chart back on itself.
    if (last && s.timestampMs <= last.t) return;
    this.#items.push({ t: s.timestampMs, fp16: s.kvFp16Bytes, held: s.kvHeldBytes, tokens: s.tokens });
    if (this.#items.length > this.capacity) this.#items.splice(0, this.#items.length - this.capacity);
    this.#version++;
  }

  clear(): void {
    this.#items = [];
    this.#version++;
  }

  get samples(): readonly Sample[] {
    return this.#items;
  }

  get version(): number {
    return this.#version;
  }
}

export const statsHistory = new History();
