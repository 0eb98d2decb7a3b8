//! KIVI+'s Hadamard basis: keys and values enter the cache multiplied by the normalized
//! Sylvester Hadamard matrix `H` of size head_dim (`H = Hᵀ`, `H·H = I`).
//!
//! Rotating spreads a channel's outlier over every channel of the token, so the per-token
//! value groups and the per-channel key groups see flatter data and 2-bit codes lose less.
//! Since `(q·H)·(k·H)ᵀ = q·kᵀ`, attention takes the query as `q·H` and multiplies its output
//! by `H` once: both are one `D×D` transform per head and query, not per cached token.
//!
//! `x·H` is computed as the fast Walsh-Hadamard transform of each row, scaled by `1/√D`,
//! in a fixed order of butterflies: the host version ([`rotate_rows`]) does exactly what
//! MLX's CPU `hadamard_transform` does (stages of width 1, 2, 4, ..., each pair written as
//! `x + y`, `x - y`, the scale applied in the last stage), so the host kernels and MLX's
//! operations put the same bits in a cache (tested). Each row is transformed on its own,
//! so one prefill, any chunking and token-by-token decode rotate a token alike.

use mlx_rs::Array;

use crate::KernelError;

/// The scale of the normalized transform, `1/√D`, as both implementations use it.
pub fn scale(dim: usize) -> f32 {
    (1.0 / (dim as f64).sqrt()) as f32
}

/// Checks that rows of `dim` values can be rotated: `D` must be a power of two (Sylvester's
/// construction), which every head_dim of the supported families is (64, 128).
pub fn check_dim(dim: usize) -> Result<(), KernelError> {
    if dim >= 2 && dim.is_power_of_two() {
        Ok(())
    } else {
        Err(KernelError::Shape(format!(
            "the Hadamard rotation needs a head_dim that is a power of two, and this model's is \
             {dim}: turn the rotation off for this model"
        )))
    }
}

/// `x·H` for each row of `dim` values of `data`, in place (float32, on the host).
pub fn rotate_rows(data: &mut [f32], dim: usize) -> Result<(), KernelError> {
    check_dim(dim)?;
    if !data.len().is_multiple_of(dim) {
        return Err(KernelError::Shape(format!(
            "{} values are not rows of {dim}",
            data.len()
        )));
    }
    let scale = scale(dim);
    for row in data.chunks_exact_mut(dim) {
        let mut width = 1;
        while width < dim {
            let last = 2 * width == dim;
            for i in 0..dim / 2 {
                let k = i & (width - 1);
                let j = ((i - k) << 1) + k;
                let (x, y) = (row[j], row[j + width]);
                row[j] = x + y;
                row[j + width] = x - y;
                if last {
                    row[j] *= scale;
                    row[j + width] *= scale;
                }
            }
            width <<= 1;
        }
    }
    Ok(())
}

/// `x·H` along the last axis of `x`, as an MLX operation (lazy).
pub fn rotate(x: &Array) -> Result<Array, KernelError> {
    let dim = x.dim(-1) as usize;
    check_dim(dim)?;
    Ok(x.hadamard_transform(scale(dim))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::XorShift;
    use mlx_rs::Dtype;

    /// The normalized Sylvester matrix, built by its recursion, in f64.
    fn sylvester(dim: usize) -> Vec<f64> {
        let mut h = vec![1.0f64];
        let mut n = 1;
        while n < dim {
            let mut next = vec![0.0; 4 * n * n];
            for r in 0..n {
                for c in 0..n {
                    let v = h[r * n + c];
                    next[r * 2 * n + c] = v;
                    next[r * 2 * n + c + n] = v;
                    next[(r + n) * 2 * n + c] = v;
                    next[(r + n) * 2 * n + c + n] = -v;
                }
            }
            h = next;
            n *= 2;
        }
        let s = 1.0 / (dim as f64).sqrt();
        h.iter().map(|v| v * s).collect()
    }

    #[test]
    fn host_rows_are_x_times_the_normalized_sylvester_matrix() {
        for dim in [2, 8, 64, 128] {
            let h = sylvester(dim);
            let x: Vec<f32> = XorShift::new(dim as u64).normals(3 * dim);
            let mut y = x.clone();
            rotate_rows(&mut y, dim).unwrap();
            for (row, out) in x.chunks(dim).zip(y.chunks(dim)) {
                for c in 0..dim {
                    let want: f64 = (0..dim).map(|k| f64::from(row[k]) * h[k * dim + c]).sum();
                    assert!((f64::from(out[c]) - want).abs() < 1e-5, "D={dim}");
                }
            }
            // H is its own inverse.
            rotate_rows(&mut y, dim).unwrap();
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn host_and_mlx_rotate_alike_bit_for_bit() {
        for dim in [32, 64, 128] {
            let x: Vec<f32> = XorShift::new(7 + dim as u64).normals(5 * dim);
            let mut host = x.clone();
            rotate_rows(&mut host, dim).unwrap();
            let mlx = rotate(&Array::from_slice(&x, &[5, dim as i32])).unwrap();
            mlx.eval().unwrap();
            assert_eq!(mlx.dtype(), Dtype::Float32);
            assert_eq!(mlx.as_slice::<f32>(), &host[..], "D={dim}");
        }
    }

    #[test]
    fn a_head_that_is_not_a_power_of_two_is_refused_with_a_way_out() {
        let err = rotate_rows(&mut [0.0; 80], 80).unwrap_err().to_string();
        assert!(
            err.contains("power of two") && err.contains("turn the rotation off"),
            "{err}"
        );
        assert!(rotate(&Array::from_slice(&[0f32; 96], &[1, 96])).is_err());
    }
}
