import type { MockControl } from "../../src/e2e/mockBackend";

declare global {
  interface Window {
    __kiviMock: MockControl;
    __xss?: number;
  }
}
export {};
