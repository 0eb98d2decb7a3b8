//! Whole-model decode step time per KV cache, without a prefill: every layer's cache is
//! filled with random keys and values of the model's shapes, then one-token steps run
//! through the real network, the configurations interleaved round by round.
//!
//! `cargo run --release -p kivi-engine --example decode_step -- [MODEL] [CONTEXT] [CONFIGS]`
//!
//! Defaults: the offline SmolLM2 GGUF, 4096 tokens, `full,k4v4-g32-r128,k2v2-g32-r32`.
//! Prints the median, minimum and mean step (forward + last logits, evaluated) per
//! configuration and each median's ratio to the first configuration's; the mean includes
//! the steps that flush a group to the quantized history.
//! `DECODE_STEP_ROUNDS` (default 5) rounds of `DECODE_STEP_STEPS` (default 8) steps;
//! `DECODE_STEP_BACKENDS=host,mlx-cpu-f32` runs every configuration on each backend (the
//! model loaded once per backend; default: the platform's).
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
    backend::Backend,
    cache::{CacheConfig, CacheError, KvCache, LayerKvStats},
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
    unsafe { kivi_engine::backend::openblas::prepare() };
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

    let backends: Vec<Backend> = match std::env::var("DECODE_STEP_BACKENDS") {
        Ok(list) => list.split(',').map(str::parse).collect::<Result<_, _>>()?,
        Err(_) => vec![Backend::chosen()?],
    };
    let models = backends
        .iter()
        .map(|&b| load_local(&model, b))
        .collect::<Result<Vec<_>, _>>()?;
    let c = models[0].model.config().clone();
    let shape = [1, c.num_kv_heads as i32, 512, c.head_dim as i32];
    // (configuration, the model of one backend).
    let variants: Vec<(CacheConfig, usize)> = configs
        .iter()
        .flat_map(|config| (0..models.len()).map(move |m| (*config, m)))
        .collect();
    let mut caches: Vec<_> = variants
        .iter()
        .map(|&(config, m)| {
            let mut layers = config.make_layers(&c, models[m].model.backend());
            for cache in &mut layers {
                let q_shape = [1, c.num_heads as i32, 512, c.head_dim as i32];
                for _ in 0..context / 512 {
                    let dtype = models[m].model.backend().compute_dtype();
                    let normal = |s: &[i32]| {
                        random::normal::<f32>(s, None, None, None).and_then(|a| a.as_dtype(dtype))
                    };
                    let (q, k, v) = (normal(&q_shape)?, normal(&shape)?, normal(&shape)?);
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
            let loaded = &models[variants[i].1];
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
    // The mean counts the steps that flush a group into the quantized history (one in
    // every G for a KIVI cache), which the median leaves out.
    let means: Vec<f64> = times
        .iter()
        .map(|t| t.iter().sum::<f64>() / t.len() as f64)
        .collect();
    let medians: Vec<f64> = times.iter_mut().map(median).collect();
    let attention: Vec<f64> = attention.iter_mut().map(median).collect();
    for (i, ((config, model), t)) in variants.iter().zip(&times).enumerate() {
        let (m, a) = (medians[i], attention[i]);
        println!(
            "{:<42} median {:7.2} ms  min {:7.2} ms  attention {:6.2} ms  {:5.1} tok/s  x{:.2} vs {}  mean {:7.2} ms",
            format!("{config} {}", backends[*model]),
            m,
            t[0],
            a,
            1e3 / m,
            medians[0] / m,
            variants[0].0,
            means[i]
        );
    }
    Ok(())
}
