//! `kivi`: KIVI Chat on the command line.

mod args;
mod cmd;
mod download;
mod eval;
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
    /// Measure decode and prefill speed, KV bytes and peak memory per KV cache setting.
    Bench(cmd::bench::BenchArgs),
    /// Measure perplexity per KV cache setting on fixed windows of a text.
    Ppl(cmd::ppl::PplArgs),
    /// Needle-in-a-haystack retrieval per KV cache setting, with heat maps.
    Needle(cmd::needle::NeedleArgs),
    /// What long contexts need on a Mac, per model and KV cache setting (on paper).
    Plan(cmd::plan::PlanArgs),
    /// One `kivi bench` measurement in a child process (internal).
    #[command(hide = true)]
    BenchWorker(cmd::bench::BenchWorkerArgs),
}

fn main() -> anyhow::Result<()> {
    // SAFETY: the first statement of main: no other thread exists yet.
    unsafe { kivi_engine::backend::openblas::prepare() };
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
            // The measurements are synchronous: the model runs on this thread.
            Command::Bench(args) => cmd::bench::run(args),
            Command::Ppl(args) => cmd::ppl::run(args),
            Command::Needle(args) => cmd::needle::run(args),
            Command::Plan(args) => cmd::plan::run(args),
            Command::BenchWorker(args) => cmd::bench::run_worker(args),
        }
    })
}
