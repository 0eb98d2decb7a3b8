/** A shallow-props memo for function components (preact/compat's would pull in all of compat). */
import { Component, h, type FunctionComponent } from "preact";

export function memo<P extends object>(Inner: FunctionComponent<P>): FunctionComponent<P> {
  class Memo extends Component<P> {
    override shouldComponentUpdate(next: P): boolean {
      const prev = this.props as Record<string, unknown>;
      const n = next as Record<string, unknown>;
      for (const k in n) if (k !== "children" && prev[k] !== n[k]) return true;
      for (const k in prev) if (!(k in n)) return true;
      return false;
    }
    override render(props: P) {
      return h(Inner, props);
    }
  }
  return Memo as unknown as FunctionComponent<P>;
}
