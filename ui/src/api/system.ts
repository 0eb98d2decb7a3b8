/** Small system services. */
import { call } from "./ipc";

/** Opens an http(s) link in the user's browser (the webview never navigates away). */
export const openExternal = (url: string) => call<null>("open_external", { url });
