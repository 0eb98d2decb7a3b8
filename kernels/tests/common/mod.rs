//! Helpers shared by the integration tests: moving data between Rust and MLX.
#![allow(dead_code)]

use kivi_kernels::{
    mlx_quant::{self, QuantizedArray},
    quantized_len,
    reference::CacheSpec,
    sink_len,
    testdata::Layer,
    CacheView, KeyAxis, Residual,
};
use mlx_rs::{ops, ops::indexing::IndexOp, Array, Dtype};

/// An f32 array of the given shape.
pub fn array(data: &[f32], shape: &[usize]) -> Array {
    let shape: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
    Array::from_slice(data, &shape)
}

/// The values of an array as f32 (evaluated, made contiguous, converted).
pub fn f32s(a: &Array) -> Vec<f32> {
    let a = a.as_dtype(Dtype::Float32).unwrap().contiguous().unwrap();
    a.as_slice::<f32>().to_vec()
}

/// The values of a u32 array.
pub fn u32s(a: &Array) -> Vec<u32> {
    let a = a.contiguous().unwrap();
    a.as_slice::<u32>().to_vec()
}

/// Bit patterns of f32 values, for exact comparisons that also tell -0.0 from 0.0.
pub fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// The arrays of a KIVI cache holding all of `layer`'s tokens, built directly from the
/// flush rule (the engine's cache builds the same by appends).
pub struct Parts {
    keys: Option<QuantizedArray>,
    values: Option<QuantizedArray>,
    residual_keys: Option<Array>,
    residual_values: Option<Array>,
    key_axis: KeyAxis,
    sinks: usize,
}

impl Parts {
    pub fn new(layer: &Layer, spec: &CacheSpec) -> Self {
        let shape = [1, layer.kv_heads, layer.tokens, layer.dim];
        Self::from_arrays(
            &array(&layer.keys, &shape),
            &array(&layer.values, &shape),
            spec,
        )
    }

    /// The same from keys and values `[B, H, T, D]` (in the cache's basis: the spec's
    /// rotation is the cache's business, not attention's). With sinks, the residual arrays
    /// are the sinks followed by the window.
    pub fn from_arrays(keys: &Array, values: &Array, spec: &CacheSpec) -> Self {
        let (t, d) = (keys.dim(2) as usize, keys.dim(3) as usize);
        let sinks = sink_len(t, spec.sinks);
        let q = quantized_len(t - sinks, spec.residual, spec.keys.group_size());
        let split = |a: &Array| -> (Option<Array>, Option<Array>) {
            let (s, q, t) = (sinks as i32, q as i32, t as i32);
            let part = |from: i32, to: i32| (from < to).then(|| a.index((.., .., from..to, ..)));
            let residual = match (part(0, s), part(s + q, t)) {
                (Some(sunk), Some(window)) => Some(ops::concatenate(&[sunk, window], 2).unwrap()),
                (sunk, window) => sunk.or(window),
            };
            (part(s, s + q), residual)
        };
        let (old_k, residual_keys) = split(keys);
        let (old_v, residual_values) = split(values);
        Self {
            keys: old_k.map(|k| {
                match spec.key_axis {
                    KeyAxis::PerChannel => {
                        mlx_quant::quantize(&k.swap_axes(-1, -2).unwrap(), spec.keys)
                    }
                    KeyAxis::PerToken => mlx_quant::quantize(&k, spec.keys.for_axis(d).unwrap()),
                }
                .unwrap()
            }),
            values: old_v
                .map(|v| mlx_quant::quantize(&v, spec.values.for_axis(d).unwrap()).unwrap()),
            residual_keys,
            residual_values,
            key_axis: spec.key_axis,
            sinks,
        }
    }

    pub fn view(&self) -> CacheView<'_> {
        CacheView {
            keys: self.keys.as_ref(),
            key_axis: self.key_axis,
            values: self.values.as_ref(),
            residual: self
                .residual_keys
                .as_ref()
                .zip(self.residual_values.as_ref())
                .map(|(keys, values)| Residual::Arrays { keys, values }),
            sinks: self.sinks,
        }
    }
}
