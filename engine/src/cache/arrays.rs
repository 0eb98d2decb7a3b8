//! The cache interface's MLX arrays read on the host: what a cache kept in host memory
//! copies in (`runtime/host/`), and what the KIVI rules read to choose a basis.

use kivi_kernels::host::readable;
use mlx_rs::Array;

use super::CacheError;

/// A float32 array's data on the host.
pub(crate) fn host_floats(a: &Array) -> Result<&[f32], CacheError> {
    a.try_as_slice::<f32>()
        .map_err(|e| CacheError::Shape(format!("cannot read an array on the host: {e}")))
}

/// Keys and values `[B, H, T, D]` as float32 host data.
pub(crate) struct HostBlock {
    /// `B`, `H`, `T`, `Dk`, `Dv`.
    pub(crate) dims: [usize; 5],
    pub(crate) keys: Vec<f32>,
    pub(crate) values: Vec<f32>,
}

/// `keys` and `values` (`[B, H, T, D]` arrays of any float dtype, checked by the caller)
/// read into host memory.
pub(crate) fn host_block(keys: &Array, values: &Array) -> Result<HostBlock, CacheError> {
    let (&[b, h, t, dk], &[_, _, _, dv]) = (keys.shape(), values.shape()) else {
        return Err(CacheError::State("keys and values must be 4-D".into()));
    };
    let (k, v) = (readable::<f32>(keys)?, readable::<f32>(values)?);
    Ok(HostBlock {
        dims: [b, h, t, dk, dv].map(|d| d.max(0) as usize),
        keys: host_floats(&k)?.to_vec(),
        values: host_floats(&v)?.to_vec(),
    })
}
