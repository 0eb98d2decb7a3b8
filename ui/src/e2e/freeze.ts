// Tauri's `freezePrototype: true` (tauri.conf.json) freezes Object.prototype before the app
// loads; the test build does the same so a library that relies on patching it fails here too.
Object.freeze(Object.prototype);
