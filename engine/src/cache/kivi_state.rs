//! Restoring a KIVI cache from saved arrays: every name, dtype and shape is checked
//! against the settings and the recorded token count before the cache takes them, so a
//! forged or damaged file is refused instead of crashing attention later.

use kivi_kernels::{attention::is_float, mlx_quant::QuantizedArray, sink_len, KeyAxis, QuantSpec};
use mlx_rs::{Array, Dtype};

use super::basis::{HeadBasis, QueryEnergy};
use super::{Adaptive, Dims, KiviCache};
use crate::cache::kivi_runtime::{KiviRuntime, ResidualWindow};
use crate::cache::{CacheError, CacheState, KiviConfig};

impl<R: KiviRuntime> KiviCache<R> {
    /// Rebuilds a cache from named arrays, checking that they are what a cache with these
    /// settings holds. Never panics on bad input.
    pub(super) fn from_state(
        config: KiviConfig,
        storage: Dtype,
        state: CacheState,
    ) -> Result<Self, CacheError> {
        let bad = |why: String| CacheError::State(why);
        let mut cache = Self::new(config, storage);
        let (mut residual_keys, mut residual_values) = (None, None);
        let mut basis: Vec<(String, Array)> = Vec::new();
        for (name, array) in state.arrays {
            let slot = match name.as_str() {
                "keys.packed" | "keys.scales" | "keys.zeros" => cache
                    .keys
                    .get_or_insert_with(|| placeholder(config.key_spec())),
                "values.packed" | "values.scales" | "values.zeros" => cache
                    .values
                    .get_or_insert_with(|| placeholder(config.value_spec())),
                "residual.keys" => {
                    residual_keys = Some(array);
                    continue;
                }
                "residual.values" => {
                    residual_values = Some(array);
                    continue;
                }
                "basis.keys" | "basis.values" | "basis.key_scales" | "basis.queries"
                    if cache.adaptive.is_some() =>
                {
                    basis.push((name, array));
                    continue;
                }
                other => return Err(bad(format!("unknown array {other:?}"))),
            };
            match name.rsplit('.').next() {
                Some("packed") => slot.packed = array,
                Some("scales") => slot.scales = array,
                _ => slot.zeros = array,
            }
        }
        if residual_keys.is_some() != residual_values.is_some() {
            return Err(bad("keys and values are held unevenly".into()));
        }
        let residual = residual_keys.zip(residual_values);
        let dims = cache.check_state(state.tokens, residual.as_ref().map(|(k, v)| (k, v)))?;
        cache.dims = dims;
        if let Some(dims) = dims {
            if let Some(adaptive) = &mut cache.adaptive {
                *adaptive = adaptive_state(basis, dims, cache.quantized)?;
            }
        } else if !basis.is_empty() {
            return Err(bad("an empty cache holds a basis".into()));
        }
        cache.window = residual
            .map(|(k, v)| R::Window::from_arrays(k, v, config.residual_room()))
            .transpose()?;
        Ok(cache)
    }

    /// Checks every held array (the history's and the `residual` window's) against the
    /// settings and each other; sets the counts.
    fn check_state(
        &mut self,
        tokens: usize,
        residual: Option<(&Array, &Array)>,
    ) -> Result<Option<Dims>, CacheError> {
        let bad = |why: String| Err(CacheError::State(why));
        if self.keys.is_some() != self.values.is_some() {
            return bad("keys and values are held unevenly".into());
        }
        // Every array is 4-D before any of its axes is read.
        let quantized_arrays = self
            .keys
            .iter()
            .chain(&self.values)
            .flat_map(|q| q.arrays());
        let residual_arrays = residual.into_iter().flat_map(|(k, v)| [k, v]);
        for a in quantized_arrays.chain(residual_arrays) {
            if a.ndim() != 4 {
                return bad(format!("cache arrays must be 4-D, got {:?}", a.shape()));
            }
        }
        let (quantized, dims) = match (&self.keys, &self.values) {
            (Some(k), Some(v)) => {
                let &[b, h, tq, packed_dv] = v.packed.shape() else {
                    return bad("quantized values must be 4-D".into());
                };
                let key_dim = match self.config.key_axis() {
                    KeyAxis::PerChannel => k.packed.dim(2),
                    KeyAxis::PerToken => k.packed.dim(3) * (32 / self.config.key_bits() as i32),
                };
                let dims = Dims {
                    batch: b,
                    heads: h,
                    key_dim,
                    value_dim: packed_dv * (32 / self.config.value_bits() as i32),
                    dtype: v.scales.dtype(),
                };
                (tq.max(0) as usize, Some(dims))
            }
            _ => (0, None),
        };
        let dims = match (dims, residual) {
            (Some(d), _) => Some(d),
            (None, Some((k, v))) => match (k.shape(), v.shape()) {
                (&[b, h, _, dk], &[_, _, _, dv]) => Some(Dims {
                    batch: b,
                    heads: h,
                    key_dim: dk,
                    value_dim: dv,
                    dtype: k.dtype(),
                }),
                _ => return bad("residual arrays must be 4-D".into()),
            },
            (None, None) => None,
        };
        let residual_len = residual.map_or(0, |(k, _)| k.dim(2).max(0) as usize);
        if (self.keys.is_some() && quantized == 0) || (residual.is_some() && residual_len == 0) {
            return bad("empty arrays are stored as absent".into());
        }
        if quantized + residual_len != tokens {
            return bad(format!(
                "{quantized} quantized + {residual_len} residual tokens, but {tokens} recorded"
            ));
        }
        // The residual arrays hold the sinks (all of them once the cache is longer), then
        // the window.
        let sinks = sink_len(tokens, self.config.sinks());
        if residual_len < sinks || (quantized > 0 && sinks < self.config.sinks()) {
            return bad(format!(
                "{residual_len} residual tokens cannot hold the {sinks} sink tokens of {tokens}"
            ));
        }
        if residual_len - sinks > self.config.residual_capacity() {
            return bad(format!(
                "{} window tokens exceed the window of {}",
                residual_len - sinks,
                self.config.residual_capacity()
            ));
        }
        let Some(dims) = dims else {
            return Ok(None);
        };
        // Scales, zeros and the window are stored in this backend's storage dtype (float16
        // or bfloat16, never float32).
        if dims.dtype != self.storage && is_float(dims.dtype) {
            return bad(format!(
                "the cache was saved with {:?} scales and window, but this backend stores \
                 {:?}",
                dims.dtype, self.storage
            ));
        }
        if !is_float(dims.dtype) || dims.dtype == Dtype::Float32 || dims.batch < 1 || dims.heads < 1
        {
            return bad(format!("invalid cache dimensions {dims:?}"));
        }
        if dims.key_dim < 1 || dims.value_dim < 1 {
            return bad(format!("invalid head dimensions {dims:?}"));
        }
        if quantized > 0 {
            let group = self.config.group_size();
            if quantized % group != 0 {
                return bad(format!(
                    "{quantized} quantized tokens are not whole groups of {group}"
                ));
            }
            let value_spec = self
                .value_spec(dims)
                .map_err(|e| CacheError::State(e.to_string()))?;
            let (b, h, q) = (dims.batch, dims.heads, quantized as i32);
            let words = |n: i32, spec: QuantSpec| n / spec.per_word() as i32;
            let groups = |n: i32, spec: QuantSpec| n / spec.group_size() as i32;
            let (key_packed, key_params) = match self.config.key_axis() {
                KeyAxis::PerChannel => {
                    let s = self.config.key_spec();
                    (
                        [b, h, dims.key_dim, words(q, s)],
                        [b, h, dims.key_dim, groups(q, s)],
                    )
                }
                KeyAxis::PerToken => {
                    let s = self
                        .key_token_spec(dims)
                        .map_err(|e| CacheError::State(e.to_string()))?;
                    (
                        [b, h, q, words(dims.key_dim, s)],
                        [b, h, q, groups(dims.key_dim, s)],
                    )
                }
            };
            let value_packed = [b, h, q, words(dims.value_dim, value_spec)];
            let value_params = [b, h, q, groups(dims.value_dim, value_spec)];
            let keys = self.keys.as_mut().expect("checked above");
            keys.spec = match self.config.key_axis() {
                KeyAxis::PerChannel => self.config.key_spec(),
                KeyAxis::PerToken => self.config.key_spec().for_axis(dims.key_dim as usize)?,
            };
            let values = self.values.as_mut().expect("checked above");
            values.spec = value_spec;
            for (q, packed, params) in [
                (&*keys, key_packed, key_params),
                (&*values, value_packed, value_params),
            ] {
                expect(&q.packed, &packed, Some(Dtype::Uint32))?;
                expect(&q.scales, &params, Some(dims.dtype))?;
                expect(&q.zeros, &params, Some(dims.dtype))?;
            }
        }
        if let Some((k, v)) = residual {
            let r = residual_len as i32;
            expect(
                k,
                &[dims.batch, dims.heads, r, dims.key_dim],
                Some(dims.dtype),
            )?;
            expect(
                v,
                &[dims.batch, dims.heads, r, dims.value_dim],
                Some(dims.dtype),
            )?;
        }
        self.tokens = tokens;
        self.quantized = quantized;
        Ok(Some(dims))
    }
}

/// An adaptive basis's saved state, checked: each head's choice once anything is quantized
/// (it is made at the first flush), the queries' energy (or nothing) before.
fn adaptive_state(
    arrays: Vec<(String, Array)>,
    dims: Dims,
    quantized: usize,
) -> Result<Adaptive, CacheError> {
    let bad = |why: String| Err(CacheError::State(why));
    let find = |name: &str| arrays.iter().find(|(n, _)| n == name).map(|(_, a)| a);
    let (keys, values, scales, queries) = (
        find("basis.keys"),
        find("basis.values"),
        find("basis.key_scales"),
        find("basis.queries"),
    );
    // Files from before the channel factors existed hold none: all ones.
    let key_scales = |keys: &[bool]| -> Result<Vec<f32>, CacheError> {
        let Some(a) = scales else {
            return Ok(vec![1.0; keys.len() * dims.key_dim as usize]);
        };
        expect(
            a,
            &[dims.batch, dims.heads, 1, dims.key_dim],
            Some(Dtype::Float32),
        )?;
        let a = kivi_kernels::host::readable::<f32>(a)?;
        let scales = a.as_slice::<f32>().to_vec();
        if scales.iter().any(|s| !s.is_finite() || *s <= 0.0) {
            return Err(CacheError::State(
                "the keys' channel factors must be finite and positive".into(),
            ));
        }
        let unrotated = scales.chunks_exact(dims.key_dim as usize).zip(keys);
        if unrotated
            .filter(|(_, &on)| !on)
            .any(|(s, _)| s.iter().any(|&s| s != 1.0))
        {
            return Err(CacheError::State(
                "a head whose keys are not rotated has channel factors".into(),
            ));
        }
        Ok(scales)
    };
    let heads = [dims.batch, dims.heads, 1, 1];
    let flags = |a: &Array| -> Result<Vec<bool>, CacheError> {
        expect(a, &heads, Some(Dtype::Uint32))?;
        let a = kivi_kernels::host::readable::<u32>(a)?;
        let flags = a.as_slice::<u32>();
        if flags.iter().any(|&f| f > 1) {
            return Err(CacheError::State(
                "a head's basis is neither 0 nor 1".into(),
            ));
        }
        Ok(flags.iter().map(|&f| f == 1).collect())
    };
    match (keys, values, queries, quantized > 0) {
        (Some(k), Some(v), None, true) => {
            let keys = flags(k)?;
            Ok(Adaptive {
                energy: QueryEnergy::default(),
                chosen: Some(HeadBasis {
                    key_scales: key_scales(&keys)?,
                    keys,
                    values: flags(v)?,
                }),
            })
        }
        (None, None, queries, false) if scales.is_none() => {
            let sums = match queries {
                Some(q) => {
                    expect(
                        q,
                        &[dims.batch, dims.heads, 1, dims.key_dim],
                        Some(Dtype::Float32),
                    )?;
                    let q = kivi_kernels::host::readable::<f32>(q)?;
                    let sums = q.as_slice::<f32>().to_vec();
                    if sums.iter().any(|x| !x.is_finite() || *x < 0.0) {
                        return bad("the queries' energy must be finite and not negative".into());
                    }
                    sums
                }
                None => Vec::new(),
            };
            Ok(Adaptive {
                energy: QueryEnergy { sums },
                chosen: None,
            })
        }
        _ => bad(format!(
            "an adaptive basis holds its choice once anything is quantized, and its queries \
             before; this one does not fit {quantized} quantized tokens"
        )),
    }
}

/// A quantized array with no data yet, filled in by `from_state`.
fn placeholder(spec: QuantSpec) -> QuantizedArray {
    let empty = || Array::from_slice::<f32>(&[], &[0]);
    QuantizedArray {
        packed: empty(),
        scales: empty(),
        zeros: empty(),
        spec,
    }
}

fn expect(array: &Array, shape: &[i32], dtype: Option<Dtype>) -> Result<(), CacheError> {
    if array.shape() != shape || dtype.is_some_and(|d| array.dtype() != d) {
        return Err(CacheError::State(format!(
            "array {:?} {:?} where {shape:?} {dtype:?} was expected",
            array.shape(),
            array.dtype()
        )));
    }
    Ok(())
}
