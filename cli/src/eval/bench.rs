//! Speed and memory of each cache configuration: one child process per measurement, so
//! that every configuration's peak resident memory is its own.
//!
//! The parent (`kivi bench`) re-runs its own executable with the hidden `bench-worker`
//! subcommand; the child loads the model, prefills a context from the corpus, decodes a
//! few greedy tokens, and prints one JSON [`Sample`] line. Configurations are interleaved
//! in rounds (every configuration once per round, in a rotated order), so that a machine
//! that slows down or speeds up during the run affects them alike and the per-round
//! ratios against the full-precision cache stay fair.
//!
//! With a response format (`kivi bench --json-schema FILE`) each child also decodes the
//! same tokens again, from a second prefill, constrained to the schema: the ratio of the
//! two decode speeds, taken in one process moments apart, is what the mask costs a token.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use kivi_engine::backend::Backend;
use kivi_engine::cache::{CacheConfig, KvCache, LayerKvStats};
use kivi_engine::decode::Decoder;
use kivi_engine::eval::prefill;
use kivi_engine::grammar::{Constraint, OutputFormat, TokenTable};
use kivi_engine::loader::LoadedModel;
use kivi_engine::sampling::{Sampler, SamplingParams};
use kivi_engine::stats::KvStats;
use mlx_rs::Array;
use serde::{Deserialize, Serialize};

use super::corpus;
use super::memory::{current_resident_bytes, peak_resident_bytes};
use super::summary::Spread;

/// What one child measures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerPlan {
    /// The cache.
    pub cache: CacheConfig,
    /// Tokens held at the end: `context - decode_tokens` prefilled, then decoded.
    pub context: usize,
    /// Tokens decoded (timed).
    pub decode_tokens: usize,
    /// Prompt tokens per prefill step.
    pub prefill_chunk: usize,
    /// Also decode under this format, timed apart.
    #[serde(default)]
    pub format: Option<OutputFormat>,
}

/// One child's measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    /// The cache's short name.
    pub config: String,
    /// Tokens held at the end.
    pub context: usize,
    /// Prompt tokens prefilled.
    pub prefill_tokens: usize,
    /// Prefill speed.
    pub prefill_tokens_per_s: f64,
    /// Tokens decoded.
    pub decode_tokens: usize,
    /// Decode speed, over every decoded token.
    pub decode_tokens_per_s: f64,
    /// The KV cache at the end, summed over layers, from the real buffers.
    pub kv: LayerKvStats,
    /// Resident memory once the model was loaded and warmed up.
    pub rss_after_load_bytes: u64,
    /// Peak resident memory of the child (before the constrained decode).
    pub peak_rss_bytes: u64,
    /// Decode speed of the same steps constrained to the plan's format.
    #[serde(default)]
    pub constrained_decode_tokens_per_s: Option<f64>,
}

/// Greedy decoding with the engine's own loop (the sampler on the device; on the MLX
/// backends each step built before the previous token is read): `tokens` steps fed after
/// `context`, whose next-token logits are `logits`, and the token after the last one read.
fn decode(
    loaded: &LoadedModel,
    caches: &mut [Box<dyn KvCache>],
    logits: &Array,
    mut context: Vec<u32>,
    tokens: usize,
    constraint: Option<Constraint>,
) -> Result<()> {
    let sampler = Sampler::new(SamplingParams::greedy())?;
    let mut decoder = Decoder::new(&loaded.model, sampler, logits, &context, constraint)?;
    for step in 0..=tokens {
        let more = step < tokens;
        let token = decoder.next_token(&loaded.model, caches, &context, more)?;
        context.push(token);
    }
    Ok(())
}

/// Runs one measurement in this process (the `bench-worker` child).
pub fn measure(loaded: &LoadedModel, text: &str, plan: &WorkerPlan) -> Result<Sample> {
    if plan.decode_tokens == 0 || plan.context <= plan.decode_tokens {
        bail!(
            "the context ({}) must be longer than the decoded tokens ({}), which must be \
             at least 1",
            plan.context,
            plan.decode_tokens
        );
    }
    let prompt_len = plan.context - plan.decode_tokens;
    let prompt = corpus::leading_tokens(&loaded.tokenizer, text, prompt_len)?;
    // Warm-up on throwaway caches of the same kind, through the same decode loop: MLX's
    // first operations (the sampler's among them), page faults on the weights and thread
    // start-up are not what is measured.
    {
        let mut caches = plan
            .cache
            .make_layers(loaded.model.config(), loaded.model.backend());
        let warm = &prompt[..16.min(prompt_len)];
        let logits = prefill(&loaded.model, &mut caches, warm, 16)?;
        decode(loaded, &mut caches, &logits, warm.to_vec(), 2, None)?;
    }
    let rss_after_load_bytes = current_resident_bytes();
    let mut caches = plan
        .cache
        .make_layers(loaded.model.config(), loaded.model.backend());
    let began = Instant::now();
    let logits = prefill(&loaded.model, &mut caches, &prompt, plan.prefill_chunk)?;
    let prefill_secs = began.elapsed().as_secs_f64();
    let began = Instant::now();
    decode(
        loaded,
        &mut caches,
        &logits,
        prompt.clone(),
        plan.decode_tokens,
        None,
    )?;
    let decode_secs = began.elapsed().as_secs_f64();
    let kv = KvStats::from_caches(&caches).total;
    let peak_rss_bytes = peak_resident_bytes();
    drop(caches);
    let constrained_decode_tokens_per_s = match &plan.format {
        Some(format) => Some(constrained_decode(loaded, plan, &prompt, format)?),
        None => None,
    };
    Ok(Sample {
        config: plan.cache.to_string(),
        context: plan.context,
        prefill_tokens: prompt_len,
        prefill_tokens_per_s: prompt_len as f64 / prefill_secs,
        decode_tokens: plan.decode_tokens,
        decode_tokens_per_s: plan.decode_tokens as f64 / decode_secs,
        kv,
        rss_after_load_bytes,
        peak_rss_bytes,
        constrained_decode_tokens_per_s,
    })
}

/// Decode speed under `format` after a second prefill of `prompt`: the token table and
/// the schema's grammar are built before the clock starts (once per model and once per
/// request in the engine), so the time is the decode steps' and their masks'.
fn constrained_decode(
    loaded: &LoadedModel,
    plan: &WorkerPlan,
    prompt: &[u32],
    format: &OutputFormat,
) -> Result<f64> {
    let table = TokenTable::new(&loaded.tokenizer)?;
    let constraint = Constraint::new(&table, format)?;
    let mut caches = plan
        .cache
        .make_layers(loaded.model.config(), loaded.model.backend());
    let logits = prefill(&loaded.model, &mut caches, prompt, plan.prefill_chunk)?;
    let began = Instant::now();
    decode(
        loaded,
        &mut caches,
        &logits,
        prompt.to_vec(),
        plan.decode_tokens,
        Some(constraint),
    )?;
    Ok(plan.decode_tokens as f64 / began.elapsed().as_secs_f64())
}

/// How the parent starts a child.
pub struct Spawner {
    /// This executable.
    pub exe: PathBuf,
    /// The model path passed on.
    pub model: PathBuf,
    /// The corpus passed on.
    pub text: PathBuf,
    /// The backend passed on.
    pub backend: Backend,
    /// Also decode under this format (`--json-schema`).
    pub format: Option<OutputFormat>,
}

impl Spawner {
    /// Runs one measurement in a new process and reads its sample.
    pub fn run(&self, plan: &WorkerPlan) -> Result<Sample> {
        let output = Command::new(&self.exe)
            .arg("bench-worker")
            .arg("--model")
            .arg(&self.model)
            .arg("--text")
            .arg(&self.text)
            .arg("--backend")
            .arg(self.backend.to_string())
            .arg("--plan")
            .arg(serde_json::to_string(plan)?)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot start {}", self.exe.display()))?;
        if !output.status.success() {
            bail!(
                "the measurement of {} at {} tokens failed ({}): {}",
                plan.cache,
                plan.context,
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout.lines().rev().find(|l| l.starts_with('{'));
        let line = line.context("the measurement child printed no result")?;
        serde_json::from_str(line).context("the measurement child printed an unreadable result")
    }
}

/// One configuration at one context, over every round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// The cache's short name.
    pub config: String,
    /// The settings.
    pub cache: CacheConfig,
    /// Tokens held at the end.
    pub context: usize,
    /// Prefill tokens per second.
    pub prefill_tokens_per_s: Spread,
    /// Decode tokens per second.
    pub decode_tokens_per_s: Spread,
    /// Per-round prefill speed over the full-precision cache's in the same round.
    pub prefill_vs_full: Option<Spread>,
    /// Per-round decode speed over the full-precision cache's in the same round.
    pub decode_vs_full: Option<Spread>,
    /// Per-sample decode speed under the format over the same child's plain decode.
    #[serde(default)]
    pub constrained_vs_plain: Option<Spread>,
    /// The KV cache at the end (summed over layers, from the real buffers).
    pub kv: LayerKvStats,
    /// `fp16_bytes / held_bytes`: how many times smaller than float16 the cache is.
    pub compression_vs_fp16: f64,
    /// Peak resident memory of the child.
    pub peak_rss_bytes: Spread,
    /// Resident memory after loading and warm-up.
    pub rss_after_load_bytes: Spread,
    /// (full's median peak - this peak) / (full's held KV bytes - these held KV bytes):
    /// how much of the KV saving shows in the process's peak memory.
    pub peak_saving_over_kv_saving: Option<f64>,
    /// Every round's sample.
    pub samples: Vec<Sample>,
}

/// `kivi bench`'s result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    /// Model file.
    pub model: String,
    /// Where and how it ran (`host`, `mlx-gpu-f16`, ...).
    pub backend: Backend,
    /// Corpus the contexts were cut from.
    pub text: String,
    /// Context lengths.
    pub contexts: Vec<usize>,
    /// Rounds.
    pub repeats: usize,
    /// Tokens decoded per measurement.
    pub decode_tokens: usize,
    /// Prompt tokens per prefill step.
    pub prefill_chunk: usize,
    /// One entry per configuration and context, contexts outermost.
    pub entries: Vec<Entry>,
}

/// Runs every configuration at every context, `repeats` rounds, interleaved.
pub fn run_all(
    spawner: &Spawner,
    configs: &[CacheConfig],
    contexts: &[usize],
    repeats: usize,
    decode_tokens: usize,
    prefill_chunk: usize,
    mut progress: impl FnMut(usize, &Sample),
) -> Result<Vec<Entry>> {
    // samples[round][context][config]
    let mut samples = vec![vec![vec![None; configs.len()]; contexts.len()]; repeats];
    for (round, per_round) in samples.iter_mut().enumerate() {
        for (ci, &context) in contexts.iter().enumerate() {
            for k in 0..configs.len() {
                // Rotate the order each round: no configuration always runs first.
                let index = (k + round) % configs.len();
                let plan = WorkerPlan {
                    cache: configs[index],
                    context,
                    decode_tokens,
                    prefill_chunk,
                    format: spawner.format.clone(),
                };
                let sample = spawner.run(&plan)?;
                progress(round, &sample);
                per_round[ci][index] = Some(sample);
            }
        }
    }
    let full = configs.iter().position(|c| *c == CacheConfig::Full);
    let mut entries = Vec::new();
    for (ci, &context) in contexts.iter().enumerate() {
        let at = |round: usize, k: usize| -> &Sample {
            samples[round][ci][k].as_ref().expect("every run filled")
        };
        for (k, config) in configs.iter().enumerate() {
            let runs: Vec<Sample> = (0..repeats).map(|r| at(r, k).clone()).collect();
            let spread =
                |f: &dyn Fn(&Sample) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
            let ratio = |f: &dyn Fn(&Sample) -> f64| {
                full.map(|fi| {
                    let values: Vec<f64> =
                        (0..repeats).map(|r| f(at(r, k)) / f(at(r, fi))).collect();
                    Spread::of(&values)
                })
            };
            let kv = runs[0].kv;
            entries.push(Entry {
                config: config.to_string(),
                cache: *config,
                context,
                prefill_tokens_per_s: spread(&|s| s.prefill_tokens_per_s),
                decode_tokens_per_s: spread(&|s| s.decode_tokens_per_s),
                prefill_vs_full: ratio(&|s| s.prefill_tokens_per_s),
                decode_vs_full: ratio(&|s| s.decode_tokens_per_s),
                constrained_vs_plain: runs
                    .iter()
                    .map(|s| {
                        s.constrained_decode_tokens_per_s
                            .map(|c| c / s.decode_tokens_per_s)
                    })
                    .collect::<Option<Vec<f64>>>()
                    .map(|r| Spread::of(&r)),
                kv,
                compression_vs_fp16: if kv.held_bytes == 0 {
                    1.0
                } else {
                    kv.fp16_bytes as f64 / kv.held_bytes as f64
                },
                peak_rss_bytes: spread(&|s| s.peak_rss_bytes as f64),
                rss_after_load_bytes: spread(&|s| s.rss_after_load_bytes as f64),
                peak_saving_over_kv_saving: None,
                samples: runs,
            });
        }
    }
    fill_memory_savings(&mut entries);
    Ok(entries)
}

/// Sets `peak_saving_over_kv_saving` against the full-precision entry of each context.
fn fill_memory_savings(entries: &mut [Entry]) {
    let fulls: Vec<(usize, f64, u64)> = entries
        .iter()
        .filter(|e| e.cache == CacheConfig::Full)
        .map(|e| (e.context, e.peak_rss_bytes.median, e.kv.held_bytes))
        .collect();
    for e in entries.iter_mut().filter(|e| e.cache != CacheConfig::Full) {
        if let Some(&(_, peak, held)) = fulls.iter().find(|f| f.0 == e.context) {
            let kv_saved = held as f64 - e.kv.held_bytes as f64;
            if kv_saved > 0.0 {
                e.peak_saving_over_kv_saving = Some((peak - e.peak_rss_bytes.median) / kv_saved);
            }
        }
    }
}

/// The file name of `path` for reports.
pub fn display_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}
