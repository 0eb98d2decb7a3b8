//! Whole-model decode step time per KV cache, without a prefill: every layer's cache is
//! filled with random keys and values of the model's shapes, then one-token steps run
//! through the real network, the configurations interleaved round by round.
//!
//! `cargo run --release -p kivi-engine --example decode_step -- [MODEL] [CONTEXT] [CONFIGS]`
//!
//! Defaults: the offline SmolLM2 GGUF, 4096 tokens, `full,k4v4-g32-r128,k2v2-g32-r32`.
//! Prints the median and minimum step (forward + last logits, evaluated) per
//! configuration and each median's ratio to the first configuration's.
//! `DECODE_STEP_ROUNDS` (default 5) rounds of `DECODE_STEP_STEPS` (default 8) steps;
//! `DECODE_STEP_PATHS=host,mlx` runs every configuration both on the host step and on the
//! MLX path (default: `host`, or `mlx` where host steps are unavailable);
//! `DECODE_STEP_WINDOWS=host,mlx` runs every KIVI configuration both with its residual
//! window appended on the host and through MLX operations (default: `host`).
//!
//! Configurations sharing one process are not independent: at 8192 tokens the full cache
//! steps at 11.6 tokens/s alone and at 9.5 beside a K4V4 configuration (K4V4: 13.1
//! either way), because its BLAS threads then share the two cores with rayon's kernel
//! threads (with `RAYON_NUM_THREADS=1` it is 11.1). Use it to compare variants of one
//! cache kind (paths, windows, kernels) and `kivi bench`, one process per
//! configuration, for ratios between cache kinds.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Instant,
};

use kivi_engine::{
    cache::{CacheConfig, CacheError, KiviCache, KvCache, LayerKvStats},
    loader::load_local,
};
use mlx_rs::{random, transforms::eval, Array};

/// A layer cache that adds the time its `attend` takes (output evaluated) to `spent`, so
/// a step splits into attention and everything else.
struct Timed {
    inner: Box<dyn KvCache>,
    spent: Arc<Mutex<f64>>,
}

impl KvCache for Timed {
    fn attend(&mut self, q: &Array, k: &Array, v: &Array, scale: f32) -> Result<Array, CacheError> {
        let began = Instant::now();
        let out = self.inner.attend(q, k, v, scale)?;
        eval([&out])?;
        *self.spent.lock().expect("not poisoned") += began.elapsed().as_secs_f64() * 1e3;
        Ok(out)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn truncate(&mut self, len: usize) -> Result<usize, CacheError> {
        self.inner.truncate(len)
    }
    fn stats(&self) -> LayerKvStats {
        self.inner.stats()
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: the first statement of main: no other thread exists yet.
    unsafe { kivi_engine::device::openblas::select_core() };
    let mut args = std::env::args().skip(1);
    let model = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.data/models")));
    let context: usize = args.next().map_or(Ok(4096), |a| a.parse())?;
    let configs: Vec<CacheConfig> = args
        .next()
        .unwrap_or_else(|| "full,k4v4-g32-r128,k2v2-g32-r32".into())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let rounds = env_usize("DECODE_STEP_ROUNDS", 5);
    let steps = env_usize("DECODE_STEP_STEPS", 8);

    let choice = |name: &str| -> Vec<bool> {
        std::env::var(name)
            .unwrap_or_else(|_| "host".into())
            .split(',')
            .map(|p| p.trim() == "host")
            .collect()
    };
    let (paths, windows) = (choice("DECODE_STEP_PATHS"), choice("DECODE_STEP_WINDOWS"));
    let mut loaded = load_local(&model)?;
    let c = loaded.model.config().clone();
    let shape = [1, c.num_kv_heads as i32, 512, c.head_dim as i32];
    // (configuration, host steps, host window); the window choice only for KIVI.
    let variants: Vec<(CacheConfig, bool, bool)> = configs
        .iter()
        .flat_map(|config| {
            let windows = match config {
                CacheConfig::Full => &[true][..],
                CacheConfig::Kivi(_) => &windows[..],
            };
            paths
                .iter()
                .flat_map(move |&host| windows.iter().map(move |&w| (*config, host, w)))
        })
        .collect();
    let mut caches: Vec<_> = variants
        .iter()
        .map(|&(config, _, window)| {
            let mut layers: Vec<Box<dyn KvCache>> = match config {
                CacheConfig::Kivi(kivi) => (0..c.num_layers)
                    .map(|_| {
                        let mut cache = KiviCache::new(kivi);
                        cache.set_host_window(window);
                        Box::new(cache) as Box<dyn KvCache>
                    })
                    .collect(),
                CacheConfig::Full => config.make_layers(c.num_layers),
            };
            for cache in &mut layers {
                let q_shape = [1, c.num_heads as i32, 512, c.head_dim as i32];
                for _ in 0..context / 512 {
                    let q = random::normal::<f32>(&q_shape, None, None, None)?;
                    let k = random::normal::<f32>(&shape, None, None, None)?;
                    let v = random::normal::<f32>(&shape, None, None, None)?;
                    eval([&cache.attend(&q, &k, &v, 0.125)?])?;
                }
            }
            let spent = Arc::new(Mutex::new(0.0));
            let timed: Vec<Box<dyn KvCache>> = layers
                .into_iter()
                .map(|inner| {
                    Box::new(Timed {
                        inner,
                        spent: spent.clone(),
                    }) as Box<dyn KvCache>
                })
                .collect();
            Ok::<_, Box<dyn std::error::Error>>((timed, spent))
        })
        .collect::<Result<_, _>>()?;

    let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut attention: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    // One untimed step per configuration first (first-call allocations, code paging).
    for round in 0..=rounds {
        for (i, (layers, spent)) in caches.iter_mut().enumerate() {
            loaded.model.set_host_steps(variants[i].1);
            for step in 0..steps {
                *spent.lock().expect("not poisoned") = 0.0;
                let began = Instant::now();
                let hidden = loaded
                    .model
                    .forward(&[(round * steps + step) as u32 + 100], layers)?;
                let logits: Array = loaded.model.last_logits(&hidden)?;
                eval([&logits])?;
                if round > 0 {
                    times[i].push(began.elapsed().as_secs_f64() * 1e3);
                    attention[i].push(*spent.lock().expect("not poisoned"));
                }
                if round == 0 {
                    break;
                }
            }
        }
    }
    println!("context {context}, {rounds} rounds x {steps} steps; step = forward + logits");
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let medians: Vec<f64> = times.iter_mut().map(median).collect();
    let attention: Vec<f64> = attention.iter_mut().map(median).collect();
    for ((((config, host, window), t), m), a) in
        variants.iter().zip(&times).zip(&medians).zip(&attention)
    {
        let on = loaded.model.set_host_steps(*host);
        let window = match (config, window) {
            (CacheConfig::Full, _) => "",
            (_, true) => " window:host",
            (_, false) => " window:mlx",
        };
        println!(
            "{:<42} median {:7.2} ms  min {:7.2} ms  attention {:6.2} ms  {:5.1} tok/s  x{:.2} vs {}",
            format!("{config} {}{window}", if on { "host" } else { "mlx" }),
            m,
            t[0],
            a,
            1e3 / m,
            medians[0] / m,
            variants[0].0
        );
    }
    Ok(())
}
