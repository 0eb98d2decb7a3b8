//! The host runtime's full-precision cache: host float16 buffers `[B * H, capacity, D]`
//! (the backend's [`Backend::storage_dtype`](crate::backend::Backend::storage_dtype), as
//! other CPU engines keep their caches: half the bytes of float32 for every decode step to
//! read) that grow with a little headroom (1/64 of the length, at least 4 tokens), so that
//! a decode step writes one token instead of copying the whole cache.
//!
//! A decode step runs the fused kernel's window loops
//! ([`kivi_kernels::fused::decode_window`]: float16 converted a chunk at a time, the tokens
//! shared out among threads); a prompt chunk converts the held tokens to float32 a span of
//! [`HOST_SPAN`] tokens at a time and folds each into the host kernel's running softmax
//! ([`kivi_kernels::host::attention::Running`]: BLAS products, a vectorized online softmax). Appending by concatenation copied the whole cache every step (12.6 MB per layer
//! at 8k tokens, as much as attention itself reads), and MLX's CPU softmax computes `exp`
//! one lane at a time.

use kivi_kernels::{
    attention::HOST_SPAN,
    fused,
    host::{
        attention::{Running, Segment, Shape},
        readable,
    },
};
use mlx_rs::{Array, Dtype};

use super::kv::HostKv;
use crate::cache::arrays::{host_block, host_floats};
use crate::cache::full::{check_call, differs, restored, state, stats, truncate};
use crate::cache::{CacheError, CacheState, KvCache, LayerKvStats};

/// Keys and values of one layer in host buffers.
#[derive(Default)]
pub(crate) struct HostFullCache {
    kv: Option<HostKv>,
}

impl KvCache for HostFullCache {
    fn attend(
        &mut self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        scale: f32,
    ) -> Result<Array, CacheError> {
        let call = check_call(queries, keys, values)?;
        let (b, h, l, dk, dv, qh) = (
            call.batch,
            call.kv_heads,
            call.len,
            call.key_dim,
            call.value_dim,
            call.heads,
        );
        let host = self.kv.get_or_insert_with(|| HostKv::new(b, h, dk, dv));
        if !host.fits(b, h, dk, dv) {
            return Err(differs(keys, values));
        }
        let (k, v, q) = (
            readable::<f32>(keys)?,
            readable::<f32>(values)?,
            readable::<f32>(queries)?,
        );
        host.append(host_floats(&k)?, host_floats(&v)?, l);
        let shape = Shape {
            batch: b,
            heads: qh,
            kv_heads: h,
            queries: l,
            dim: dk,
            value_dim: dv,
        };
        let out = if l == 1 {
            fused::decode_window(host_floats(&q)?, qh, host.window(), scale)?
        } else {
            // The buffer is read in float32 a span at a time, so that a prompt chunk holds
            // one span's copy however long the context.
            let window = host.window();
            let mut out = vec![0f32; b * qh * l * dv];
            let mut running = Running::new(host_floats(&q)?, shape, host.len, scale, &mut out)?;
            for start in (0..host.len).step_by(HOST_SPAN) {
                let span = start..host.len.min(start + HOST_SPAN);
                let n = span.len();
                let (keys, values) = (
                    window.float32_span(true, span.clone()),
                    window.float32_span(false, span),
                );
                let segment = |data, dim: usize| Segment {
                    data,
                    len: n,
                    head_stride: n * dim,
                    row_stride: dim,
                    channel_major: false,
                };
                running.add(start, &[segment(&keys, dk)], &[segment(&values, dv)])?;
            }
            running.finish();
            out
        };
        let out = Array::from_slice(&out, &[b as i32, qh as i32, l as i32, dv as i32]);
        Ok(if queries.dtype() == Dtype::Float32 {
            out
        } else {
            out.as_dtype(queries.dtype())?
        })
    }

    fn len(&self) -> usize {
        self.kv.as_ref().map_or(0, |kv| kv.len)
    }

    fn truncate(&mut self, len: usize) -> Result<usize, CacheError> {
        Ok(truncate(&mut self.kv, len, |kv| &mut kv.len))
    }

    fn stats(&self) -> LayerKvStats {
        match &self.kv {
            None => stats(0, 0, 0),
            Some(kv) => stats(
                kv.len,
                kv.bytes(),
                (kv.pairs() * kv.len * (kv.key_dim + kv.value_dim)) as u64,
            ),
        }
    }

    fn state(&self) -> Result<CacheState, CacheError> {
        let kv = self.kv.as_ref().map(|kv| kv.window().arrays());
        state(self.len(), kv)
    }

    fn restore(&mut self, state: CacheState) -> Result<(), CacheError> {
        self.kv = match restored(state)? {
            Some((keys, values)) => Some(HostKv::from_block(&host_block(&keys, &values)?, 0)),
            None => None,
        };
        Ok(())
    }
}
