/** Keeps one broken view from blanking the window: shows what failed and a way back. */
import { Component, type ComponentChildren } from "preact";
import { IconAlert } from "./icons";

export class ErrorBoundary extends Component<{ children: ComponentChildren }, { error: Error | null }> {
  override state = { error: null as Error | null };

  override componentDidCatch(error: Error): void {
    console.error("KIVI Chat UI error:", error);
    this.setState({ error });
  }

  override render() {
    const { error } = this.state;
    if (!error) return this.props.children;
    return (
      <div class="crash" role="alert" data-testid="ui-error">
        <IconAlert size={28} />
        <h2>This part of the window failed</h2>
        <p class="muted">{error.message}</p>
        <p class="muted small">Your chats are safe (they are stored by the app). Try again, or reload the window.</p>
        <div class="row">
          <button type="button" class="btn primary" onClick={() => this.setState({ error: null })}>
            Try again
          </button>
          <button type="button" class="btn" onClick={() => location.reload()}>
            Reload
          </button>
        </div>
      </div>
    );
  }
}
