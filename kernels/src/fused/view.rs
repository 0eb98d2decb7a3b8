//! The cache as the kernel reads it: evaluated MLX buffers checked against each other and
//! borrowed as host slices (scales, zeros and the residual window converted to float32
//! when they are stored in float16).

use mlx_rs::Array;

use crate::{
    cache_view::{CacheView, HostWindow, Residual},
    host::buffers::{host_arrays, slice, Floats},
    mlx_quant::QuantizedArray,
    KernelError,
};

/// One quantized tensor on the host: packed codes, scales and zeros.
pub(super) struct Quantized<'a> {
    pub(super) packed: &'a [u32],
    scales: Floats<'a>,
    zeros: Floats<'a>,
    pub(super) bits: u32,
    pub(super) group: usize,
}

/// The part of a [`Quantized`] that belongs to one `(batch, head)` pair; its scales and
/// zeros are converted by the span that reads them, for that span's tokens only.
pub(super) struct QuantizedHead<'a> {
    pub(super) packed: &'a [u32],
    pub(super) scales: Floats<'a>,
    pub(super) zeros: Floats<'a>,
    pub(super) group: usize,
}

impl<'a> Quantized<'a> {
    fn new(q: &QuantizedArray, arrays: &'a [Array; 3]) -> Result<Self, KernelError> {
        Ok(Self {
            packed: slice::<u32>(&arrays[0])?,
            scales: Floats::new(&arrays[1])?,
            zeros: Floats::new(&arrays[2])?,
            bits: q.spec.bits(),
            group: q.spec.group_size(),
        })
    }

    /// The part of one `(batch, head)` pair: `rows` rows of `cols` codes.
    pub(super) fn head(&self, index: usize, rows: usize, cols: usize) -> QuantizedHead<'a> {
        let words = rows * cols * self.bits as usize / 32;
        let groups = rows * cols / self.group;
        QuantizedHead {
            packed: &self.packed[index * words..(index + 1) * words],
            scales: self.scales.sub(index * groups..(index + 1) * groups),
            zeros: self.zeros.sub(index * groups..(index + 1) * groups),
            group: self.group,
        }
    }
}

/// Contiguous, evaluated arrays the kernel reads (the cache's own buffers when they are
/// already contiguous, which they are), owned here so that slices can borrow them, and
/// the host window where the cache keeps one.
pub(super) struct Held<'w> {
    pub(super) queries: Array,
    keys: Option<(QuantizedArray, [Array; 3])>,
    values: Option<(QuantizedArray, [Array; 3])>,
    residual: Option<HeldResidual<'w>>,
}

enum HeldResidual<'w> {
    Arrays(Array, Array),
    Host(HostWindow<'w>),
}

impl<'w> Held<'w> {
    pub(super) fn new(cache: &CacheView<'w>, queries: &Array) -> Result<Self, KernelError> {
        if cache.keys.is_some() != cache.values.is_some() {
            return Err(KernelError::Shape("keys and values held unevenly".into()));
        }
        let mut sources = vec![queries];
        for q in cache.keys.iter().chain(&cache.values) {
            sources.extend(q.arrays());
        }
        if let Some(Residual::Arrays { keys, values }) = cache.residual {
            sources.extend([keys, values]);
        }
        let mut ready = host_arrays(&sources)?.into_iter();
        let mut next = || ready.next().expect("one array per source");
        let queries = next();
        let keys = cache.keys.map(|q| (q.clone(), [next(), next(), next()]));
        let values = cache.values.map(|q| (q.clone(), [next(), next(), next()]));
        let residual = cache.residual.map(|r| match r {
            Residual::Arrays { .. } => HeldResidual::Arrays(next(), next()),
            Residual::Host(w) => HeldResidual::Host(w),
        });
        Ok(Self {
            queries,
            keys,
            values,
            residual,
        })
    }

    /// Host views of the arrays, after checking that their shapes fit together (so that
    /// no slice below can go out of bounds, whatever view the caller built).
    pub(super) fn parts(&self) -> Result<Parts<'_>, KernelError> {
        let mut arrays: Vec<&Array> = Vec::new();
        for (_, a) in self.keys.iter().chain(&self.values) {
            arrays.extend(a.iter());
        }
        if let Some(HeldResidual::Arrays(k, v)) = &self.residual {
            arrays.extend([k, v]);
        }
        if arrays.iter().any(|a| a.ndim() != 4) {
            return Err(KernelError::Shape("cache arrays must be 4-D".into()));
        }
        let dims = |a: &Array| a.shape().iter().map(|&d| d as usize).collect::<Vec<_>>();
        let (mut batch, mut heads, mut key_dim, mut value_dim) = (0, 0, 0, 0);
        let (mut quantized, mut residual) = (0, 0);
        let (mut keys, mut values) = (None, None);
        let mut expected: Vec<(&Array, [usize; 4])> = Vec::new();
        if let (Some((k, ka)), Some((v, va))) = (&self.keys, &self.values) {
            // keys [B, H, D, Tq * b / 32], values [B, H, Tq, Dv * b / 32]
            let (ks, vs) = (dims(&ka[0]), dims(&va[0]));
            (batch, heads, key_dim) = (ks[0], ks[1], ks[2]);
            quantized = vs[2];
            value_dim = vs[3] * v.spec.per_word();
            let (kg, vg) = (
                quantized / k.spec.group_size(),
                value_dim / v.spec.group_size(),
            );
            let key_words = quantized / k.spec.per_word();
            expected.extend([
                (&ka[0], [batch, heads, key_dim, key_words]),
                (&ka[1], [batch, heads, key_dim, kg]),
                (&ka[2], [batch, heads, key_dim, kg]),
                (&va[1], [batch, heads, quantized, vg]),
                (&va[2], [batch, heads, quantized, vg]),
            ]);
            if !quantized.is_multiple_of(k.spec.group_size())
                || !value_dim.is_multiple_of(v.spec.group_size())
            {
                return Err(KernelError::Shape(
                    "quantized arrays are not whole groups".into(),
                ));
            }
            keys = Some(Quantized::new(k, ka)?);
            values = Some(Quantized::new(v, va)?);
        }
        let (mut residual_keys, mut residual_values) = (Floats::F32(&[]), Floats::F32(&[]));
        let mut window_stride = 0;
        match &self.residual {
            Some(HeldResidual::Arrays(k, v)) => {
                let (ks, vs) = (dims(k), dims(v));
                if keys.is_none() {
                    (batch, heads, key_dim, value_dim) = (ks[0], ks[1], ks[3], vs[3]);
                }
                residual = ks[2];
                window_stride = residual;
                expected.extend([
                    (k, [batch, heads, residual, key_dim]),
                    (v, [batch, heads, residual, value_dim]),
                ]);
                residual_keys = Floats::new(k)?;
                residual_values = Floats::new(v)?;
            }
            Some(HeldResidual::Host(w)) => {
                w.check()?;
                if keys.is_none() {
                    (batch, heads, key_dim, value_dim) =
                        (w.batch, w.kv_heads, w.key_dim, w.value_dim);
                }
                if (w.batch, w.kv_heads, w.key_dim, w.value_dim)
                    != (batch, heads, key_dim, value_dim)
                {
                    return Err(KernelError::Shape(format!(
                        "a window of {} x {} heads of {} and {} beside a history of {batch} \
                         x {heads} heads of {key_dim} and {value_dim}",
                        w.batch, w.kv_heads, w.key_dim, w.value_dim
                    )));
                }
                residual = w.len;
                window_stride = w.capacity;
                residual_keys = Floats::F16(w.keys);
                residual_values = Floats::F16(w.values);
            }
            None => {}
        }
        for (array, shape) in expected {
            if dims(array) != shape {
                return Err(KernelError::Shape(format!(
                    "cache array {:?} where {shape:?} was expected",
                    array.shape()
                )));
            }
        }
        Ok(Parts {
            batch,
            heads,
            key_dim,
            value_dim,
            quantized,
            residual,
            window_stride,
            keys,
            values,
            residual_keys,
            residual_values,
        })
    }
}

/// The whole cache as host slices.
pub(super) struct Parts<'a> {
    pub(super) batch: usize,
    pub(super) heads: usize,
    pub(super) key_dim: usize,
    pub(super) value_dim: usize,
    pub(super) quantized: usize,
    /// Tokens in the window.
    pub(super) residual: usize,
    /// Tokens from one pair's window to the next's in `residual_keys` and
    /// `residual_values`: the window's length, or a buffer's capacity.
    pub(super) window_stride: usize,
    pub(super) keys: Option<Quantized<'a>>,
    pub(super) values: Option<Quantized<'a>>,
    pub(super) residual_keys: Floats<'a>,
    pub(super) residual_values: Floats<'a>,
}
