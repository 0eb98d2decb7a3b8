//! The residual window's append on host memory, for the host kernels.
//!
//! A decode step appends one token per layer. Done as MLX operations (a float16 conversion,
//! a concatenation and a copy for keys and for values), that is six operations the fused
//! attention kernel then has to evaluate, and on MLX's CPU back end each evaluation is a
//! round trip to its stream thread that costs more than the work itself. Here the window
//! is rebuilt on the host instead: the held float16 window is copied, the new float32
//! tokens are rounded to float16 (round to nearest even, as MLX's conversion) behind it,
//! and the result is split into the oldest `flush` tokens (handed to the quantizer) and the
//! rest (the new window), each a new, evaluated MLX array of exactly its size.
//!
//! The arrays are the same bits as the MLX path's (`kivi_tests.rs` compares the two), so
//! one prefill, any chunking and token-by-token decode still give the same cache.

use half::{f16, slice::HalfFloatSliceExt};
use kivi_kernels::host::readable;
use mlx_rs::Array;

use crate::cache::CacheError;

/// The residual `held` (float16, `[B, H, Tr, D]`) followed by `new` (float32,
/// `[B, H, L, D]`), split into the `flush` tokens after its first `sinks` (to be quantized)
/// and the rest (the sinks, then the new window). Either part is `None` when empty. The host
/// backend computes in float32 and stores in float16; other dtypes are converted as they
/// are read.
pub(super) fn roll(
    held: Option<&Array>,
    new: &Array,
    sinks: usize,
    flush: usize,
) -> Result<(Option<Array>, Option<Array>), CacheError> {
    let &[batch, heads, len, dim] = new.shape() else {
        return Err(CacheError::Shape(format!(
            "new tokens must be [B, kv_heads, L, D], got {:?}",
            new.shape()
        )));
    };
    let new = readable::<f32>(new)?;
    let new_f32 = slice::<f32>(&new)?;
    let held = held.map(readable::<f16>).transpose()?;
    let held_f16 = held.as_ref().map(slice::<f16>).transpose()?.unwrap_or(&[]);
    let (pairs, len, dim) = ((batch * heads) as usize, len as usize, dim as usize);
    let held_len = held.as_ref().map_or(0, |h| h.dim(2) as usize);
    if held_f16.len() != pairs * held_len * dim {
        return Err(CacheError::Shape(format!(
            "the window {:?} does not fit new tokens {:?}",
            held.as_ref().map(Array::shape),
            new.shape()
        )));
    }
    let total = held_len + len;
    if sinks + flush > total {
        return Err(CacheError::Shape(format!(
            "cannot quantize {flush} of {total} window tokens after {sinks} sinks"
        )));
    }
    let mut rounded = vec![f16::ZERO; new_f32.len()];
    rounded.convert_from_f32_slice(new_f32);
    // Pair p's residual is its held rows then its new rows; rows `sinks..sinks + flush` of
    // each pair go to `old`, the others to `rest`.
    let mut old = Vec::with_capacity(pairs * flush * dim);
    let mut rest = Vec::with_capacity(pairs * (total - flush) * dim);
    let (from, to) = (sinks * dim, (sinks + flush) * dim);
    for p in 0..pairs {
        let held_rows = &held_f16[p * held_len * dim..][..held_len * dim];
        let new_rows = &rounded[p * len * dim..][..len * dim];
        // Rows `a..b` of the pair's held rows followed by its new rows.
        let rows = |into: &mut Vec<f16>, a: usize, b: usize| {
            let split = held_rows.len();
            into.extend_from_slice(&held_rows[a.min(split)..b.min(split)]);
            into.extend_from_slice(&new_rows[a.max(split) - split..b.max(split) - split]);
        };
        rows(&mut rest, 0, from);
        rows(&mut old, from, to);
        rows(&mut rest, to, total * dim);
    }
    let array = |data: &[f16], tokens: usize| {
        (tokens > 0).then(|| Array::from_slice(data, &[batch, heads, tokens as i32, dim as i32]))
    };
    Ok((array(&old, flush), array(&rest, total - flush)))
}

fn slice<T: mlx_rs::ArrayElement>(a: &Array) -> Result<&[T], CacheError> {
    a.try_as_slice::<T>()
        .map_err(|e| CacheError::Shape(format!("cannot read the KV window on the host: {e}")))
}
