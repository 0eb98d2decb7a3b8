//! Flags shared by the subcommands: the model, the KV cache, sampling, output.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use kivi_engine::backend::Backend;
use kivi_engine::cache::{CacheConfig, RECOMMENDED};
use kivi_engine::document::DocumentKind;
use kivi_engine::sampling::SamplingParams;
use kivi_engine::session::{Document, EngineOptions, ModelSource};

/// The offline model the project's set-up fetches, relative to the repository root.
const DEFAULT_MODEL: &str = ".data/models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Which model to run and how.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// A .gguf file, a Hugging Face model folder, or a hub repo id (owner/name).
    /// Default: the offline SmolLM2 under .data/models of this repository.
    #[arg(long, short, env = "KIVI_MODEL")]
    pub model: Option<String>,
    /// Where and how the model runs: host (the CPU kernels, int8 inputs to the weight
    /// products), host-f32 (float32 inputs), mlx-cpu or mlx-gpu, optionally with -f32, -f16
    /// or -bf16 (mlx-gpu-f16 is a Mac's). Default: KIVI_BACKEND,
    /// else the platform's (mlx-gpu-f16 on Apple silicon, host elsewhere).
    #[arg(long)]
    pub backend: Option<Backend>,
    /// Context window in tokens (default: the model's), or `fit`: the longest the model
    /// allows and this machine's available memory holds with the chosen cache.
    #[arg(long)]
    pub context: Option<ContextArg>,
    /// KV cache: `full`, or a KIVI name `k<2|4>v<2|4>[-g<group>][-r<residual>][-s<sinks>]
    /// [-rot|-rotk|-rotv|-rota]`, e.g. `k4v4-g32-r128` or `k2v2-g32-r128-s4-rota` (`-rota`:
    /// each head rotated only where that quantizes it better).
    #[arg(long, default_value = RECOMMENDED)]
    pub cache: CacheConfig,
    /// Prompt tokens per prefill step.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
}

/// `--context`: a number of tokens, or `fit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextArg {
    /// This many tokens.
    Tokens(usize),
    /// The longest that fits this machine.
    Fit,
}

impl std::str::FromStr for ContextArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("fit") {
            return Ok(ContextArg::Fit);
        }
        match s.trim().parse() {
            Ok(n) if n > 0 => Ok(ContextArg::Tokens(n)),
            _ => Err(format!("{s:?} is neither a number of tokens nor `fit`")),
        }
    }
}

impl ModelArgs {
    /// The backend the flags (or `KIVI_BACKEND`, or the platform) choose.
    pub fn backend(&self) -> Result<Backend> {
        chosen(self.backend)
    }

    /// Engine options from the flags.
    pub fn engine_options(&self) -> Result<EngineOptions> {
        let source = self.source()?;
        let hub = matches!(source, ModelSource::Hub { .. });
        let mut options = EngineOptions::new(source);
        if hub {
            options.download_progress = crate::download::progress_bar();
        }
        options.cache = self.cache;
        match self.context {
            Some(ContextArg::Tokens(n)) => options.context_length = Some(n),
            Some(ContextArg::Fit) => options.fit_context = true,
            None => {}
        }
        options.prefill_chunk = self.prefill_chunk;
        options.backend = Some(self.backend()?);
        Ok(options)
    }

    fn source(&self) -> Result<ModelSource> {
        let Some(model) = &self.model else {
            return default_model().map(ModelSource::Path);
        };
        let path = PathBuf::from(model);
        if path.exists() {
            return Ok(ModelSource::Path(path));
        }
        // `owner/name` that is not a local path: a hub repository.
        let parts: Vec<&str> = model.split('/').collect();
        if parts.len() == 2 && parts.iter().all(|p| !p.is_empty() && !p.starts_with('.')) {
            return Ok(ModelSource::Hub {
                repo_id: model.clone(),
                revision: None,
                file: None,
            });
        }
        bail!(
            "model {model:?} is neither an existing file or folder nor a hub repo id (owner/name)"
        )
    }
}

/// `flag`, or else the backend `KIVI_BACKEND` or the platform chooses.
pub fn chosen(flag: Option<Backend>) -> Result<Backend> {
    match flag {
        Some(backend) => Ok(backend),
        None => Backend::chosen().context("KIVI_BACKEND names no backend"),
    }
}

/// The offline SmolLM2, looked for above the working directory and the executable.
fn default_model() -> Result<PathBuf> {
    match find_offline(DEFAULT_MODEL) {
        Some(path) => Ok(path),
        None => bail!(
            "no --model given and the offline model {DEFAULT_MODEL} was not found above the \
             current folder; run scripts/setup.sh data, or pass --model / set KIVI_MODEL"
        ),
    }
}

/// The file at `relative` (from the repository root) in the working directory, the
/// executable's folder or any folder above them: where the offline data lies when the
/// binary runs from the repository or from its target folder.
pub fn find_offline(relative: &str) -> Option<PathBuf> {
    let mut starts: Vec<PathBuf> = std::env::current_dir().into_iter().collect();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        starts.push(dir);
    }
    starts
        .iter()
        .flat_map(|start| start.ancestors())
        .map(|dir| dir.join(relative))
        .find(|candidate| candidate.is_file())
}

/// Sampling flags.
#[derive(Debug, Args)]
pub struct SamplingArgs {
    /// Softmax temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus sampling threshold (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Keep only the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Penalty for recently generated tokens (1 = off).
    #[arg(long, default_value_t = 1.1)]
    pub repetition_penalty: f32,
    /// Random seed for reproducible sampling.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Most tokens to generate per answer.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
}

impl SamplingArgs {
    /// The engine's sampling parameters.
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            ..SamplingParams::default()
        }
    }
}

/// Documents to put into the context.
#[derive(Debug, Args)]
pub struct DocumentArgs {
    /// A text file to answer questions about (repeatable).
    #[arg(long = "file", short = 'f')]
    pub files: Vec<PathBuf>,
}

impl DocumentArgs {
    /// Reads the files: `.txt`, `.md` and `.pdf` as the app reads them (encodings detected,
    /// PDF text extracted), any other file as UTF-8 text.
    pub fn documents(&self) -> Result<Vec<Document>> {
        self.files
            .iter()
            .map(|path| {
                if DocumentKind::from_path(path).is_ok() {
                    let doc = kivi_engine::document::extract(path)?;
                    return Ok(Document {
                        name: doc.name,
                        text: doc.text,
                    });
                }
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read document {}", path.display()))?;
                let name = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                Ok(Document { name, text })
            })
            .collect()
    }
}
