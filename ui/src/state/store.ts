/**
 * A tiny store. Updates are applied at once but subscribers are notified at most once per
 * animation frame, so a burst of events (tokens, stats) costs one render. A timer backs the
 * frame up, because hidden windows get no animation frames.
 */
import { useEffect, useReducer, useRef } from "preact/hooks";

export class Store<S extends object> {
  #state: S;
  #subs = new Set<() => void>();
  #frame = 0;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #scheduled = false;

  constructor(initial: S) {
    this.#state = initial;
  }

  get(): S {
    return this.#state;
  }

  set(patch: Partial<S> | ((s: S) => Partial<S>)): void {
    const p = typeof patch === "function" ? patch(this.#state) : patch;
    this.#state = { ...this.#state, ...p };
    this.#schedule();
  }

  subscribe(fn: () => void): () => void {
    this.#subs.add(fn);
    return () => this.#subs.delete(fn);
  }

  /** Notifies subscribers now (tests, and before measuring layout). */
  flush(): void {
    if (!this.#scheduled) return;
    this.#scheduled = false;
    if (this.#frame && typeof cancelAnimationFrame === "function") cancelAnimationFrame(this.#frame);
    if (this.#timer) clearTimeout(this.#timer);
    this.#frame = 0;
    this.#timer = null;
    for (const fn of [...this.#subs]) fn();
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    const run = () => this.flush();
    if (typeof requestAnimationFrame === "function") this.#frame = requestAnimationFrame(run);
    this.#timer = setTimeout(run, 120);
  }
}

/** Subscribes a component to a slice of a store; re-renders when the slice changes (Object.is). */
export function useSelector<S extends object, T>(store: Store<S>, selector: (s: S) => T): T {
  const [, force] = useReducer((n: number) => n + 1, 0);
  const sel = useRef(selector);
  sel.current = selector;
  const value = selector(store.get());
  const last = useRef(value);
  last.current = value;
  useEffect(
    () =>
      store.subscribe(() => {
        if (!Object.is(sel.current(store.get()), last.current)) force(0);
      }),
    [store],
  );
  return value;
}
