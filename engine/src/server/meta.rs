//! The id, creation time and model name that every response (and every chunk of a stream)
//! carries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::params::Endpoint;

/// Id, time and model of one response (every chunk of a stream repeats them).
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub(super) id: String,
    pub(super) created: u64,
    pub(super) model: String,
}

impl Meta {
    pub(super) fn new(endpoint: Endpoint, model: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let prefix = match endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completions => "cmpl",
        };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        Self {
            id: format!("{prefix}-{nanos:x}{n:04x}"),
            created: unix_now(),
            model: model.to_string(),
        }
    }
}

/// Seconds since the Unix epoch.
pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
