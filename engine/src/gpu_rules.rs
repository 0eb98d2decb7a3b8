//! The rules a GPU stream imposes on MLX arrays, checked where the engine makes them.
//!
//! MLX refuses float64 on a GPU stream (Metal has no double precision; MLX's CUDA back end
//! follows it): an operation on a float64 array there fails when it is evaluated, which on
//! a Mac would be at model load or at the first token. The Linux CPU, where the tests run,
//! accepts float64, so such an array would pass every test there. This guard makes the
//! rule visible on the CPU too: the loader and the model check every array they hand on
//! (weights, activations between blocks, attention inputs and outputs, cache buffers), and
//! a float64 one is an error naming it. It is on where [`Backend::guarded`] says (debug
//! builds, so every test run, and the GPU); a dtype check reads no data, so it costs
//! nothing measurable.

use mlx_rs::{Array, Dtype};

use crate::backend::Backend;

/// An array a GPU stream would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} is a {dtype:?} array, which MLX refuses on a GPU stream (float64 is not \
     supported there): the engine must not make one on the load or generation path"
)]
pub struct GpuRuleError {
    /// The array's role, e.g. "the hidden states after block 3".
    pub what: String,
    /// Its dtype.
    pub dtype: Dtype,
}

/// Dtypes a GPU stream refuses.
pub fn refused(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::Float64)
}

/// Checks `array` (named by `what`) when `backend` is guarded.
pub fn check(
    backend: &Backend,
    what: impl FnOnce() -> String,
    array: &Array,
) -> Result<(), GpuRuleError> {
    if backend.guarded() && refused(array.dtype()) {
        return Err(GpuRuleError {
            what: what(),
            dtype: array.dtype(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Device, Precision};

    #[test]
    fn a_float64_array_fails_the_guard_and_others_pass() {
        let backend = Backend::mlx(Device::Gpu, Precision::F16);
        assert!(backend.guarded());
        let doubles = Array::from_slice(&[1.0f32, 2.0], &[2])
            .as_dtype(Dtype::Float64)
            .unwrap();
        let err = check(&backend, || "the test array".into(), &doubles).unwrap_err();
        assert_eq!(err.dtype, Dtype::Float64);
        assert!(err.to_string().contains("the test array"), "{err}");
        for ok in [
            Array::from_slice(&[1.0f32], &[1]),
            Array::from_slice(&[1u32], &[1]),
            Array::from_slice(&[1.0f32], &[1])
                .as_dtype(Dtype::Float16)
                .unwrap(),
        ] {
            check(&backend, || unreachable!("no error to name"), &ok).unwrap();
        }
    }
}
