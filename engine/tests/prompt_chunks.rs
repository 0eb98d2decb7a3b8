//! A prompt of any length, fed in any chunks, through the model with every kind of cache.
//!
//! For each cache setting (the default first, full precision, then KIVI over bit widths,
//! sinks, rotations, group sizes and key groupings) and every prompt length from 1 to past
//! the first flush (sinks + residual + group + a few), the prompt is fed as the engine
//! feeds it ([`prompt_pieces`]: the body in chunks, the last token alone) whole, token by
//! token and in chunks of 2, 3 and 7. Every way must run, hold every token, and give
//! next-token logits that agree with the prompt fed whole.
//!
//! Why not bit for bit: the cache's bits are a function of the keys and values it is given
//! (`kivi_tests.rs`), but the model's keys after the first layer depend on attention
//! outputs, and those depend on where chunks begin: a chunk's queries read the history
//! held before it (quantized past the window) and its own tokens in full precision (the
//! KIVI paper's prefill), and float32 sums run in another order in a chunk than in a step.
//! Before the first flush every query reads full-precision keys whatever the chunking, so
//! the logits differ by rounding alone; after it, by what reading a group quantized
//! instead of in full precision changes, which the bound below states per bit width.
//!
//! The backend is `KIVI_BACKEND` where it is set (the `mac` stage: MLX in float16), else
//! both runtimes in turn: the host kernels (the Linux default) and MLX's operations in
//! float32 on the CPU (the Mac's graph).

mod offline;

use std::path::{Path, PathBuf};

use kivi_engine::backend::{Backend, Device, Kernels, Precision, BACKEND_ENV};
use kivi_engine::cache::{CacheConfig, CacheState, KvCache, RECOMMENDED};
use kivi_engine::decode::prompt_pieces;
use kivi_engine::loader::{load_local, LoadedModel};

/// The chunkings compared with the prompt fed whole (`None`).
const CHUNKS: [usize; 4] = [1, 2, 3, 7];

/// The runtimes under test.
fn backends() -> Vec<Backend> {
    match std::env::var(BACKEND_ENV) {
        Ok(v) if !v.trim().is_empty() => vec![v.parse().expect("KIVI_BACKEND names a backend")],
        _ => vec![Backend::HOST, Backend::mlx(Device::Cpu, Precision::F32)],
    }
}

/// The cache settings, the default first.
fn settings(names: &[&str]) -> Vec<CacheConfig> {
    let mut all = vec![RECOMMENDED, "full"];
    all.extend(names);
    all.iter()
        .map(|n| n.parse().unwrap_or_else(|e| panic!("{n}: {e}")))
        .collect()
}

/// Prompt lengths from 1 to a few past the first flush of `config`.
fn lengths(config: CacheConfig) -> usize {
    let first_flush = match config {
        CacheConfig::Full => 40,
        CacheConfig::Kivi(k) => k.sinks() + k.residual_length() + k.group_size(),
    };
    first_flush + 8
}

/// A fresh set of caches for `loaded`.
fn caches(loaded: &LoadedModel, config: CacheConfig) -> Vec<Box<dyn KvCache>> {
    config.make_layers(loaded.model.config(), loaded.model.backend())
}

/// Copies of `held`, through the caches' saved state (as a saved conversation is restored).
fn fork(
    loaded: &LoadedModel,
    config: CacheConfig,
    held: &[Box<dyn KvCache>],
) -> Vec<Box<dyn KvCache>> {
    let mut copies = caches(loaded, config);
    for (copy, cache) in copies.iter_mut().zip(held) {
        let state: CacheState = cache.state().expect("a cache saves its state");
        copy.restore(state).expect("a cache restores its own state");
    }
    copies
}

/// Feeds `pieces` and returns the last position's logits, checking that every cache then
/// holds `expected` tokens.
fn feed<'a>(
    loaded: &LoadedModel,
    caches: &mut [Box<dyn KvCache>],
    pieces: impl IntoIterator<Item = &'a [u32]>,
    expected: usize,
    what: &dyn Fn() -> String,
) -> Vec<f32> {
    let mut logits = None;
    for piece in pieces {
        let hidden = loaded
            .model
            .forward(piece, caches)
            .unwrap_or_else(|e| panic!("{}: {e}", what()));
        logits = Some(loaded.model.last_logits(&hidden).unwrap());
    }
    for (layer, cache) in caches.iter().enumerate() {
        assert_eq!(cache.len(), expected, "{}: layer {layer}", what());
    }
    let logits = logits
        .expect("a piece")
        .as_dtype(mlx_rs::Dtype::Float32)
        .unwrap();
    logits.eval().unwrap();
    logits.as_slice::<f32>().to_vec()
}

/// Next-token logits after each prompt length `1..=tokens.len()` that `at` accepts, the
/// prompt fed in `chunk`-token pieces as the engine feeds it (`None`: whole).
fn sweep(
    loaded: &LoadedModel,
    config: CacheConfig,
    tokens: &[u32],
    chunk: Option<usize>,
    at: &dyn Fn(usize) -> bool,
) -> Vec<Option<Vec<f32>>> {
    let backend = loaded.model.backend();
    let mut rows = Vec::with_capacity(tokens.len());
    // The caches after the body's whole chunks, advanced as the prompt grows; each length
    // feeds its last partial chunk and its last token to a copy.
    let mut base = caches(loaded, config);
    let mut held = 0;
    for len in 1..=tokens.len() {
        let what = || format!("{config} on {backend}, {len} tokens in chunks of {chunk:?}");
        let prompt = &tokens[..len];
        let row = match chunk {
            _ if !at(len) => None,
            None => Some(feed(
                loaded,
                &mut caches(loaded, config),
                prompt_pieces(prompt, usize::MAX),
                len,
                &what,
            )),
            Some(chunk) => {
                let body = len - 1;
                let whole = body / chunk * chunk;
                if whole > held {
                    // Lengths skipped since the last row leave several chunks to feed.
                    let pieces = tokens[held..whole].chunks(chunk);
                    feed(loaded, &mut base, pieces, whole, &what);
                    held = whole;
                }
                let mut copy = fork(loaded, config, &base);
                let rest = prompt_pieces(&prompt[whole..], chunk);
                Some(feed(loaded, &mut copy, rest, len, &what))
            }
        };
        rows.push(row);
    }
    rows
}

/// The largest difference between two rows of logits, relative to the larger row's
/// spread (its largest minus its smallest logit), so that one bound serves models whose
/// logits are 1 in size and models whose logits are 30.
fn difference(a: &[f32], b: &[f32]) -> f32 {
    let spread = |r: &[f32]| {
        let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let min = r.iter().copied().fold(f32::INFINITY, f32::min);
        max - min
    };
    let worst = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    worst / spread(a).max(spread(b)).max(f32::MIN_POSITIVE)
}

/// The agreement required: `before` while every query reads full-precision keys, `after`
/// once some read quantized ones (per the smaller of the key and value bit widths).
struct Bound {
    before: f32,
    after: [f32; 2],
}

impl Bound {
    fn of(&self, config: CacheConfig, len: usize) -> f32 {
        match config {
            CacheConfig::Kivi(k) if flushed(config, len) => {
                match k.key_bits().min(k.value_bits()) {
                    2 => self.after[0],
                    _ => self.after[1],
                }
            }
            _ => self.before,
        }
    }
}

/// Whether the next token's step, after `len - 1` prompt tokens, reads quantized groups.
fn flushed(config: CacheConfig, len: usize) -> bool {
    match config {
        CacheConfig::Full => false,
        CacheConfig::Kivi(k) => len > k.sinks() + k.residual_length() + k.group_size(),
    }
}

/// Runs the sweep for every setting on each of `backends` and checks each chunking against
/// the prompt fed whole.
fn check(
    model: &Path,
    tokens: &[u32],
    names: &[&str],
    backends: &[Backend],
    whole_every: usize,
    bound: impl Fn(Backend) -> Bound,
) {
    for &backend in backends {
        let loaded = load_local(model, backend).unwrap_or_else(|e| panic!("{backend}: {e}"));
        let bound = bound(backend);
        for config in settings(names) {
            let tokens = &tokens[..lengths(config).min(tokens.len())];
            // The prompt fed whole at every `whole_every`-th length, and at every length
            // while the sinks fill and around the first flush.
            let whole_at = |len: usize| {
                let (sinks, flush) = match config {
                    CacheConfig::Full => (0, 0),
                    CacheConfig::Kivi(k) => (k.sinks(), lengths(config) - 8),
                };
                len.is_multiple_of(whole_every) || len <= sinks + 8 || len + 4 >= flush
            };
            let whole = sweep(&loaded, config, tokens, None, &whole_at);
            for chunk in CHUNKS {
                let rows = sweep(&loaded, config, tokens, Some(chunk), &whole_at);
                assert!(rows
                    .iter()
                    .zip(&whole)
                    .all(|(r, w)| r.is_some() == w.is_some()));
                // The largest difference before the first flush, and after it.
                let mut worst = [0f32; 2];
                for (i, (got, want)) in rows.iter().zip(&whole).enumerate() {
                    let (len, (Some(got), Some(want))) = (i + 1, (got, want)) else {
                        continue;
                    };
                    let d = difference(got, want);
                    let after = usize::from(flushed(config, len));
                    worst[after] = worst[after].max(d);
                    assert!(
                        d <= bound.of(config, len),
                        "{config} on {backend}: {len} tokens in chunks of {chunk}: logits \
                         differ from the prompt fed whole by {d:.2e} of their spread"
                    );
                }
                println!(
                    "{config} on {backend}, chunks of {chunk}, lengths 1..={}: largest \
                     difference from whole {:.1e} of the spread before the first flush, \
                     {:.1e} after",
                    tokens.len(),
                    worst[0],
                    worst[1]
                );
            }
        }
    }
}

fn tiny_mistral() -> PathBuf {
    offline::workspace_root().join("engine/tests/fixtures/tiny-mistral")
}

/// Every setting the cache offers, on the tiny Mistral (head dim 32, grouped-query
/// heads): its steps take milliseconds, so the whole grid runs.
#[test]
fn every_setting_and_chunking_agrees_on_the_tiny_model() {
    let tokens: Vec<u32> = (0..200u32).map(|i| (i * 37 + 11) % 251).collect();
    let names = [
        // Plain KIVI, each bit width pair.
        "k4v2-g32-r32",
        "k2v2-g32-r32",
        "k4v4-g32-r32",
        "k2v4-g32-r32",
        // Sinks, with and without each rotation.
        "k4v2-g32-r32-s4",
        "k2v2-g32-r32-s16",
        "k4v2-g32-r32-s4-rot",
        "k2v2-g32-r32-s16-rot",
        "k4v4-g32-r32-rotk",
        "k2v4-g32-r32-s4-rotv",
        "k2v2-g32-r32-s4-rota",
        "k4v2-g32-r32-rota",
        // Other groups, residual lengths and key groupings.
        "k4v2-g64-r64-s4-rot",
        "k2v2-g128-r0",
        "k4v2-g32-r0-s4",
        "k2v2-g32-r32-per-token",
    ];
    // Measured (`prompt_chunks -- --nocapture`, docs/benchmarks.md): before the first flush
    // at most 1.9e-5 of the spread on either runtime in float32; after it 2.0e-2 where a
    // width is 2 bits, 1.3e-3 where both are 4.
    check(
        &tiny_mistral(),
        &tokens,
        &names,
        &backends(),
        1,
        |backend| {
            match backend.precision() {
                Precision::F32 => Bound {
                    before: 1e-4,
                    after: [5e-2, 5e-3],
                },
                // Float16 rounds every activation to 11 bits.
                _ => Bound {
                    before: 1e-2,
                    after: [5e-2, 1e-2],
                },
            }
        },
    );
}

/// Gemma 3's layers alternate an 8-token sliding window (their own cache) with global
/// layers (the setting's cache), on its tiny model: the prompt crosses the window many
/// times and the KIVI layers' first flush.
#[test]
fn window_and_global_layers_agree_on_the_tiny_gemma3() {
    let tokens: Vec<u32> = (0..200u32).map(|i| (i * 37 + 11) % 251).collect();
    let path = offline::workspace_root().join("engine/tests/fixtures/tiny-gemma3");
    // Measured on the host runtime (`prompt_chunks -- --nocapture`): before the first
    // flush at most 1.3e-4 of the spread (its random norms and four norms per block make
    // it touchier than the Mistral); after it 4.1e-2 at 2 bits, 1.1e-2 for K4V2.
    check(
        &path,
        &tokens,
        &["k2v2-g32-r32-s4", "k4v4-g32-r32-rot"],
        &backends(),
        1,
        |backend| match backend.precision() {
            Precision::F32 => Bound {
                before: 5e-4,
                after: [8e-2, 1.5e-2],
            },
            _ => Bound {
                before: 1e-2,
                after: [8e-2, 2e-2],
            },
        },
    );
}

/// The default, full precision and a 2-bit KIVI+ cache with a short window on the offline
/// SmolLM2 (30 layers, 3 KV heads), the model the default shipped with, on the host
/// runtime in float32 (`host-f32`: its steps and chunks both take float32 inputs, so that
/// they differ by rounding; `host_steps.rs` holds the default's int8 step inputs to it).
/// The prompt is read at every eighth length, and at every length while the sinks fill and
/// around the first flush (the tiny model's test reads every length). Where `KIVI_BACKEND` names
/// an MLX backend this is skipped: MLX's float32 graph is the tiny model's test above, and
/// its float16 one too slow on x86 for this many steps.
#[test]
fn the_default_and_full_caches_agree_on_smollm2() {
    if backends().iter().all(|b| b.kernels() != Kernels::Host) {
        println!("skipped: KIVI_BACKEND names an MLX backend");
        return;
    }
    let path = offline::smollm2_path();
    let loaded = load_local(&path, Backend::HOST_F32).unwrap();
    let text = offline::workspace_root().join(".data/texts/moby-dick/chapter_97.txt");
    let text = std::fs::read_to_string(text).expect("scripts/setup.sh wrote the texts");
    let tokens = loaded.tokenizer.encode(&text, false).unwrap();
    drop(loaded);
    let settings = ["k2v2-g32-r32-s4-rot"];
    check(&path, &tokens, &settings, &[Backend::HOST_F32], 8, |_| {
        Bound {
            before: 1e-3,
            after: [0.2, 0.05],
        }
    });
}
