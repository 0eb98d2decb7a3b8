//! The local server's slot in the app state: its handle while it runs, and why it last stopped.

use kivi_engine::server::ServerHandle;

pub(super) struct Running {
    pub(super) handle: ServerHandle,
    pub(super) model_id: Option<String>,
    pub(super) auth: bool,
}

/// The server, when it runs, and why it last stopped.
#[derive(Default)]
pub struct ServerSlot {
    pub(super) running: tokio::sync::Mutex<Option<Running>>,
    pub(super) last_error: std::sync::Mutex<Option<String>>,
}
