//! A packed KIVI tensor back in float32 on the host (`code * scale + zero`), for the host
//! attention of a prefill chunk.
//!
//! MLX's `dequantize` on the CPU goes through several generic operations (a float16 to
//! float32 copy of the scales, shifts and masks as broadcast binary ops, then the
//! multiply-add), which took about a tenth of a 4k-token KIVI prefill (`perf`). Here one
//! pass over the packed words writes each value once, vectorized where the CPU has AVX2.

use super::buffers::{host_arrays, slice, Floats};
use crate::{mlx_quant::QuantizedArray, KernelError};

/// The values `q` stands for, row-major in its logical shape (the packed shape with the
/// last axis times the codes per word), and that shape.
pub fn dequantize(q: &QuantizedArray) -> Result<(Vec<f32>, Vec<usize>), KernelError> {
    let arrays = host_arrays(&q.arrays())?;
    let packed = slice::<u32>(&arrays[0])?;
    let (scales, zeros) = (Floats::new(&arrays[1])?, Floats::new(&arrays[2])?);
    let mut shape: Vec<usize> = arrays[0].shape().iter().map(|&d| d as usize).collect();
    let per_word = q.spec.per_word();
    let group = q.spec.group_size();
    let last = shape
        .last_mut()
        .ok_or_else(|| KernelError::Shape("cannot dequantize a scalar".into()))?;
    *last *= per_word;
    let (cols, len) = (*last, packed.len() * per_word);
    if cols % group != 0 || scales.len() != len / group || zeros.len() != len / group {
        return Err(KernelError::Shape(format!(
            "packed {:?} with {} scales and {} zeros is not whole groups of {group}",
            arrays[0].shape(),
            scales.len(),
            zeros.len()
        )));
    }
    let (scales, zeros) = (scales.get(0..scales.len()), zeros.get(0..zeros.len()));
    let mut out = vec![0f32; len];
    let fill = match q.spec.bits() {
        2 => fill_any::<2, 16>,
        _ => fill_any::<4, 8>,
    };
    fill(packed, &scales, &zeros, group, &mut out);
    Ok((out, shape))
}

/// [`fill`] with AVX2 where the CPU has it. A named function rather than a closure: a
/// closure would be compiled for the baseline target.
fn fill_any<const BITS: u32, const PW: usize>(
    packed: &[u32],
    scales: &[f32],
    zeros: &[f32],
    group: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        fn avx2<const BITS: u32, const PW: usize>(
            packed: &[u32],
            scales: &[f32],
            zeros: &[f32],
            group: usize,
            out: &mut [f32],
        ) {
            fill::<BITS, PW>(packed, scales, zeros, group, out);
        }
        if super::has_avx2() {
            // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
            return unsafe { avx2::<BITS, PW>(packed, scales, zeros, group, out) };
        }
    }
    fill::<BITS, PW>(packed, scales, zeros, group, out);
}

/// Writes `code * scale + zero` for every code of `packed` (groups of `group` consecutive
/// codes share a scale and a zero; codes lowest bits first in each word), rounded as MLX's
/// `dequantize` rounds it: a multiply, then an add.
#[inline(always)]
fn fill<const BITS: u32, const PW: usize>(
    packed: &[u32],
    scales: &[f32],
    zeros: &[f32],
    group: usize,
    out: &mut [f32],
) {
    let mask = (1u32 << BITS) - 1;
    let groups = packed
        .chunks_exact(group / PW)
        .zip(out.chunks_exact_mut(group));
    for ((words, out), (&scale, &zero)) in groups.zip(scales.iter().zip(zeros)) {
        for (&word, out) in words.iter().zip(out.chunks_exact_mut(PW)) {
            for (j, o) in out.iter_mut().enumerate() {
                // Through i32: a u32 to f32 conversion takes several vector instructions.
                let code = ((word >> (BITS as usize * j)) & mask) as i32 as f32;
                *o = code * scale + zero;
            }
        }
    }
}
