//! The local OpenAI-compatible server (`kivi_engine::server`) on the active model: started
//! and stopped from the settings pane, on 127.0.0.1 only, optionally behind a bearer token.

mod slot;

use slot::Running;
pub use slot::ServerSlot;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use kivi_engine::server::{self, ServerConfig, ServerError};

use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::state::AppState;
use crate::types::ServerStatus;

/// The port shown before the server ever ran.
pub const DEFAULT_PORT: u16 = 8080;
/// `app_state` key of the last port used.
const PORT_KEY: &str = "serverPort";
const HOST: &str = "127.0.0.1";

fn stopped_status(app: &AppState, error: Option<String>) -> ServerStatus {
    let port = app
        .store
        .get_state::<u16>(PORT_KEY)
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_PORT);
    ServerStatus {
        running: false,
        host: HOST.into(),
        port,
        url: None,
        auth_required: false,
        error,
    }
}

fn running_status(r: &Running) -> ServerStatus {
    let port = r.handle.local_addr().port();
    ServerStatus {
        running: true,
        host: HOST.into(),
        port,
        url: Some(format!("http://{HOST}:{port}/v1")),
        auth_required: r.auth,
        error: None,
    }
}

/// Where the server stands.
pub async fn status(app: &AppState) -> ServerStatus {
    let running = app.server.running.lock().await;
    match running.as_ref() {
        Some(r) => running_status(r),
        None => {
            let error = app
                .server
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            stopped_status(app, error)
        }
    }
}

/// Starts (or restarts, with these settings) the server on `port`.
pub async fn start(
    app: &Arc<AppState>,
    port: u32,
    token: Option<String>,
) -> CommandResult<ServerStatus> {
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p >= 1024)
        .ok_or_else(|| {
            CommandError::invalid("port", "The port must be a number from 1024 to 65535.")
        })?;
    let token = match token {
        None => None,
        Some(t) if t.trim().is_empty() => {
            return Err(CommandError::invalid(
                "token",
                "The access token is empty. Type a token, or turn authentication off.",
            ))
        }
        Some(t) if t.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            return Err(CommandError::invalid(
                "token",
                "The access token cannot contain spaces or line breaks.",
            ))
        }
        Some(t) => Some(t),
    };
    let engine = app.model.engine()?;
    let mut running = app.server.running.lock().await;
    if let Some(old) = running.take() {
        old.handle.stop().await;
    }
    let model_id = app.model.model_id();
    let config = ServerConfig {
        host: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port,
        token: token.clone(),
        cors: false,
        queue_capacity: 16,
        model_id: model_id.clone().unwrap_or_default(),
    };
    let handle = server::start(engine, config).map_err(|e| match e {
        ServerError::PortInUse(p) => CommandError {
            code: ErrorCode::PortInUse,
            message: format!("Port {p} is in use by another program. Choose another port."),
            field: Some("port".into()),
        },
        other => CommandError::new(
            ErrorCode::Internal,
            format!("The server could not start: {other}."),
        ),
    })?;
    let r = Running {
        handle,
        model_id,
        auth: token.is_some(),
    };
    let status = running_status(&r);
    *running = Some(r);
    *app.server
        .last_error
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = None;
    if let Err(e) = app.store.put_state(PORT_KEY, &port) {
        eprintln!("kivi-chat: {e}");
    }
    app.events.server_status(&status);
    Ok(status)
}

/// Stops the server (a no-op when stopped); `why` is shown when it was not the user's choice.
pub async fn stop(app: &AppState, why: Option<String>) -> ServerStatus {
    let mut running = app.server.running.lock().await;
    let was_running = running.is_some();
    if let Some(r) = running.take() {
        r.handle.stop().await;
    }
    drop(running);
    if was_running || why.is_some() {
        *app.server
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = why.clone();
    }
    let status = stopped_status(app, if was_running { why } else { None });
    if was_running {
        app.events.server_status(&status);
    }
    status
}

/// The active model changed: a running server (which holds the old engine) stops.
pub async fn model_changed(app: &AppState, new_model: &str) {
    let serves_other = app
        .server
        .running
        .lock()
        .await
        .as_ref()
        .is_some_and(|r| r.model_id.as_deref() != Some(new_model));
    if serves_other {
        stop(
            app,
            Some("The server stopped because the model changed. Start it again to serve the new model.".into()),
        )
        .await;
    }
}
