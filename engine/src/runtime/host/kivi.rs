//! The KIVI cache on the host runtime: the residual window in float16 host buffers written
//! in place ([`HostKv`]), tokens rotated and quantized by the host kernels, attention by
//! the CPU kernels.
//!
//! A decode step writes one row per head into the window, and a flush moves the window's
//! newest rows down over the group that left it. Rebuilding the window as new arrays at
//! each step copied it twice per layer and token (about 7 µs per layer, 0.2 ms of a
//! SmolLM2 decode step), and a flush's copies more. New tokens are rounded to float16 as
//! MLX rounds them, so the window holds the MLX runtime's bits.

use half::f16;
use kivi_kernels::{
    host::{self, readable},
    mlx_quant::QuantizedArray,
    rotation, Kernels, QuantSpec, Residual,
};
use mlx_rs::Array;

use super::kv::HostKv;
use super::Host;
use crate::cache::arrays::{host_block, host_floats};
use crate::cache::kivi_runtime::{Flushed, KiviRuntime, ResidualWindow, Step};
use crate::cache::CacheError;

impl KiviRuntime for Host {
    type Window = HostKv;
    const KERNELS: Kernels = Kernels::Host;

    fn rotate(x: &Array, on: Option<&[bool]>, scales: Option<&[f32]>) -> Result<Array, CacheError> {
        let x = readable::<f32>(x)?;
        let (l, d) = (x.dim(2) as usize, x.dim(3) as usize);
        let mut data = host_floats(&x)?.to_vec();
        for (i, head) in data.chunks_exact_mut(l * d).enumerate() {
            if on.is_none_or(|on| on[i]) {
                if let Some(s) = scales {
                    let s = &s[i * d..(i + 1) * d];
                    for row in head.chunks_exact_mut(d) {
                        row.iter_mut().zip(s).for_each(|(v, s)| *v *= s);
                    }
                }
                rotation::rotate_rows(head, d)?;
            }
        }
        Ok(Array::from_slice(&data, x.shape()))
    }

    fn quantize(
        x: &Array,
        spec: QuantSpec,
        transposed: bool,
    ) -> Result<QuantizedArray, CacheError> {
        Ok(host::quantize::quantize(x, spec, transposed)?)
    }

    fn concatenate(
        held: &QuantizedArray,
        new: &QuantizedArray,
        axis: i32,
    ) -> Result<QuantizedArray, CacheError> {
        Ok(host::quantize::concatenate(&[held, new], axis)?)
    }
}

/// New tokens for a host window, read on the host as float32 `[B, H, L, D]`.
pub(crate) struct HostEntry {
    keys: Array,
    values: Array,
    /// `[B, H, L, Dk, Dv]`.
    shape: [usize; 5],
    step: Step,
}

/// The tokens a call flushes: `flush` after the first `sinks` leave the buffers, which go
/// back to `room` tokens.
pub(crate) struct HostCut(Step);

impl ResidualWindow for HostKv {
    type Entry = HostEntry;
    type Cut = HostCut;

    fn from_arrays(keys: Array, values: Array, room: usize) -> Result<Self, CacheError> {
        Ok(HostKv::from_block(&host_block(&keys, &values)?, room))
    }

    fn len(&self) -> usize {
        self.len
    }

    fn view(&self) -> Residual<'_> {
        Residual::Host(self.window())
    }

    fn arrays(&self) -> (Array, Array) {
        self.window().arrays()
    }

    fn bytes(&self) -> u64 {
        HostKv::bytes(self)
    }

    fn allocated(tokens: usize, room: usize) -> usize {
        // The buffers keep room for the largest window once anything is held.
        if tokens > 0 {
            tokens.max(room)
        } else {
            0
        }
    }

    fn pending(&self) -> Vec<&Array> {
        Vec::new()
    }

    fn truncated(mut self, keep: usize) -> Result<Self, CacheError> {
        // The buffers keep their room: new tokens usually follow at once.
        self.len = keep.min(self.len);
        Ok(self)
    }

    fn plan(
        held: Option<&Self>,
        keys: &Array,
        values: &Array,
        step: Step,
    ) -> Result<(Flushed, HostEntry), CacheError> {
        let (keys, values) = (readable::<f32>(keys)?, readable::<f32>(values)?);
        let (k, v) = (host_floats(&keys)?, host_floats(&values)?);
        let [batch, heads, len, key_dim] = dims(&keys)?;
        let value_dim = dims(&values)?[3];
        let empty;
        let store = match held {
            Some(store) => store,
            None => {
                empty = HostKv::new(batch, heads, key_dim, value_dim);
                &empty
            }
        };
        let Step { sinks, flush, .. } = step;
        if !store.fits(batch, heads, key_dim, value_dim)
            || k.len() != batch * heads * len * key_dim
            || v.len() != batch * heads * len * value_dim
        {
            return Err(CacheError::Shape(format!(
                "new tokens {batch} x {heads} x {len} of {key_dim} and {value_dim} do not fit \
                 the window"
            )));
        }
        if sinks + flush > store.len + len {
            return Err(CacheError::Shape(format!(
                "cannot quantize {flush} of {} window tokens after {sinks} sinks",
                store.len + len
            )));
        }
        let flushed = (flush > 0).then(|| {
            let (fk, fv) = store.rows_with(k, v, len, sinks, flush);
            let array = |data: &[f16], dim: usize| {
                Array::from_slice(data, &[batch, heads, flush, dim].map(|d| d as i32))
            };
            (array(&fk, key_dim), array(&fv, value_dim))
        });
        let entry = HostEntry {
            shape: [batch, heads, len, key_dim, value_dim],
            keys,
            values,
            step,
        };
        Ok((flushed, entry))
    }

    fn enter(entry: HostEntry, held: Option<Self>) -> (Self, HostCut) {
        let [batch, heads, len, key_dim, value_dim] = entry.shape;
        let mut store = held.unwrap_or_else(|| HostKv::new(batch, heads, key_dim, value_dim));
        // A decode step stays within the room; a prompt chunk grows the buffers.
        store.reserve(entry.step.room.max(store.len + len));
        // `plan` read both as float32 on the host already.
        let (keys, values) = (entry.keys.as_slice::<f32>(), entry.values.as_slice::<f32>());
        store.append(keys, values, len);
        (store, HostCut(entry.step))
    }

    fn cut(HostCut(step): HostCut, mut store: Self) -> Option<Self> {
        store.remove(step.sinks, step.flush);
        // A prompt chunk grew the buffers; the window is back within its room.
        store.resize(step.room);
        (store.len > 0).then_some(store)
    }
}

/// A 4-D array's shape.
fn dims(a: &Array) -> Result<[usize; 4], CacheError> {
    match a.shape() {
        &[b, h, l, d] => Ok([b, h, l, d].map(|n| n.max(0) as usize)),
        other => Err(CacheError::Shape(format!(
            "expected a [B, H, L, D] array, got {other:?}"
        ))),
    }
}
