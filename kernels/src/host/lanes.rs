//! Float loops in fixed-width lanes, which the compiler turns into vector instructions (a
//! single running sum or maximum is a chain of dependent operations it must keep), with
//! the multiply-add chosen by the caller: fused inside functions compiled for FMA,
//! separate elsewhere.

/// `a * b + c`, rounded once ([`Fused`], where the CPU has FMA) or twice ([`Separate`]:
/// `mul_add` without FMA hardware is a slow library call).
pub(crate) trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// One fused multiply-add instruction; only inside functions compiled with FMA enabled.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Fused;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// A multiply, then an add.
pub(crate) struct Separate;

impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// Partial results kept by [`dot`] and the other fixed-width loops: one AVX register of
/// floats.
pub(crate) const LANES: usize = 8;

/// `sum_i a_i * b_i`, in [`LANES`] partial sums: one running total would be a chain of
/// dependent additions that the compiler cannot vectorize.
#[inline(always)]
pub(crate) fn dot<M: MulAdd>(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for ((l, &x), &y) in lanes.iter_mut().zip(x).zip(y) {
            *l = M::mul_add(x, y, *l);
        }
    }
    lanes.iter().sum::<f32>() + tail
}
