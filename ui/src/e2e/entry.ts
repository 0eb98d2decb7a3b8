/** Test entry: a frozen prototype (as in the app), the mock back end, then the real app. */
import "./freeze";
import { installMockBackend } from "./mockBackend";

const params = new URLSearchParams(location.search);
installMockBackend({ scenario: params.get("scenario") ?? undefined });
if (params.get("theme") === "dark" || params.get("theme") === "light") localStorage.setItem("kivi.theme", params.get("theme")!);
if (params.get("panel") === "1" || params.get("panel") === "0") localStorage.setItem("kivi.panelOpen", params.get("panel")!);

void import("../main");
