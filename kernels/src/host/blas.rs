//! `sgemm` from the BLAS the process already has loaded.
//!
//! MLX's CPU back end calls `cblas_sgemm`; on Linux the project's executables link the
//! system OpenBLAS ahead of the wheel's reference BLAS (`scripts/mlx-sys/README.md`). The
//! symbol is looked up at run time (`dlsym`), so that nothing here changes how the crate
//! links; without it a plain-Rust loop (correct, slower) runs instead.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

type CblasSgemm = unsafe extern "C" fn(
    layout: c_int,
    trans_a: c_int,
    trans_b: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: f32,
    a: *const f32,
    lda: c_int,
    b: *const f32,
    ldb: c_int,
    beta: f32,
    c: *mut f32,
    ldc: c_int,
);

const ROW_MAJOR: c_int = 101;
const NO_TRANS: c_int = 111;
const TRANS: c_int = 112;

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// `RTLD_DEFAULT`: search the global scope of the process.
#[cfg(target_os = "macos")]
const RTLD_DEFAULT: *mut c_void = -2isize as *mut c_void;
#[cfg(not(target_os = "macos"))]
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// The address of a function in the process's global scope (the loaded BLAS included).
pub(super) fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: a NUL-terminated name; dlsym has no other preconditions.
    let p = unsafe { dlsym(RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

fn cblas_sgemm() -> Option<CblasSgemm> {
    static SGEMM: OnceLock<Option<usize>> = OnceLock::new();
    let address = *SGEMM.get_or_init(|| symbol(c"cblas_sgemm").map(|p| p as usize));
    // SAFETY: the address is the process's `cblas_sgemm`, whose C signature is the
    // standard one declared above.
    address.map(|a| unsafe { std::mem::transmute::<usize, CblasSgemm>(a) })
}

/// Whether a BLAS `sgemm` was found (otherwise [`sgemm`] runs plain loops).
pub fn available() -> bool {
    cblas_sgemm().is_some()
}

/// A row-major matrix operand: `data[row * ld + col]`, optionally transposed.
#[derive(Debug, Clone, Copy)]
pub struct Operand<'a> {
    /// The elements.
    pub data: &'a [f32],
    /// Distance between rows in memory.
    pub ld: usize,
    /// Use the transpose.
    pub trans: bool,
}

/// `c = alpha * op(a) @ op(b) + beta * c`, with `op(a)` `[m, k]`, `op(b)` `[k, n]` and `c`
/// `[m, n]` (row stride `ldc`).
///
/// # Panics
/// When a slice is too short for the shapes and strides.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: Operand<'_>,
    b: Operand<'_>,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    let need = |rows: usize, cols: usize, op: &Operand<'_>| {
        let (r, cl) = if op.trans { (cols, rows) } else { (rows, cols) };
        assert!(op.ld >= cl, "leading dimension {} < {cl}", op.ld);
        assert!(
            r == 0 || op.data.len() >= (r - 1) * op.ld + cl,
            "operand of {} floats for {r}x{cl} (ld {})",
            op.data.len(),
            op.ld
        );
    };
    need(m, k, &a);
    need(k, n, &b);
    assert!(ldc >= n && c.len() >= (m - 1) * ldc + n, "output too short");
    if let Some(f) = cblas_sgemm() {
        let t = |trans: bool| if trans { TRANS } else { NO_TRANS };
        // SAFETY: the slices cover the strided shapes (checked above); BLAS reads `a` and
        // `b` and writes only `c`.
        unsafe {
            f(
                ROW_MAJOR,
                t(a.trans),
                t(b.trans),
                m as c_int,
                n as c_int,
                k as c_int,
                alpha,
                a.data.as_ptr(),
                a.ld.max(1) as c_int,
                b.data.as_ptr(),
                b.ld.max(1) as c_int,
                beta,
                c.as_mut_ptr(),
                ldc as c_int,
            )
        };
        return;
    }
    portable(m, n, k, alpha, a, b, beta, c, ldc);
}

#[allow(clippy::too_many_arguments)]
fn portable(
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: Operand<'_>,
    b: Operand<'_>,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
) {
    let at = |i: usize, p: usize| {
        if a.trans {
            a.data[p * a.ld + i]
        } else {
            a.data[i * a.ld + p]
        }
    };
    let mut row = vec![0f32; n];
    for i in 0..m {
        row.fill(0.0);
        for p in 0..k {
            let x = at(i, p);
            if b.trans {
                for (j, r) in row.iter_mut().enumerate() {
                    *r += x * b.data[j * b.ld + p];
                }
            } else {
                for (r, y) in row.iter_mut().zip(&b.data[p * b.ld..p * b.ld + n]) {
                    *r += x * y;
                }
            }
        }
        for (out, r) in c[i * ldc..i * ldc + n].iter_mut().zip(&row) {
            *out = alpha * r + if beta == 0.0 { 0.0 } else { beta * *out };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::XorShift;

    #[test]
    fn blas_and_the_fallback_agree_with_plain_loops() {
        let mut rng = XorShift::new(3);
        let (m, n, k) = (5, 7, 9);
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let a = rng.normals(m * k + 4);
            let b = rng.normals(k * n + 4);
            let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
            let a_op = Operand {
                data: &a,
                ld: lda,
                trans: ta,
            };
            let b_op = Operand {
                data: &b,
                ld: ldb,
                trans: tb,
            };
            let c0 = rng.normals(m * (n + 2));
            let mut want = c0.clone();
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0f64;
                    for p in 0..k {
                        let x = if ta { a[p * lda + i] } else { a[i * lda + p] };
                        let y = if tb { b[j * ldb + p] } else { b[p * ldb + j] };
                        s += f64::from(x) * f64::from(y);
                    }
                    want[i * (n + 2) + j] = (0.5 * s + 2.0 * f64::from(c0[i * (n + 2) + j])) as f32;
                }
            }
            let mut got = c0.clone();
            sgemm(m, n, k, 0.5, a_op, b_op, 2.0, &mut got, n + 2);
            let mut fallback = c0.clone();
            portable(m, n, k, 0.5, a_op, b_op, 2.0, &mut fallback, n + 2);
            for ((g, f), w) in got.iter().zip(&fallback).zip(&want) {
                assert!((g - w).abs() < 1e-4 && (f - w).abs() < 1e-4, "{g} {f} {w}");
            }
        }
    }
}
