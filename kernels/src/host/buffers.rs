//! MLX arrays read as host slices: evaluated, row-contiguous buffers, and float16 or
//! float32 data read in float32. Shared by the host kernels and the fused decode kernel.

use std::borrow::Cow;
use std::ops::Range;

use half::{f16, slice::HalfFloatSliceExt};
use mlx_rs::{error::Exception, transforms::eval, Array, ArrayElement, Dtype};

use crate::KernelError;

/// `a` as an evaluated, row-contiguous array of `T` whose host slice can be read: `a`
/// itself when it already is one (no MLX operation), otherwise a converted or contiguous
/// copy.
pub fn readable<T: ArrayElement>(a: &Array) -> Result<Array, Exception> {
    let a = if a.dtype() == T::DTYPE {
        a.clone()
    } else {
        a.as_dtype(T::DTYPE)?
    };
    if a.try_as_slice::<T>().is_ok() {
        return Ok(a);
    }
    let a = a.contiguous()?;
    a.eval()?;
    Ok(a)
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
    pub(crate) fn sub(&self, range: Range<usize>) -> Floats<'a> {
        match *self {
            Floats::F32(x) => Floats::F32(&x[range]),
            Floats::F16(x) => Floats::F16(&x[range]),
        }
    }

    /// Columns `cols` of the buffer read as `rows` rows, in float32 and transposed
    /// (`[cols.len(), rows]`): each row's part converted at once, then scattered.
    pub(crate) fn transposed(&self, rows: usize, cols: Range<usize>) -> Vec<f32> {
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

    /// Elements `range` in float32: borrowed when stored so, else converted into `buf`,
    /// which only grows. A loop over chunks then allocates and zeroes its buffer once,
    /// not per chunk: at 512 tokens a decode step converts a float16 window in about 700
    /// chunks of 32 KiB.
    pub(crate) fn get_in<'s>(&self, range: Range<usize>, buf: &'s mut Vec<f32>) -> &'s [f32]
    where
        'a: 's,
    {
        match *self {
            Floats::F32(x) => &x[range],
            Floats::F16(x) => {
                let len = range.len();
                if buf.len() < len {
                    buf.resize(len, 0.0);
                }
                f16_to_f32(&x[range], &mut buf[..len]);
                &buf[..len]
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks of a float16 buffer read through one reused buffer, a long one first: each
    /// read is exactly its range's values; a float32 buffer is borrowed.
    #[test]
    fn reads_through_a_reused_buffer_are_their_ranges() {
        let values: Vec<f32> = (0..100).map(|i| i as f32 * 0.25 - 7.0).collect();
        let halves: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
        let mut buf = Vec::new();
        for range in [0..64, 10..19, 50..100, 99..100] {
            let got = Floats::F16(&halves)
                .get_in(range.clone(), &mut buf)
                .to_vec();
            assert_eq!(got, values[range.clone()]);
            let borrowed = Floats::F32(&values).get_in(range.clone(), &mut buf);
            assert_eq!(borrowed.as_ptr(), values[range].as_ptr());
        }
    }
}
