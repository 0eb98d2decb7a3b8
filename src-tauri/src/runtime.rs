//! Small helpers every part of the back end uses: the clock and running hub futures off the
//! async runtime.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs a future on a blocking thread of the runtime (`Handle::block_on`) and awaits its
/// result. For the hub's download futures: they are `Send`, but the compiler cannot prove it
/// for their stream closures (rust-lang/rust#64552), so they cannot be spawned as tasks or be
/// part of a command's future; this wrapper's own future is trivially `Send`.
pub async fn off_runtime<T, Fut>(make: impl FnOnce() -> Fut + Send + 'static) -> Result<T, String>
where
    Fut: std::future::Future<Output = T>,
    T: Send + 'static,
{
    let handle = tokio::runtime::Handle::current();
    tauri::async_runtime::spawn_blocking(move || handle.block_on(make()))
        .await
        .map_err(|e| format!("a background task failed: {e}"))
}
