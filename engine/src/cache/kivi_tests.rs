//! KiviCache: chunking invariance, the flush rule, attention against the reference,
//! truncation, and exact accounting.

use kivi_kernels::{
    quantized_len, reference,
    reference_attention::{self, AttnShape},
    rotation, sink_len,
    testdata::{Layer, Profile, XorShift},
    KeyAxis, Rotation,
};
use mlx_rs::{ops::indexing::TryIndexOp, Array, Dtype};

use super::*;
use crate::backend::{Backend, Device, Precision};
use crate::cache::{CacheConfig, KiviConfig, KvCache};
use crate::runtime::{chosen, ForRuntime, Runtime};

/// The host kernels (the CPU's default), MLX's operations in float32, and MLX's operations
/// in float16 (a Mac's configuration, on the CPU).
const HOST: Backend = Backend::HOST;
const MLX: Backend = Backend::mlx(Device::Cpu, Precision::F32);
const MLX16: Backend = Backend::mlx(Device::Cpu, Precision::F16);

/// A KIVI cache on either runtime, as these tests drive and inspect it.
trait Probe: KvCache {
    /// Appends keys and values `[B, H, L, D]` (in the model's basis: KIVI+'s rotation is
    /// applied) and applies the flush rule, without attention.
    fn append(&mut self, keys: &Array, values: &Array) -> Result<(), CacheError>;
    fn arrays(&self) -> Vec<(&'static str, Array)>;
    fn quantized_len(&self) -> usize;
    fn bytes(&self) -> KiviBytes;
    fn config(&self) -> &KiviConfig;
    fn eval(&self) -> Result<(), CacheError>;
    /// An adaptive basis's choice, once made.
    fn chosen(&self) -> Option<HeadBasis>;
}

impl<R: KiviRuntime> Probe for KiviCache<R> {
    fn append(&mut self, keys: &Array, values: &Array) -> Result<(), CacheError> {
        let leaving = self.admit(keys, values, None)?;
        self.leave(leaving);
        Ok(())
    }
    fn arrays(&self) -> Vec<(&'static str, Array)> {
        KiviCache::arrays(self)
    }
    fn quantized_len(&self) -> usize {
        self.quantized
    }
    fn bytes(&self) -> KiviBytes {
        KiviCache::bytes(self)
    }
    fn config(&self) -> &KiviConfig {
        &self.config
    }
    fn eval(&self) -> Result<(), CacheError> {
        KiviCache::eval(self)
    }
    fn chosen(&self) -> Option<HeadBasis> {
        self.adaptive.as_ref().and_then(|a| a.chosen.clone())
    }
}

/// An empty KIVI cache for a model running on `backend`.
fn kivi(config: KiviConfig, backend: Backend) -> Box<dyn Probe> {
    let Make(make) = chosen(&backend);
    make(config, backend.storage_dtype())
}

struct Make(fn(KiviConfig, Dtype) -> Box<dyn Probe>);

impl ForRuntime for Make {
    fn on<R: Runtime>() -> Self {
        Make(|config, storage| Box::new(KiviCache::<R>::new(config, storage)))
    }
}

const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const DIM: usize = 64;

/// Keys and values `[1, KV_HEADS, T, DIM]` and queries `[1, HEADS, T, DIM]` of a seeded
/// stream with outliers.
struct Stream {
    layer: Layer,
    keys: Array,
    values: Array,
    queries: Array,
}

impl Stream {
    fn new(seed: u64, tokens: usize) -> Self {
        let layer = Layer::new(
            seed,
            Profile::Outliers,
            (HEADS, KV_HEADS, DIM),
            tokens,
            tokens,
        );
        let kv = [1, KV_HEADS as i32, tokens as i32, DIM as i32];
        Self {
            keys: Array::from_slice(&layer.keys, &kv),
            values: Array::from_slice(&layer.values, &kv),
            queries: Array::from_slice(
                &layer.queries,
                &[1, HEADS as i32, tokens as i32, DIM as i32],
            ),
            layer,
        }
    }

    fn slice(a: &Array, from: usize, to: usize) -> Array {
        a.try_index((.., .., from as i32..to as i32, ..)).unwrap()
    }

    fn chunk(&self, from: usize, to: usize) -> (Array, Array, Array) {
        (
            Self::slice(&self.queries, from, to),
            Self::slice(&self.keys, from, to),
            Self::slice(&self.values, from, to),
        )
    }

    /// The first `tokens` keys and values of one head, `[tokens, DIM]`.
    fn head(&self, head: usize, tokens: usize) -> (&[f32], &[f32]) {
        let n = tokens * DIM;
        (
            &self.layer.head_keys(head)[..n],
            &self.layer.head_values(head)[..n],
        )
    }
}

fn config(kb: u32, vb: u32, g: usize, r: usize) -> KiviConfig {
    KiviConfig::new(kb, vb, g, r).unwrap()
}

fn settings() -> Vec<KiviConfig> {
    vec![
        config(2, 2, 32, 32),
        config(4, 2, 64, 128),
        config(2, 4, 128, 0),
        config(4, 4, 32, 128).with_key_axis(KeyAxis::PerToken),
        // KIVI+: sinks and rotations, alone and together.
        plus(config(2, 2, 32, 32), 4, Rotation::Both),
        plus(config(4, 2, 32, 64), 16, Rotation::Values),
        plus(config(2, 4, 64, 0), 0, Rotation::Keys),
        plus(config(2, 2, 32, 32), 16, Rotation::None),
        // KIVI+'s adaptive basis, chosen at the first flush.
        plus(config(2, 2, 32, 32), 4, Rotation::Adaptive),
        plus(config(4, 2, 32, 64), 0, Rotation::Adaptive),
    ]
}

fn plus(config: KiviConfig, sinks: usize, rotation: Rotation) -> KiviConfig {
    config.with_sinks(sinks).unwrap().with_rotation(rotation)
}

/// `(S', Q)`: sink and quantized tokens of a cache of `tokens` built from empty.
fn sinks_and_quantized(config: KiviConfig, tokens: usize) -> (usize, usize) {
    let sinks = sink_len(tokens, config.sinks());
    let q = quantized_len(
        tokens - sinks,
        config.residual_length(),
        config.group_size(),
    );
    (sinks, q)
}

/// Every held array's name and exact bits.
fn fingerprint(cache: &dyn Probe) -> Vec<(String, Vec<u32>)> {
    cache.eval().unwrap();
    cache
        .arrays()
        .into_iter()
        .map(|(name, a)| {
            let a = a.contiguous().unwrap();
            let bits = match a.dtype() {
                Dtype::Uint32 => a.as_slice::<u32>().to_vec(),
                Dtype::Float32 => a.as_slice::<f32>().iter().map(|v| v.to_bits()).collect(),
                _ => a
                    .view::<u16>()
                    .unwrap()
                    .as_slice::<u16>()
                    .iter()
                    .map(|&v| u32::from(v))
                    .collect(),
            };
            (format!("{name} {:?}", a.shape()), bits)
        })
        .collect()
}

fn fill(cache: &mut dyn Probe, stream: &Stream, chunks: &[usize]) {
    let mut at = 0;
    for &len in chunks {
        let (_, k, v) = stream.chunk(at, at + len);
        cache.append(&k, &v).unwrap();
        cache.eval().unwrap();
        at += len;
    }
}

fn chunkings(tokens: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = XorShift::new(seed);
    let mut random = Vec::new();
    let mut left = tokens;
    while left > 0 {
        let len = (1 + rng.next_u64() % 70) as usize;
        random.push(len.min(left));
        left -= len.min(left);
    }
    vec![
        vec![tokens],
        vec![1; tokens],
        random,
        vec![32, 31, 1, 33, tokens - 97],
        vec![tokens - 1, 1],
    ]
}

#[test]
fn every_chunking_gives_a_bit_identical_cache() {
    let tokens = 301;
    let stream = Stream::new(1, tokens);
    for backend in [HOST, MLX16] {
        for config in settings() {
            let mut whole = kivi(config, backend);
            fill(&mut *whole, &stream, &[tokens]);
            let expected = fingerprint(&*whole);
            assert_eq!(whole.quantized_len(), sinks_and_quantized(config, tokens).1);
            for chunks in chunkings(tokens, 2) {
                let mut cache = kivi(config, backend);
                fill(&mut *cache, &stream, &chunks);
                assert_eq!(cache.len(), tokens);
                assert!(
                    fingerprint(&*cache) == expected,
                    "{backend} {config}: chunks {chunks:?} differ"
                );
            }
        }
    }
}

/// The window and the quantized history built on the host hold the same bits as those
/// built by MLX operations, for every chunking, with a flush inside and at the edge of
/// chunks.
#[test]
fn host_and_mlx_caches_hold_the_same_bits() {
    let tokens = 301;
    let stream = Stream::new(6, tokens);
    for config in settings() {
        for chunks in chunkings(tokens, 7) {
            let mut host = kivi(config, HOST);
            let mut mlx = kivi(config, MLX);
            fill(&mut *host, &stream, &chunks);
            fill(&mut *mlx, &stream, &chunks);
            assert!(
                fingerprint(&*host) == fingerprint(&*mlx),
                "{config}: chunks {chunks:?} differ"
            );
        }
    }
}

/// Rounding to float16 on the host is MLX's: ties to even, subnormals, overflow to
/// infinity, signed zero.
#[test]
fn host_window_rounds_as_mlx_does() {
    let tie = 1.0 + 2f32.powi(-11); // halfway between 1 and the next float16
    let edge = [
        tie,
        -tie,
        1.0 + 3.0 * 2f32.powi(-11),
        6.0e-8,
        -3.0e-8,
        1.0e-5,
        65519.0,
        65520.0,
        -70000.0,
        -0.0,
        0.1,
        2049.0,
    ];
    let data: Vec<f32> = (0..KV_HEADS * 4 * DIM)
        .map(|i| edge[i % edge.len()] * if i % 7 == 0 { 0.5 } else { 1.0 })
        .collect();
    let kv = Array::from_slice(&data, &[1, KV_HEADS as i32, 4, DIM as i32]);
    let config = config(2, 2, 32, 32);
    let mut host = kivi(config, HOST);
    let mut mlx = kivi(config, MLX);
    for cache in [&mut host, &mut mlx] {
        cache.append(&kv, &kv).unwrap();
    }
    assert_eq!(fingerprint(&*host), fingerprint(&*mlx));
}

#[test]
fn tokens_age_out_in_whole_groups() {
    let stream = Stream::new(2, 200);
    for config in settings() {
        let mut cache = kivi(config, HOST);
        for t in 1..=200 {
            let (_, k, v) = stream.chunk(t - 1, t);
            cache.append(&k, &v).unwrap();
            let stats = cache.stats();
            let (sinks, q) = sinks_and_quantized(config, t);
            assert_eq!(
                (
                    stats.tokens,
                    stats.sink_tokens,
                    stats.quantized_tokens,
                    stats.residual_tokens
                ),
                (t, sinks, q, t - q - sinks)
            );
            assert!(stats.residual_tokens <= stats.residual_capacity);
        }
    }
}

/// Attention from the cache, chunk by chunk, equals exact attention over what the reference
/// says a call reads at every step: the history held before the call dequantized, its own
/// tokens and the window exact.
#[test]
fn attention_matches_the_reference_cache() {
    let tokens = 190;
    let stream = Stream::new(3, tokens);
    let scale = 1.0 / (DIM as f32).sqrt();
    for config in [
        config(2, 2, 32, 32),
        config(4, 2, 32, 64),
        config(2, 4, 32, 0).with_key_axis(KeyAxis::PerToken),
        plus(config(2, 2, 32, 32), 4, Rotation::Both),
        plus(config(4, 2, 32, 64), 16, Rotation::Values),
        plus(config(4, 4, 32, 32), 0, Rotation::Keys),
    ] {
        let spec = config.reference_spec(reference::Storage::F16);
        for backend in [HOST, MLX, MLX16] {
            let mut cache = kivi(config, backend);
            let mut at = 0;
            // Chunks that flush groups in their middle, then decode steps.
            for len in [40, 1, 50, 1, 1, 70, 1, 26] {
                // The model hands the cache its own compute dtype.
                let compute = |a: Array| a.as_dtype(backend.compute_dtype()).unwrap();
                let (q, k, v) = stream.chunk(at, at + len);
                let (q, k, v) = (compute(q), compute(k), compute(v));
                let got = cache.attend(&q, &k, &v, scale).unwrap();
                let held = at;
                at += len;
                let (mut keys, mut values) = (vec![], vec![]);
                for h in 0..KV_HEADS {
                    // The stream as the cache received it (rounded to the compute dtype):
                    // a rounding step moves a rotated 2-bit code by a whole step.
                    let received = |x: &[f32]| -> Vec<f32> {
                        match backend.precision() {
                            Precision::F32 => x.to_vec(),
                            _ => x
                                .iter()
                                .map(|&v| reference::Storage::F16.round(v))
                                .collect(),
                        }
                    };
                    let (hk, hv) = stream.head(h, at);
                    let (hk, hv) = (received(hk), received(hv));
                    let (dk, dv) = reference::read_by_append(&hk, &hv, DIM, &spec, held).unwrap();
                    keys.extend(dk);
                    values.extend(dv);
                }
                // The reference content is in the cache's basis: queries enter it, the
                // output leaves it.
                let mut queries = f32s(&q);
                if config.rotation().keys() {
                    rotation::rotate_rows(&mut queries, DIM).unwrap();
                }
                let shape = AttnShape {
                    heads: HEADS,
                    kv_heads: KV_HEADS,
                    queries: len,
                    tokens: at,
                    dim: DIM,
                };
                let mut want =
                    reference_attention::attention(&queries, &keys, &values, shape, scale);
                if config.rotation().values() {
                    rotation::rotate_rows(&mut want, DIM).unwrap();
                }
                let err = reference_attention::compare(&f32s(&got), &want, DIM);
                // float32 rounding on outputs of magnitude ~20 (the outlier channels). In
                // float16 queries, scores, weights and outputs each keep 11 significant
                // bits (2^-11 = 5e-4 relative), and the weights' errors add up over the
                // tokens: measured up to 4.2e-3 relative, 0.1 absolute, cosine 0.99999.
                let (relative, max_abs) = match backend.precision() {
                    Precision::F32 => (3e-6, 5e-5),
                    _ => (1e-2, 0.25),
                };
                assert!(
                    err.relative < relative && err.max_abs < max_abs,
                    "{backend} {config} at {at}: {err:?}"
                );
            }
            assert_eq!(at, tokens);
        }
    }
}

#[test]
fn before_the_first_flush_it_equals_the_full_cache() {
    let stream = Stream::new(4, 60);
    let mut kivi = kivi(config(2, 2, 32, 32), HOST);
    let mut full = CacheConfig::Full.make(&HOST);
    let mut at = 0;
    for len in [20, 1, 1, 30, 1] {
        let (q, k, v) = stream.chunk(at, at + len);
        let a = f32s(&kivi.attend(&q, &k, &v, 0.125).unwrap());
        // The window holds keys and values in float16.
        let half = |x: &Array| {
            x.as_dtype(Dtype::Float16)
                .unwrap()
                .as_dtype(Dtype::Float32)
                .unwrap()
        };
        let b = f32s(&full.attend(&q, &half(&k), &half(&v), 0.125).unwrap());
        at += len;
        assert_eq!(kivi.stats().quantized_tokens, 0, "R + G = 64 > {at}");
        let err = reference_attention::compare(&a, &b, DIM);
        assert!(err.max_abs < 1e-5, "{err:?}");
    }
}

/// Attends `stream` in `chunks`: an adaptive basis counts the queries.
fn attend_all(cache: &mut dyn Probe, stream: &Stream, chunks: &[usize]) -> Vec<f32> {
    let mut at = 0;
    let mut out = Vec::new();
    for &len in chunks {
        let (q, k, v) = stream.chunk(at, at + len);
        out.extend(f32s(&cache.attend(&q, &k, &v, 0.125).unwrap()));
        at += len;
    }
    out
}

/// The adaptive basis, chosen from the queries' energy at the first flush: the same
/// choice and the same bits for one prefill, any chunking and token-by-token decode, on
/// the host and with MLX's operations; saved before and after the choice and restored, the
/// cache goes on as if it never stopped; and attention reads each head in its own basis
/// (against the full cache before anything is quantized, the rotations undone exactly).
#[test]
fn an_adaptive_basis_is_chosen_alike_for_every_chunking_and_runtime() {
    let tokens = 301;
    let stream = Stream::new(12, tokens);
    let config = plus(config(2, 2, 32, 32), 4, Rotation::Adaptive);
    let mut chosen = None;
    for backend in [HOST, MLX, MLX16] {
        let mut whole = kivi(config, backend);
        attend_all(&mut *whole, &stream, &[tokens]);
        let expected = fingerprint(&*whole);
        let basis = whole.chosen().unwrap();
        // This stream's heads do not all choose alike, so both bases are exercised.
        let keys: Vec<bool> = basis.keys.clone();
        assert!(
            keys.contains(&true) || basis.values.contains(&true),
            "{basis:?}"
        );
        assert!(basis.key_factors(Scaling::Keys).is_some(), "{basis:?}");
        match &chosen {
            None => chosen = Some(basis),
            Some(first) => assert_eq!(first, &basis, "{backend}"),
        }
        for chunks in chunkings(tokens, 13) {
            let mut cache = kivi(config, backend);
            attend_all(&mut *cache, &stream, &chunks);
            assert!(
                fingerprint(&*cache) == expected,
                "{backend}: chunks {chunks:?} differ"
            );
        }
        // Saved before the choice (queries counted) and after it, restored, fed the rest.
        for stop in [37, 200] {
            let mut first = kivi(config, backend);
            attend_all(&mut *first, &stream, &[stop]);
            let mut restored = kivi(config, backend);
            restored.restore(first.state().unwrap()).unwrap();
            attend_all(&mut *restored, &stream.tail(stop), &[tokens - stop]);
            assert!(
                fingerprint(&*restored) == expected,
                "{backend}: saved at {stop}, restored and refed"
            );
        }
    }
    // The host and MLX caches in float16 storage hold the same bits.
    let mut host = kivi(config, HOST);
    let mut mlx = kivi(config, MLX);
    attend_all(&mut *host, &stream, &[100, 1, 1, 199]);
    attend_all(&mut *mlx, &stream, &[100, 1, 1, 199]);
    assert!(fingerprint(&*host) == fingerprint(&*mlx));
    // A choice of another shape, or not 0 or 1, is refused.
    let mut state = host.state().unwrap();
    for (name, array) in &mut state.arrays {
        if name == "basis.keys" {
            *array = Array::from_slice(&[2u32, 0, 1], &[1, 3, 1, 1]);
        }
    }
    let err = kivi(config, HOST).restore(state).unwrap_err();
    assert!(err.to_string().contains("neither 0 nor 1"), "{err}");
    // Channel factors that are not positive are refused; a file from before they existed
    // (none saved) reads as all ones.
    let with_factors = |f: &dyn Fn(&mut CacheState)| {
        let mut state = host.state().unwrap();
        f(&mut state);
        let mut cache = kivi(config, HOST);
        cache.restore(state).map(|()| cache.chosen())
    };
    let err = with_factors(&|state| {
        for (name, array) in &mut state.arrays {
            if name == "basis.key_scales" {
                *array = ops::negative(&*array).unwrap();
            }
        }
    })
    .unwrap_err();
    assert!(err.to_string().contains("finite and positive"), "{err}");
    let old = with_factors(&|s| s.arrays.retain(|(name, _)| name != "basis.key_scales")).unwrap();
    assert_eq!(old.unwrap().key_factors(Scaling::Keys), None);
}

#[test]
fn an_adaptive_basis_reads_like_the_full_cache_before_anything_is_quantized() {
    // R + G = 64 tokens: the choice is made at the 68th with 4 sinks; the window then holds
    // every token, some heads rotated, and attention undoes each head's rotation.
    let stream = Stream::new(14, 70);
    let config = plus(config(2, 2, 32, 32), 4, Rotation::Adaptive);
    let mut kivi = kivi(config, HOST);
    let mut full = CacheConfig::Full.make(&HOST);
    let half = |x: &Array| {
        x.as_dtype(Dtype::Float16)
            .unwrap()
            .as_dtype(Dtype::Float32)
            .unwrap()
    };
    let (q, k, v) = stream.chunk(0, 67);
    kivi.attend(&q, &k, &v, 0.125).unwrap();
    full.attend(&q, &half(&k), &half(&v), 0.125).unwrap();
    let (q, k, v) = stream.chunk(67, 68);
    let a = f32s(&kivi.attend(&q, &k, &v, 0.125).unwrap());
    let b = f32s(&full.attend(&q, &half(&k), &half(&v), 0.125).unwrap());
    assert!(kivi.chosen().is_some());
    let err = reference_attention::compare(&a, &b, DIM);
    // Rotated heads are held rotated in float16: a rounding, not a quantization, apart.
    assert!(err.max_abs < 2e-2, "{err:?}");
}

#[test]
fn truncate_then_refeed_reproduces_the_cache() {
    let tokens = 300;
    let stream = Stream::new(5, tokens);
    for config in settings() {
        let mut original = kivi(config, HOST);
        fill(&mut *original, &stream, &[tokens]);
        let expected = fingerprint(&*original);
        let (s, q) = sinks_and_quantized(config, tokens);
        for len in [
            tokens,
            tokens - 3,
            s + q + 1,
            s + q,
            s + q - 1,
            40,
            17,
            s,
            3,
            0,
        ] {
            let mut cache = kivi(config, HOST);
            fill(&mut *cache, &stream, &[tokens]);
            let kept = cache.truncate(len).unwrap();
            let g = config.group_size();
            // Inside the sinks or the window: exactly; inside the quantized history: whole
            // groups after the sinks.
            let span = config.sinks() + config.residual_length() + g;
            let want = if config.rotation().adaptive() && len < span {
                // An adaptive basis chosen (or its queries counted) past the cut.
                0
            } else if len >= s + q || len <= s {
                len
            } else {
                s + (len - s) / g * g
            };
            assert_eq!(kept, want, "{config}: truncate({len})");
            assert_eq!(cache.len(), kept);
            assert_eq!(cache.stats().held_bytes, held_bytes(&*cache));
            fill(&mut *cache, &stream.tail(kept), &[tokens - kept]);
            assert!(
                fingerprint(&*cache) == expected,
                "{config}: truncate({len}) and refeed differ"
            );
        }
    }
}

impl Stream {
    /// The same stream from token `from` on.
    fn tail(&self, from: usize) -> Stream {
        let t = self.layer.tokens;
        Stream {
            layer: self.layer.clone(),
            keys: Self::slice(&self.keys, from, t),
            values: Self::slice(&self.values, from, t),
            queries: Self::slice(&self.queries, from, t),
        }
    }
}

/// Held bytes from the layout, independently of the accounting: the history's arrays, and
/// a host window's buffers, which keep room for `S + R + G` tokens of every head.
fn held_bytes(cache: &dyn Probe) -> u64 {
    let history: u64 = cache
        .arrays()
        .iter()
        // An adaptive basis is bookkeeping (a flag or a few floats per head), not KV data.
        .filter(|(name, _)| !name.starts_with("residual.") && !name.starts_with("basis."))
        .map(|(_, a)| a.nbytes() as u64)
        .sum();
    let window = if cache.len() > cache.quantized_len() {
        host_window_bytes(cache.config())
    } else {
        0
    };
    history + window
}

/// The bytes of a host window's float16 buffers.
fn host_window_bytes(config: &KiviConfig) -> u64 {
    let room = config.sinks() + config.residual_length() + config.group_size();
    assert_eq!(room, config.residual_room());
    (KV_HEADS * room * DIM * 2 * 2) as u64
}

#[test]
fn accounting_matches_the_arrays() {
    let tokens = 250;
    let stream = Stream::new(6, tokens);
    for config in settings() {
        let mut cache = kivi(config, HOST);
        assert_eq!(
            cache.stats(),
            LayerKvStats {
                residual_capacity: config.residual_capacity(),
                ..Default::default()
            }
        );
        fill(&mut *cache, &stream, &[100, 1, 149]);
        let stats = cache.stats();
        let (sinks, q) = sinks_and_quantized(config, tokens);
        // From the arrays themselves...
        assert_eq!(stats.held_bytes, held_bytes(&*cache));
        assert_eq!(stats.held_bytes, cache.bytes().total());
        // ...and, independently, from the layout (float16 scales, zeros and window; the
        // window's buffers with room for its largest size).
        let heads = KV_HEADS as u64;
        let (kb, vb) = (u64::from(config.key_bits()), u64::from(config.value_bits()));
        let key_groups = match config.key_axis() {
            KeyAxis::PerChannel => DIM as u64 * q as u64 / config.group_size() as u64,
            KeyAxis::PerToken => q as u64 * DIM as u64 / config.group_size().min(DIM) as u64,
        };
        let value_groups = q as u64 * DIM as u64 / config.group_size().min(DIM) as u64;
        let packed = heads * q as u64 * DIM as u64 * (kb + vb) / 8;
        let params = heads * (key_groups + value_groups) * 2 * 2;
        let residual = if tokens > q {
            host_window_bytes(&config)
        } else {
            0
        };
        assert_eq!(
            cache.bytes(),
            KiviBytes {
                packed,
                params,
                residual
            },
            "{config}"
        );
        assert_eq!(stats.fp16_bytes, heads * tokens as u64 * DIM as u64 * 2 * 2);
        assert_eq!(
            (
                stats.tokens,
                stats.sink_tokens,
                stats.quantized_tokens,
                stats.residual_tokens
            ),
            (tokens, sinks, q, tokens - q - sinks)
        );
        let names: Vec<&str> = cache.arrays().iter().map(|(n, _)| *n).collect();
        // An adaptive basis adds its choice (keys', values' and, unless all ones, the keys'
        // channel factors) once anything is quantized.
        let basis = match cache.chosen() {
            Some(b) if q > 0 => 2 + usize::from(b.key_factors(Scaling::Keys).is_some()),
            _ => 0,
        };
        assert_eq!(names.len(), basis + if q > 0 { 8 } else { 2 });
    }
}

#[test]
fn shapes_are_checked() {
    let mut cache = kivi(config(2, 2, 128, 128), HOST);
    let kv = Array::zeros::<f32>(&[1, 3, 4, 64]).unwrap();
    cache.append(&kv, &kv).unwrap();
    let other_heads = Array::zeros::<f32>(&[1, 2, 4, 64]).unwrap();
    assert!(matches!(
        cache.append(&other_heads, &other_heads),
        Err(CacheError::Shape(_))
    ));
    let three_d = Array::zeros::<f32>(&[3, 4, 64]).unwrap();
    assert!(matches!(
        cache.append(&three_d, &three_d),
        Err(CacheError::Shape(_))
    ));
    // head_dim 80 cannot be grouped along channels.
    let mut cache = kivi(config(2, 2, 32, 32), HOST);
    let odd = Array::zeros::<f32>(&[1, 1, 4, 80]).unwrap();
    let err = cache.append(&odd, &odd).unwrap_err();
    assert!(err.to_string().contains("multiple of 32"), "{err}");
    // head_dim 64 with G = 128: values are grouped by 64.
    let mut cache = kivi(config(2, 2, 128, 0), HOST);
    let stream = Stream::new(7, 128);
    fill(&mut *cache, &stream, &[128]);
    let values = cache
        .arrays()
        .into_iter()
        .find(|(n, _)| *n == "values.scales")
        .unwrap()
        .1;
    assert_eq!(values.shape(), &[1, 3, 128, 1]);
}

/// Scales, zeros and windows are stored in 16 bits: a state holding float32 ones (as
/// cache files of format version 1 did) is refused rather than mixed with new appends.
#[test]
fn a_float32_state_is_refused() {
    let stream = Stream::new(9, 100);
    let mut cache = kivi(config(2, 2, 32, 32), HOST);
    fill(&mut *cache, &stream, &[100]);
    let state = cache.state().unwrap();
    let mut widened = state.clone();
    for (_, a) in widened.arrays.iter_mut() {
        if a.dtype() == Dtype::Float16 {
            *a = a.as_dtype(Dtype::Float32).unwrap();
        }
    }
    let mut restored = kivi(config(2, 2, 32, 32), HOST);
    let err = restored.restore(widened).unwrap_err();
    assert!(matches!(err, CacheError::State(_)), "{err}");
    restored.restore(state).unwrap();
    assert_eq!(fingerprint(&*restored), fingerprint(&*cache));
}

/// The compression table of the README, measured from the real buffers at 4096 tokens with
/// SmolLM2's shapes, for a float16 model on MLX (a Mac) and a float32 one on the host
/// kernels (the CPU): both store scales, zeros and the window in float16, so they hold the
/// same bytes, except that the host window's buffers keep room for its largest size. Run
/// with `--nocapture` to print it.
#[test]
fn compression_at_4096_tokens() {
    let tokens = 4096;
    let stream = Stream::new(8, tokens);
    let f16 = (
        stream.keys.as_dtype(Dtype::Float16).unwrap(),
        stream.values.as_dtype(Dtype::Float16).unwrap(),
    );
    println!("| setting | fp16 bytes | held bytes | smaller than fp16 |");
    println!("|---|---|---|---|");
    for r in [32, 128] {
        for (kb, vb) in [(4, 4), (4, 2), (2, 4), (2, 2)] {
            let config = config(kb, vb, 32, r);
            let mut cpu = kivi(config, HOST);
            cpu.append(&stream.keys, &stream.values).unwrap();
            let mut half = kivi(config, MLX16);
            half.append(&f16.0, &f16.1).unwrap();
            let (cpu, half) = (cpu.stats(), half.stats());
            let window = (KV_HEADS * half.residual_tokens * DIM * 2 * 2) as u64;
            let spare = host_window_bytes(&config) - window;
            assert_eq!(
                cpu,
                LayerKvStats {
                    held_bytes: half.held_bytes + spare,
                    ..half
                },
                "K{kb}V{vb} R={r}"
            );
            let ratio = half.fp16_bytes as f64 / half.held_bytes as f64;
            let host = half.fp16_bytes as f64 / cpu.held_bytes as f64;
            println!(
                "| K{kb}V{vb} G=32 R={r} | {} | {} | {ratio:.2}x ({host:.2}x on the host) |",
                half.fp16_bytes, half.held_bytes
            );
            match (kb, vb, r) {
                (2, 2, 32) => assert!(ratio >= 5.0, "K2V2 G=32 R=32: {ratio:.2}x, not 5x"),
                (4, 4, 32) => assert!(ratio >= 3.0, "K4V4 G=32 R=32: {ratio:.2}x, not 3x"),
                _ => {}
            }
        }
    }
}

pub(super) fn f32s(a: &Array) -> Vec<f32> {
    a.as_dtype(Dtype::Float32)
        .unwrap()
        .contiguous()
        .unwrap()
        .as_slice::<f32>()
        .to_vec()
}

/// The quantized history is what the reference quantizer makes of the same stream (rounded
/// to float16 first, with float16 scales and zeros), bit for bit: packed codes, scales and
/// zeros of every head, on every backend, float16 MLX (a Mac's configuration) included.
#[test]
fn the_quantized_history_is_the_reference_quantizer_bit_for_bit() {
    let tokens = 301;
    let stream = Stream::new(10, tokens);
    let f16_bits = |x: f32| u32::from(half::f16::from_f32(x).to_bits());
    for backend in [HOST, MLX, MLX16] {
        for config in [
            config(2, 2, 32, 32),
            config(4, 4, 32, 128),
            config(4, 2, 64, 128),
            plus(config(2, 2, 32, 32), 4, Rotation::Both),
            // Whatever the adaptive basis chose, head by head.
            plus(config(2, 2, 32, 32), 4, Rotation::Adaptive),
        ] {
            let mut cache = kivi(config, backend);
            let compute = |a: Array| a.as_dtype(backend.compute_dtype()).unwrap();
            let mut at = 0;
            for len in [100, 1, 1, 199] {
                let (_, k, v) = stream.chunk(at, at + len);
                cache.append(&compute(k), &compute(v)).unwrap();
                at += len;
            }
            let q = cache.quantized_len();
            let (sinks, want_q) = sinks_and_quantized(config, tokens);
            assert_eq!(q, want_q);
            let held: std::collections::HashMap<String, Vec<u32>> = fingerprint(&*cache)
                .into_iter()
                .map(|(name, bits)| (name.split(' ').next().unwrap().to_string(), bits))
                .collect();
            let storage = reference::Storage::F16;
            let (mut want_k, mut want_v) = (
                [Vec::new(), Vec::new(), Vec::new()],
                [Vec::new(), Vec::new(), Vec::new()],
            );
            let adaptive = config.rotation().adaptive();
            let chosen = cache.chosen();
            if adaptive {
                assert!(chosen.is_some(), "chosen at the first flush");
                // This stream's heads take channel factors, so they are checked here too.
                let factors = chosen.as_ref().and_then(|c| c.key_factors(Scaling::Keys));
                assert!(factors.is_some(), "{backend} {config}: no channel factors");
            }
            for h in 0..KV_HEADS {
                let (hk, hv) = stream.head(h, sinks + q);
                // What the cache quantizes: the tokens after the sinks, as the model hands
                // them over (in its compute dtype; an adaptive basis rounds them to the
                // storage dtype before it rotates), in the cache's basis, then stored.
                let stored = |x: &[f32], rotate: bool, scales: &[f32]| {
                    let mut x: Vec<f32> = x[sinks * DIM..]
                        .iter()
                        .map(|&v| match backend.precision() {
                            Precision::F32 if !adaptive => v,
                            _ => storage.round(v),
                        })
                        .collect();
                    if rotate {
                        for row in x.chunks_exact_mut(DIM) {
                            row.iter_mut().zip(scales).for_each(|(v, s)| *v *= s);
                        }
                        rotation::rotate_rows(&mut x, DIM).unwrap();
                    }
                    x.iter().map(|&v| storage.round(v)).collect::<Vec<_>>()
                };
                let ones = [1f32; DIM];
                let (rotate_k, rotate_v, scales) = match &chosen {
                    Some(basis) => (
                        basis.keys[h],
                        basis.values[h],
                        &basis.key_scales[h * DIM..(h + 1) * DIM],
                    ),
                    None => (
                        config.rotation().keys(),
                        config.rotation().values(),
                        &ones[..],
                    ),
                };
                let (hk, hv) = (stored(hk, rotate_k, scales), stored(hv, rotate_v, &ones));
                let rounded = |x: &[f32]| x.to_vec();
                let keys = reference::quantize_rows_stored(
                    &reference::transpose(&rounded(&hk), q, DIM),
                    DIM,
                    q,
                    config.key_spec(),
                    storage,
                )
                .unwrap();
                let values = reference::quantize_rows_stored(
                    &rounded(&hv),
                    q,
                    DIM,
                    config.value_spec().for_axis(DIM).unwrap(),
                    storage,
                )
                .unwrap();
                for (want, m) in [(&mut want_k, keys), (&mut want_v, values)] {
                    want[0].extend(m.packed);
                    want[1].extend(m.scales.iter().map(|&x| f16_bits(x)));
                    want[2].extend(m.zeros.iter().map(|&x| f16_bits(x)));
                }
            }
            for (prefix, want) in [("keys", want_k), ("values", want_v)] {
                for (part, want) in ["packed", "scales", "zeros"].iter().zip(want) {
                    let name = format!("{prefix}.{part}");
                    assert!(held[&name] == want, "{backend} {config}: {name} differs");
                }
            }
        }
    }
}
