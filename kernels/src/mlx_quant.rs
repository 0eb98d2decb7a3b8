//! The KIVI quantizer as an MLX graph, bit-identical to [`crate::reference`].
//!
//! MLX's own `quantize` (affine mode) is not used: it rounds differently from the spec.
//! It makes the edge of larger magnitude (max or min) the bias and snaps the scale so that
//! this edge is a whole number of steps from zero (`scale = edge / round(edge / scale)`),
//! and clamps scales to at least 1e-7. Its codes differ from the spec's in a share of
//! places and its reconstruction error is slightly different (measured in
//! `kernels/tests/mlx_quant.rs`, see the README). Instead, this module builds the spec's
//! min/max formula from MLX ops (min, max, divide, round, clip) and packs with
//! multiply-by-shift plus sum, MLX's own packing, so its output feeds MLX's
//! `quantized_matmul` and `dequantize` unchanged (`bias` = `zero`).
//!
//! The arithmetic runs in float32 whatever the input dtype; scales and zeros are stored in
//! the input's dtype (the KIVI cache passes float16 or bfloat16). With 16-bit storage the
//! codes are computed against the rounded scale and zero, so they agree with what
//! dequantization uses.

use mlx_rs::{ops, Array, Dtype};

use crate::{KernelError, QuantSpec};

/// A tensor quantized in groups along its last axis, as MLX arrays.
#[derive(Debug, Clone)]
pub struct QuantizedArray {
    /// Codes packed into `u32` words in MLX's layout, `[.., N / (32 / b)]`.
    pub packed: Array,
    /// One scale per group, `[.., N / G]`.
    pub scales: Array,
    /// One zero point (the group minimum) per group, `[.., N / G]`; MLX calls it the bias.
    pub zeros: Array,
    /// Bits and group size.
    pub spec: QuantSpec,
}

/// Quantizes `x` (`[.., N]`, any float dtype, `N` a multiple of the group size) in groups of
/// `G` consecutive values along its last axis.
pub fn quantize(x: &Array, spec: QuantSpec) -> Result<QuantizedArray, KernelError> {
    let shape = x.shape().to_vec();
    let (&n, lead) = shape
        .split_last()
        .ok_or_else(|| KernelError::Shape("cannot quantize a scalar".into()))?;
    let group = spec.group_size() as i32;
    if n % group != 0 {
        return Err(KernelError::Shape(format!(
            "last axis of {shape:?} is not a multiple of the group size {group}"
        )));
    }
    let param_dtype = float_dtype(x.dtype())?;
    let with_last = |tail: &[i32]| [lead, tail].concat();

    let groups = x
        .as_dtype(Dtype::Float32)?
        .reshape(&with_last(&[n / group, group]))?;
    let lo = groups.min_axis(-1, true)?;
    let hi = groups.max_axis(-1, true)?;
    let scale = ops::divide(
        ops::subtract(&hi, &lo)?,
        Array::from_f32(spec.max_code() as f32),
    )?;
    let (scales, zeros) = (scale.as_dtype(param_dtype)?, lo.as_dtype(param_dtype)?);
    // Quantize against the stored (possibly rounded) parameters.
    let (scale, zero) = if param_dtype == Dtype::Float32 {
        (scale, lo)
    } else {
        (
            scales.as_dtype(Dtype::Float32)?,
            zeros.as_dtype(Dtype::Float32)?,
        )
    };
    // A constant group has scale 0 and x - zero == 0: dividing by 1 gives code 0 exactly.
    let divisor = ops::select(
        &scale.eq(Array::from_f32(0.0))?,
        Array::from_f32(1.0),
        &scale,
    )?;
    let codes = ops::clip(
        ops::divide(ops::subtract(&groups, &zero)?, &divisor)?.round(None)?,
        (0.0f32, spec.max_code() as f32),
    )?
    .as_dtype(Dtype::Uint32)?;

    let per_word = spec.per_word() as i32;
    let words = codes.reshape(&with_last(&[n / per_word, per_word]))?;
    // Code i of a word at bits [i*b, (i+1)*b): the codes occupy disjoint bits, so the sum of
    // code * 2^(i*b) is their bitwise or, and stays below 2^32.
    let shifts: Vec<u32> = (0..per_word as u32)
        .map(|i| 1u32 << (i * spec.bits()))
        .collect();
    let packed =
        ops::multiply(&words, Array::from_slice(&shifts, &[per_word]))?.sum_axis(-1, false)?;
    let params_shape = with_last(&[n / group]);
    Ok(QuantizedArray {
        packed: packed.as_dtype(Dtype::Uint32)?,
        scales: scales.reshape(&params_shape)?,
        zeros: zeros.reshape(&params_shape)?,
        spec,
    })
}

fn float_dtype(dtype: Dtype) -> Result<Dtype, KernelError> {
    match dtype {
        Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16 => Ok(dtype),
        other => Err(KernelError::Shape(format!(
            "cannot quantize {other:?}: expected float32, float16 or bfloat16"
        ))),
    }
}

impl QuantizedArray {
    /// Length of the quantized (last) axis.
    pub fn len(&self) -> usize {
        self.scales
            .shape()
            .last()
            .map_or(0, |&g| g as usize * self.spec.group_size())
    }

    /// True when the quantized axis is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The reconstruction `q * scale + zero`, `[.., N]`, in the dtype of the scales.
    pub fn dequantize(&self) -> Result<Array, KernelError> {
        Ok(ops::dequantize(
            &self.packed,
            &self.scales,
            &self.zeros,
            self.spec.group_size() as i32,
            self.spec.bits() as i32,
        )?)
    }

    /// Bytes of the three buffers, as MLX reports them.
    pub fn nbytes(&self) -> usize {
        self.packed.nbytes() + self.scales.nbytes() + self.zeros.nbytes()
    }

    /// The three arrays, for evaluation or saving.
    pub fn arrays(&self) -> [&Array; 3] {
        [&self.packed, &self.scales, &self.zeros]
    }

    /// Joins quantized arrays along `axis` (negative counts from the end). Along the last
    /// axis the parts are whole groups, so packed words, scales and zeros join alike.
    pub fn concatenate(parts: &[&QuantizedArray], axis: i32) -> Result<Self, KernelError> {
        Self::join_with(parts, axis, |arrays, axis| {
            Ok(ops::concatenate(arrays, axis)?)
        })
    }

    /// [`Self::concatenate`] with `join` joining each of the three buffers (MLX's
    /// concatenation, or the host's row copies in [`crate::host::quantize`]).
    pub fn join_with(
        parts: &[&QuantizedArray],
        axis: i32,
        join: impl Fn(&[&Array], i32) -> Result<Array, KernelError>,
    ) -> Result<Self, KernelError> {
        let first = parts
            .first()
            .ok_or_else(|| KernelError::Shape("nothing to concatenate".into()))?;
        if parts.iter().any(|p| p.spec != first.spec) {
            return Err(KernelError::Shape(
                "cannot join arrays quantized differently".into(),
            ));
        }
        let join = |pick: fn(&QuantizedArray) -> &Array| {
            let arrays: Vec<&Array> = parts.iter().map(|p| pick(p)).collect();
            join(&arrays, axis)
        };
        Ok(Self {
            packed: join(|p| &p.packed)?,
            scales: join(|p| &p.scales)?,
            zeros: join(|p| &p.zeros)?,
            spec: first.spec,
        })
    }

    /// Keeps the first `len` entries along `axis` (`-1`, the quantized axis, in values, a
    /// multiple of the group size; or `-2`), as fresh contiguous buffers.
    pub fn take(&self, axis: i32, len: usize) -> Result<Self, KernelError> {
        let (words, groups) = match axis {
            -1 => {
                if !len.is_multiple_of(self.spec.group_size()) {
                    return Err(KernelError::Shape(format!(
                        "cannot cut quantized groups of {} at {len}",
                        self.spec.group_size()
                    )));
                }
                (len / self.spec.per_word(), len / self.spec.group_size())
            }
            -2 => (len, len),
            _ => return Err(KernelError::Shape(format!("cannot cut along axis {axis}"))),
        };
        // A slice would keep the whole parent buffer alive; copy so that nbytes is honest.
        let take = |a: &Array, n: usize| -> Result<Array, KernelError> {
            let parts = a.split_at_indices(&[n as i32], Some(axis))?;
            Ok(parts[0].contiguous()?)
        };
        Ok(Self {
            packed: take(&self.packed, words)?,
            scales: take(&self.scales, groups)?,
            zeros: take(&self.zeros, groups)?,
            spec: self.spec,
        })
    }

    /// Entries `start..start + len` along `axis` (`-1`, the quantized axis, at group
    /// boundaries; or `-2`) as views of the same buffers: a run of the history that
    /// attention reads and drops, where [`Self::take`] makes lasting copies.
    pub fn span(&self, axis: i32, start: usize, len: usize) -> Result<Self, KernelError> {
        let (unit_words, unit_groups) = match axis {
            -1 => {
                let group = self.spec.group_size();
                if !start.is_multiple_of(group) || !len.is_multiple_of(group) {
                    return Err(KernelError::Shape(format!(
                        "cannot take positions {start}..{} of groups of {group}",
                        start + len
                    )));
                }
                (self.spec.per_word(), group)
            }
            -2 => (1, 1),
            _ => return Err(KernelError::Shape(format!("cannot cut along axis {axis}"))),
        };
        let slice = |a: &Array, unit: usize| -> Result<Array, KernelError> {
            let (from, to) = ((start / unit) as i32, ((start + len) / unit) as i32);
            let parts = a.split_at_indices(&[from, to], Some(axis))?;
            Ok(parts[1].clone())
        };
        Ok(Self {
            packed: slice(&self.packed, unit_words)?,
            scales: slice(&self.scales, unit_groups)?,
            zeros: slice(&self.zeros, unit_groups)?,
            spec: self.spec,
        })
    }

    /// `x @ W` with `W` this array dequantized: `x` is `[.., M, K]` and `W` is `[.., K, N]`
    /// quantized along `N` (`transpose = false`), or `W` is `[.., N, K]` quantized along `K`
    /// (`transpose = true`, computing `x @ W^T`).
    pub fn matmul(&self, x: &Array, transpose: bool) -> Result<Array, KernelError> {
        Ok(ops::quantized_matmul(
            x,
            &self.packed,
            &self.scales,
            &self.zeros,
            transpose,
            self.spec.group_size() as i32,
            self.spec.bits() as i32,
        )?)
    }
}
