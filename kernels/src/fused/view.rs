//! The cache as the kernel reads it: evaluated MLX buffers checked against each other and
//! borrowed as host slices (scales, zeros and the residual window converted to float32
//! when they are stored in float16).

use std::borrow::Cow;
use std::ops::Range;

use half::{f16, slice::HalfFloatSliceExt};
use mlx_rs::{transforms::eval, Array, Dtype};

use crate::{attention::CacheView, mlx_quant::QuantizedArray, KernelError};

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
/// already contiguous, which they are), owned here so that slices can borrow them.
pub(super) struct Held {
    pub(super) queries: Array,
    keys: Option<(QuantizedArray, [Array; 3])>,
    values: Option<(QuantizedArray, [Array; 3])>,
    residual: Option<(Array, Array)>,
}

impl Held {
    pub(super) fn new(cache: &CacheView<'_>, queries: &Array) -> Result<Self, KernelError> {
        if cache.keys.is_some() != cache.values.is_some()
            || cache.residual_keys.is_some() != cache.residual_values.is_some()
        {
            return Err(KernelError::Shape("keys and values held unevenly".into()));
        }
        let mut sources = vec![queries];
        for q in cache.keys.iter().chain(&cache.values) {
            sources.extend(q.arrays());
        }
        sources.extend(cache.residual_keys.iter().chain(&cache.residual_values));
        let mut ready = host_arrays(&sources)?.into_iter();
        let mut next = || ready.next().expect("one array per source");
        let queries = next();
        let keys = cache.keys.map(|q| (q.clone(), [next(), next(), next()]));
        let values = cache.values.map(|q| (q.clone(), [next(), next(), next()]));
        let residual = cache.residual_keys.map(|_| (next(), next()));
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
        if let Some((k, v)) = &self.residual {
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
        if let Some((k, v)) = &self.residual {
            let (ks, vs) = (dims(k), dims(v));
            if keys.is_none() {
                (batch, heads, key_dim, value_dim) = (ks[0], ks[1], ks[3], vs[3]);
            }
            residual = ks[2];
            expected.extend([
                (k, [batch, heads, residual, key_dim]),
                (v, [batch, heads, residual, value_dim]),
            ]);
            residual_keys = Floats::new(k)?;
            residual_values = Floats::new(v)?;
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
    pub(super) residual: usize,
    pub(super) keys: Option<Quantized<'a>>,
    pub(super) values: Option<Quantized<'a>>,
    pub(super) residual_keys: Floats<'a>,
    pub(super) residual_values: Floats<'a>,
}

/// `arrays` evaluated and row-contiguous, in order: each the array itself where it already
/// is (the cache's buffers are), otherwise a contiguous copy.
pub(crate) fn host_arrays(arrays: &[&Array]) -> Result<Vec<Array>, KernelError> {
    // One evaluation for everything: each host read would otherwise wait for the
    // scheduler on its own.
    eval(arrays.iter().copied())?;
    let mut copies = Vec::new();
    let ready = arrays
        .iter()
        .map(|&a| {
            if row_contiguous(a) {
                return Ok(a.clone());
            }
            let copy = a.contiguous()?;
            copies.push(copy.clone());
            Ok(copy)
        })
        .collect::<Result<Vec<_>, KernelError>>()?;
    if !copies.is_empty() {
        eval(&copies)?;
    }
    Ok(ready)
}

/// Whether an evaluated array's buffer is laid out row-major with no gaps, so that it can
/// be read as a host slice as it is.
fn row_contiguous(a: &Array) -> bool {
    let mut contiguous = false;
    // SAFETY: a live array handle and a pointer to a bool, as the C API expects.
    let status = unsafe { mlx_sys::_mlx_array_is_row_contiguous(&mut contiguous, a.as_ptr()) };
    status == 0 && contiguous
}

/// A float32 or float16 buffer, read in float32: parts of it are converted where they are
/// used (a span of one head at a time), which keeps the copies small.
#[derive(Clone, Copy)]
pub(crate) enum Floats<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl<'a> Floats<'a> {
    pub(crate) fn new(a: &'a Array) -> Result<Self, KernelError> {
        Ok(match a.dtype() {
            Dtype::Float16 => Floats::F16(slice::<f16>(a)?),
            _ => Floats::F32(slice::<f32>(a)?),
        })
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Floats::F32(x) => x.len(),
            Floats::F16(x) => x.len(),
        }
    }

    /// Elements `range`, not converted.
    pub(super) fn sub(&self, range: Range<usize>) -> Floats<'a> {
        match *self {
            Floats::F32(x) => Floats::F32(&x[range]),
            Floats::F16(x) => Floats::F16(&x[range]),
        }
    }

    /// Columns `cols` of the buffer read as `rows` rows, in float32 and transposed
    /// (`[cols.len(), rows]`): each row's part converted at once, then scattered.
    pub(super) fn transposed(&self, rows: usize, cols: Range<usize>) -> Vec<f32> {
        let (row_len, width) = (self.len() / rows, cols.len());
        let mut out = vec![0f32; width * rows];
        let mut converted = vec![0f32; width];
        for r in 0..rows {
            let range = r * row_len + cols.start..r * row_len + cols.end;
            let row: &[f32] = match *self {
                Floats::F32(x) => &x[range],
                Floats::F16(x) => {
                    f16_to_f32(&x[range], &mut converted);
                    &converted
                }
            };
            for (j, &x) in row.iter().enumerate() {
                out[j * rows + r] = x;
            }
        }
        out
    }

    /// Elements `range` in float32 (borrowed when stored so).
    pub(crate) fn get(&self, range: Range<usize>) -> Cow<'a, [f32]> {
        match *self {
            Floats::F32(x) => Cow::Borrowed(&x[range]),
            Floats::F16(x) => {
                let mut out = vec![0f32; range.len()];
                f16_to_f32(&x[range], &mut out);
                Cow::Owned(out)
            }
        }
    }
}

/// `src` converted into `dst` (of the same length): F16C's 8-lane conversion, inlined into
/// one loop, where the CPU has it. `half`'s slice conversion checks the CPU and calls an
/// out-of-line function per 8 elements, which made converting a decode step's scales,
/// zeros and window a fifth of the kernel's time (float16 against float32 storage,
/// `RAYON_NUM_THREADS=1 decode_timing 4096`).
fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx,f16c")]
        fn f16c(src: &[f16], dst: &mut [f32]) {
            use std::arch::x86_64::{_mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
            let mut from = src.chunks_exact(8);
            let mut to = dst.chunks_exact_mut(8);
            for (h, f) in (&mut from).zip(&mut to) {
                // SAFETY: `h` holds 8 f16 (16 bytes) and `f` 8 f32; unaligned access.
                unsafe {
                    _mm256_storeu_ps(
                        f.as_mut_ptr(),
                        _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().cast())),
                    )
                };
            }
            for (h, f) in from.remainder().iter().zip(to.into_remainder()) {
                *f = h.to_f32();
            }
        }
        use std::sync::OnceLock;
        static HAS: OnceLock<bool> = OnceLock::new();
        if *HAS.get_or_init(|| is_x86_feature_detected!("f16c")) {
            // SAFETY: the CPU supports AVX and F16C (checked at run time).
            return unsafe { f16c(src, dst) };
        }
    }
    src.convert_to_f32_slice(dst);
}

pub(crate) fn slice<T: mlx_rs::ArrayElement>(a: &Array) -> Result<&[T], KernelError> {
    a.try_as_slice::<T>()
        .map_err(|e| KernelError::Shape(format!("cannot read an array on the host: {e}")))
}
