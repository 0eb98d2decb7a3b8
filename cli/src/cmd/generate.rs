//! `kivi generate`: continue a prompt (or answer it as a chat message) and stream the
//! result to stdout.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use kivi_engine::grammar::OutputFormat;
use kivi_engine::session::{Engine, FinishReason, Prompt, Request};
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
    /// Answer with JSON that this JSON schema (a file) accepts: every token is constrained.
    #[arg(long, value_name = "FILE", conflicts_with = "json_object")]
    pub json_schema: Option<PathBuf>,
    /// Answer with a JSON object.
    #[arg(long)]
    pub json_object: bool,
}

impl GenerateArgs {
    /// The output format asked for, its schema read and parsed.
    fn format(&self) -> Result<Option<OutputFormat>> {
        if let Some(path) = &self.json_schema {
            return Ok(Some(OutputFormat::JsonSchema {
                schema: read_schema(path)?,
            }));
        }
        Ok(self.json_object.then_some(OutputFormat::JsonObject))
    }
}

pub(crate) fn read_schema(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the JSON schema {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// Runs `kivi generate`.
pub async fn run(args: GenerateArgs) -> Result<()> {
    let prompt = if args.prompt == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read the prompt from stdin")?
    } else {
        args.prompt.clone()
    };
    let documents = args.documents.documents()?;
    let format = args.format()?;
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
        format: format.clone(),
    };
    let finished = stream::drive(engine.generate(request), args.json).await?;
    if !args.json {
        println!();
        eprintln!("{}", stream::summary(&finished));
    }
    if format.is_some() && finished.reason != FinishReason::Stop {
        // Cut JSON must not pass for an answer: a script reading stdout gets a failure.
        bail!(
            "the answer ended ({:?}) before its JSON was complete: raise --max-tokens",
            finished.reason
        );
    }
    Ok(())
}
