//! The KIVI cache's flush on host memory: quantizing the tokens that leave the residual
//! window and joining them to the quantized history, for the host kernels.
//!
//! As MLX operations ([`crate::mlx_quant`]) a flush is about thirty small operations per
//! layer (a float32 conversion, min, max, divide, round, clip, the packing, three
//! concatenations per tensor), and on MLX's CPU back end each costs more in scheduling
//! than its arithmetic: a decode step that flushed a group took about 0.5 ms per token
//! more, on average, than one that did not, at 512 tokens. Here the reference quantizer
//! runs on the host data directly and the joins are row copies; the results are new,
//! evaluated MLX arrays of exactly their size, in the same layout and the same bits as the
//! MLX path's (`kernels/tests/mlx_quant.rs`).

use half::{bf16, f16};
use mlx_rs::{Array, ArrayElement, Dtype};

use super::buffers::{host_arrays, Floats};
use crate::{
    mlx_quant::QuantizedArray,
    reference::{self, Storage},
    KernelError, QuantSpec,
};

/// Quantizes `x` (`[.., R, C]`, float32 or float16) in groups of `G` along its last axis,
/// or, when `transposed`, along its second-last axis (the result is then that of `x` with
/// its last two axes swapped: `[.., C, R / (32 / b)]`). Scales and zeros are stored in
/// `x`'s dtype and the codes computed against them, as [`crate::mlx_quant::quantize`] does.
pub fn quantize(
    x: &Array,
    spec: QuantSpec,
    transposed: bool,
) -> Result<QuantizedArray, KernelError> {
    let shape = x.shape().to_vec();
    let [lead @ .., r, c] = shape.as_slice() else {
        return Err(KernelError::Shape(format!(
            "cannot quantize {shape:?} on the host: expected at least two axes"
        )));
    };
    let storage = match x.dtype() {
        Dtype::Float32 => Storage::F32,
        Dtype::Float16 => Storage::F16,
        other => {
            return Err(KernelError::Shape(format!(
                "the host quantizer reads float32 or float16, not {other:?}"
            )))
        }
    };
    let [x] = <[Array; 1]>::try_from(host_arrays(&[x])?).expect("one array in, one out");
    let floats = Floats::new(&x)?;
    let (r, c) = (*r as usize, *c as usize);
    let blocks: usize = lead.iter().map(|&d| d as usize).product();
    let (rows, cols) = if transposed { (c, r) } else { (r, c) };
    // Whole blocks at once: collecting a flattened iterator moved one float at a time and
    // took a fifth of a flush.
    let mut data: Vec<f32> = Vec::with_capacity(blocks * r * c);
    for b in 0..blocks {
        let block = floats.sub(b * r * c..(b + 1) * r * c);
        if transposed {
            data.extend_from_slice(&block.transposed(r, 0..c));
        } else {
            data.extend_from_slice(&block.get(0..r * c));
        }
    }
    let q = reference::quantize_rows_stored(&data, blocks * rows, cols, spec, storage)?;
    let with_last = |last: usize| [lead, &[rows as i32, last as i32]].concat();
    let params = |v: &[f32]| match storage {
        Storage::F32 => Array::from_slice(v, &with_last(cols / spec.group_size())),
        Storage::F16 => {
            let v: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            Array::from_slice(&v, &with_last(cols / spec.group_size()))
        }
    };
    Ok(QuantizedArray {
        packed: Array::from_slice(&q.packed, &with_last(cols / spec.per_word())),
        scales: params(&q.scales),
        zeros: params(&q.zeros),
        spec,
    })
}

/// Joins quantized arrays along `axis` (negative counts from the end), as
/// [`QuantizedArray::concatenate`] does, by copying rows on the host.
pub fn concatenate(parts: &[&QuantizedArray], axis: i32) -> Result<QuantizedArray, KernelError> {
    QuantizedArray::join_with(parts, axis, join)
}

/// Arrays of one dtype joined along `axis`.
fn join(arrays: &[&Array], axis: i32) -> Result<Array, KernelError> {
    // `Array::from_slice` wants a bound mlx-rs does not export, so each dtype is named.
    macro_rules! joined {
        ($t:ty) => {{
            let (data, shape) = join_as::<$t>(arrays, axis)?;
            Array::from_slice(&data, &shape)
        }};
    }
    Ok(match arrays[0].dtype() {
        Dtype::Uint32 => joined!(u32),
        Dtype::Float32 => joined!(f32),
        Dtype::Float16 => joined!(f16),
        Dtype::Bfloat16 => joined!(bf16),
        other => {
            return Err(KernelError::Shape(format!(
                "cannot join {other:?} arrays on the host"
            )))
        }
    })
}

/// The data and shape of `arrays` (all `T`) joined along `axis`.
fn join_as<T: ArrayElement + Copy>(
    arrays: &[&Array],
    axis: i32,
) -> Result<(Vec<T>, Vec<i32>), KernelError> {
    let shape = arrays[0].shape().to_vec();
    let ndim = shape.len() as i32;
    let at = if axis < 0 { axis + ndim } else { axis };
    if !(0..ndim).contains(&at) {
        return Err(KernelError::Shape(format!(
            "cannot join {shape:?} along axis {axis}"
        )));
    }
    let at = at as usize;
    let fits = |s: &[i32]| {
        s.len() == shape.len()
            && s.iter()
                .zip(&shape)
                .enumerate()
                .all(|(i, (a, b))| i == at || a == b)
    };
    if let Some(odd) = arrays
        .iter()
        .find(|a| a.dtype() != T::DTYPE || !fits(a.shape()))
    {
        return Err(KernelError::Shape(format!(
            "cannot join {:?} {:?} to {shape:?} {:?} along axis {axis}",
            odd.shape(),
            odd.dtype(),
            arrays[0].dtype()
        )));
    }
    let ready = host_arrays(arrays)?;
    let slices = ready
        .iter()
        .map(|a| a.try_as_slice::<T>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| KernelError::Shape(format!("cannot read an array on the host: {e}")))?;
    // Row-major: each part is `outer` runs of its own length (its extent along `axis`
    // times the axes after it); the result is the runs interleaved part by part.
    let outer: usize = shape[..at].iter().map(|&d| d as usize).product();
    let runs: Vec<usize> = slices.iter().map(|s| s.len() / outer.max(1)).collect();
    let mut out = Vec::with_capacity(slices.iter().map(|s| s.len()).sum());
    for o in 0..outer {
        for (s, &run) in slices.iter().zip(&runs) {
            out.extend_from_slice(&s[o * run..(o + 1) * run]);
        }
    }
    let mut joined = shape;
    joined[at] = ready.iter().map(|a| a.shape()[at]).sum();
    Ok((out, joined))
}
