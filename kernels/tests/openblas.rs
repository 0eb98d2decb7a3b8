//! OpenBLAS's kernels chosen again at start-up ([`kivi_kernels::host::openblas`]): the
//! change happens where OpenBLAS fell back to pre-AVX2 code on a CPU with AVX2, its
//! threads are restarted with a shorter spin, and products computed afterwards (ours and
//! MLX's, threaded ones among them) are still right. One test in its own
//! binary, because the choice may only be made before any other thread uses BLAS.

use kivi_kernels::{
    host::{
        blas::{self, Operand},
        openblas,
    },
    testdata::XorShift,
};
use mlx_rs::{ops::matmul, Array};

/// `a @ b` in f64, for `[m, k]` and `[k, n]` row-major matrices.
fn product(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = f64::from(a[i * k + p]);
            for j in 0..n {
                out[i * n + j] += x * f64::from(b[p * n + j]);
            }
        }
    }
    out
}

fn assert_close(got: &[f32], want: &[f64], what: &str) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}: element {i} is {g}, expected {w}"
        );
    }
}

#[test]
fn kernels_chosen_again_and_threads_restarted_still_multiply_correctly() {
    let before = openblas::core();
    // SAFETY: the first BLAS use of this process, on its only test thread.
    let change = unsafe { openblas::select_core() };
    let after = openblas::core();
    eprintln!("OpenBLAS core: {before:?} -> {after:?} ({change:?})");
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        let user_chose = std::env::var_os("OPENBLAS_CORETYPE").is_some() && change.is_none();
        if let (Some(before), true, false) = (&before, avx2, user_chose) {
            // A pre-AVX2 choice on an AVX2 CPU is replaced; any other choice is kept.
            assert_eq!(
                change.is_some(),
                openblas::is_pre_avx2(before),
                "{change:?}"
            );
            let after = after.as_deref().expect("OpenBLAS is still there");
            assert!(!openblas::is_pre_avx2(after), "still on {after}");
        }
    }
    if let Some(change) = &change {
        assert_eq!(Some(&change.to), after.as_ref());
        assert_ne!(change.from, change.to);
    }
    let user_spin = std::env::var_os("OPENBLAS_THREAD_TIMEOUT").is_some();
    // SAFETY: as above; no BLAS call has run yet.
    let shortened = unsafe { openblas::shorten_thread_spin() };
    if before.is_some() && !user_spin {
        assert!(shortened, "OpenBLAS without its thread functions?");
        assert_eq!(openblas::thread_spin_log2(), Some(22));
    } else {
        assert!(!shortened);
    }

    let mut rng = XorShift::new(5);
    // A decode-sized product, one that OpenBLAS blocks and packs, odd sizes, and one it
    // shares among its threads.
    for (m, k, n) in [
        (1, 64, 4096),
        (3, 64, 700),
        (300, 200, 150),
        (129, 577, 33),
        (512, 512, 512),
    ] {
        let a = rng.normals(m * k);
        let b = rng.normals(k * n);
        let want = product(&a, &b, m, k, n);
        let mut got = vec![0f32; m * n];
        let op = |data, ld| Operand {
            data,
            ld,
            trans: false,
        };
        blas::sgemm(m, n, k, 1.0, op(&a, k), op(&b, n), 0.0, &mut got, n);
        assert_close(&got, &want, &format!("sgemm {m}x{k}x{n}"));
        let mlx = matmul(
            Array::from_slice(&a, &[m as i32, k as i32]),
            Array::from_slice(&b, &[k as i32, n as i32]),
        )
        .unwrap();
        assert_close(mlx.as_slice::<f32>(), &want, &format!("MLX {m}x{k}x{n}"));
    }
}
