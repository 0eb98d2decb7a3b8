//! `kivi generate`: continue a prompt (or answer it as a chat message) and stream the
//! result to stdout.

use anyhow::{Context, Result};
use clap::Args;
use kivi_engine::session::{Engine, Prompt, Request};
use kivi_engine::tokenizer::{Message, Role};

use crate::args::{DocumentArgs, ModelArgs, SamplingArgs};
use crate::stream;

/// Arguments of `kivi generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The prompt ("-" reads it from stdin).
    pub prompt: String,
    /// Send the prompt as a user message through the chat template instead of
    /// continuing it as plain text (implied by --file).
    #[arg(long)]
    pub chat: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub documents: DocumentArgs,
    /// Print every event (tokens, progress, statistics) as a JSON line instead.
    #[arg(long)]
    pub json: bool,
}

/// Runs `kivi generate`.
pub async fn run(args: GenerateArgs) -> Result<()> {
    let prompt = if args.prompt == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read the prompt from stdin")?
    } else {
        args.prompt.clone()
    };
    let documents = args.documents.documents()?;
    let engine = Engine::load(args.model.engine_options()?)
        .await
        .context("cannot load the model")?;
    if !args.json {
        eprintln!(
            "[{} · {} · backend {} · context {}]",
            engine.info().name,
            engine.info().quantization,
            engine.info().backend,
            engine.context_length()
        );
    }
    let prompt = if args.chat || !documents.is_empty() {
        Prompt::Chat {
            messages: vec![Message::new(Role::User, prompt)],
            documents,
        }
    } else {
        Prompt::Text(prompt)
    };
    let request = Request {
        prompt,
        sampling: args.sampling.params(),
        max_tokens: args.sampling.max_tokens,
        cache: None,
    };
    let finished = stream::drive(engine.generate(request), args.json).await?;
    if !args.json {
        println!();
        eprintln!("{}", stream::summary(&finished));
    }
    Ok(())
}
