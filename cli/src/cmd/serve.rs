//! `kivi serve`: the OpenAI-compatible HTTP server (`kivi_engine::server`) on one model,
//! until Ctrl-C (or SIGTERM) stops it gracefully.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use kivi_engine::server::{self, ServerConfig};
use kivi_engine::session::{Engine, ModelSource};

use crate::args::ModelArgs;

/// Arguments of `kivi serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on. The default serves this machine only; any other address
    /// (0.0.0.0, a LAN address) lets other machines use the model: set --api-key then.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,
    /// Port to listen on (0 picks a free one and prints it).
    #[arg(long, short = 'p', default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer <KEY>` on every /v1 request.
    #[arg(long, alias = "token", env = "KIVI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Allow web pages from any origin to call the server (CORS), for browser tools.
    #[arg(long)]
    pub cors: bool,
    /// Requests that may wait while one runs; more get HTTP 429.
    #[arg(long, default_value_t = 16)]
    pub queue: usize,
    /// The model name clients send and /v1/models lists (default: the hub repo id, or the
    /// model file's name without extension).
    #[arg(long)]
    pub model_id: Option<String>,
    /// Conversations whose KV caches are kept, so that a request extending one of them
    /// runs only its new tokens.
    #[arg(long, default_value_t = 4)]
    pub cached_conversations: usize,
}

/// Runs `kivi serve`.
pub async fn run(args: ServeArgs) -> Result<()> {
    let mut options = args.model.engine_options()?;
    options.max_cached_conversations = args.cached_conversations.max(1);
    let model_id = args
        .model_id
        .clone()
        .unwrap_or_else(|| match &options.source {
            ModelSource::Hub { repo_id, .. } => repo_id.clone(),
            ModelSource::Path(_) => String::new(),
        });
    let config = ServerConfig {
        host: args.host,
        port: args.port,
        token: args.api_key.clone().filter(|k| !k.is_empty()),
        cors: args.cors,
        queue_capacity: args.queue,
        model_id,
    };
    if !config.is_loopback() {
        eprintln!(
            "warning: listening on {}, not a loopback address: other machines can use this \
             model{}",
            config.host,
            if config.token.is_some() {
                " (with the API key)"
            } else {
                "; set --api-key to require a key"
            }
        );
    }
    let engine = Arc::new(
        Engine::load(options)
            .await
            .context("cannot load the model")?,
    );
    let handle = server::start(engine.clone(), config.clone())
        .with_context(|| format!("cannot start the server on {}:{}", args.host, args.port))?;
    eprintln!(
        "[{} · {} · backend {} · context {} · KV {} · queue {} · {}{}]",
        engine.info().name,
        engine.info().quantization,
        engine.info().backend,
        engine.context_length(),
        args.model.cache,
        config.queue_capacity,
        if config.token.is_some() {
            "API key required"
        } else {
            "no API key"
        },
        if config.cors {
            " · CORS any origin"
        } else {
            ""
        },
    );
    // One line on stdout, for people and for scripts that wait for the server.
    println!(
        "listening on {} (model \"{}\"); Ctrl-C stops",
        handle.base_url(),
        handle.model_id()
    );
    std::io::stdout().flush()?;
    shutdown_signal().await;
    eprintln!("[stopping: finishing open answers]");
    handle.stop().await;
    Ok(())
}

/// Ctrl-C, or SIGTERM from a process manager.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
