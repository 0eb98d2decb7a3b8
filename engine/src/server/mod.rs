//! A local OpenAI-compatible HTTP server on an [`Engine`], with the KIVI cache.
//!
//! `POST /v1/chat/completions`, `POST /v1/completions` (streaming or not), `GET
//! /v1/models`, plus `GET /health`. Requests run one at a time, in order of arrival, with
//! a bounded queue (429 when full); a client that disconnects cancels its generation;
//! conversations that extend an earlier one reuse its KV cache (the engine's prefix
//! reuse), reported as `usage.prompt_tokens_details.cached_tokens`. The extension field
//! `kv_cache` picks the cache per request, and `usage.kv_cache` reports its bytes against
//! float16. `response_format` (`json_object`, `json_schema`) is kept to by constrained
//! decoding ([`crate::grammar`]); every other OpenAI field is honoured or refused by name
//! (`fields.rs`). See `docs/server.md` for the wire format, the field table and examples.
//!
//! The CLI (`kivi serve`) and the desktop app start the same server:
//!
//! ```no_run
//! # async fn demo(engine: std::sync::Arc<kivi_engine::session::Engine>) {
//! use kivi_engine::server::{self, ServerConfig};
//!
//! let config = ServerConfig { port: 8080, ..ServerConfig::default() };
//! let handle = server::start(engine, config).expect("port 8080 is free");
//! println!("listening on http://{}/v1", handle.local_addr());
//! // ... later:
//! handle.stop().await;
//! # }
//! ```

mod api;
mod error;
mod fields;
mod meta;
mod params;
mod queue;
mod routes;
mod run;
mod sse;
mod stop;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use api::{KvUsage, PromptTokensDetails, Timings, Usage};

use crate::session::Engine;
use queue::Queue;
use routes::Shared;

/// How long [`ServerHandle::stop`] waits for open responses to end before closing them.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How to serve.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Address to listen on (default 127.0.0.1: this machine only).
    pub host: IpAddr,
    /// Port; 0 picks a free one (see [`ServerHandle::local_addr`]).
    pub port: u16,
    /// When set, every `/v1` request must send `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Allow browser pages from any origin to call the server (CORS).
    pub cors: bool,
    /// Requests that may wait while one runs; more are refused with 429.
    pub queue_capacity: usize,
    /// The model name clients send and `GET /v1/models` lists; empty: the loaded model's
    /// name (its file or folder name).
    pub model_id: String,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 8080,
            token: None,
            cors: false,
            queue_capacity: 16,
            model_id: String::new(),
        }
    }
}

impl ServerConfig {
    /// Whether only this machine can connect (a loopback address).
    pub fn is_loopback(&self) -> bool {
        self.host.is_loopback()
    }
}

/// The token stays out of logs.
impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("cors", &self.cors)
            .field("queue_capacity", &self.queue_capacity)
            .field("model_id", &self.model_id)
            .finish()
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Another program (or another server) listens on the port.
    #[error(
        "port {0} is already in use: stop the program using it, or choose another port \
         (0 picks a free one)"
    )]
    PortInUse(u16),
    /// Listening failed for another reason (an address not on this machine, a
    /// privileged port).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// [`start`] was called outside a Tokio runtime.
    #[error("the server must be started from within a Tokio runtime")]
    NoRuntime,
}

/// A running server. Dropping it stops the server too, without waiting.
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    model_id: String,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// The address the server listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The model name requests use.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The base URL for OpenAI clients, `http://127.0.0.1:8080/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.local_addr)
    }

    /// Stops gracefully: no new connections, waiting requests get 503, running answers
    /// end at the next token (streams finish normally), then the listener closes. Returns
    /// when the port is free.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(STOP_GRACE, &mut task).await.is_err() {
                task.abort();
                let _ = task.await;
            }
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Starts serving `engine` in the background of the current Tokio runtime; returns once
/// the port is bound.
pub fn start(engine: Arc<Engine>, config: ServerConfig) -> Result<ServerHandle, ServerError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| ServerError::NoRuntime)?;
    let addr = SocketAddr::new(config.host, config.port);
    let bind_error = |source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            ServerError::PortInUse(config.port)
        } else {
            ServerError::Bind { addr, source }
        }
    };
    let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    let local_addr = listener.local_addr().map_err(bind_error)?;
    let listener = {
        let _entered = runtime.enter();
        tokio::net::TcpListener::from_std(listener).map_err(bind_error)?
    };
    let model_id = match config.model_id.trim() {
        "" => engine.info().name.clone(),
        id => id.to_string(),
    };
    let shutdown = CancellationToken::new();
    let state = Arc::new(Shared {
        engine,
        model_id: model_id.clone(),
        token: config.token.filter(|t| !t.is_empty()),
        queue: Queue::new(config.queue_capacity),
        shutdown: shutdown.clone(),
        created: meta::unix_now(),
    });
    let app = routes::router(state, config.cors);
    let signal = shutdown.clone().cancelled_owned();
    let task = runtime.spawn(async move {
        // Accept errors are retried inside axum; this ends only on shutdown.
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(signal)
            .await;
    });
    Ok(ServerHandle {
        local_addr,
        model_id,
        shutdown,
        task: Some(task),
    })
}
