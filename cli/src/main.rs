//! `kivi`: KIVI Chat on the command line.

mod args;
mod cmd;
mod download;
mod stream;

use clap::{Parser, Subcommand};

/// KIVI Chat on the command line: local LLMs with a KIVI-quantized KV cache.
#[derive(Parser)]
#[command(name = "kivi", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a continuation of a prompt and stream it to stdout.
    Generate(cmd::generate::GenerateArgs),
    /// Chat interactively, optionally about documents (--file).
    Chat(cmd::chat::ChatArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, ...).
    Serve(cmd::serve::ServeArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Generate(args) => cmd::generate::run(args).await,
            Command::Chat(args) => cmd::chat::run(args).await,
            Command::Serve(args) => cmd::serve::run(args).await,
        }
    })
}
