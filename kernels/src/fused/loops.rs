//! The kernel's loops: attention of one span of tokens for every KV head, with the scale
//! and zero factored out of the inner loops,
//!
//! `q . k'_n = sum_c (q_c * s_cg) * code_cn + sum_c q_c * z_cg` (keys per channel), and
//! `sum_n w_n v'_nd = sum_n (w_n * s_ng) * code_nd + sum_n w_n * z_ng` (values per token),
//!
//! so that each code costs one multiply-add. The inner loops have fixed trip counts (blocks
//! of [`BLOCK`] tokens or channels, up to three query rows) so that the compiler keeps the
//! accumulators in vector registers, and read through pointers checked once per block
//! rather than per word. They are compiled for AVX-512, AVX2 or no CPU features ([`Isa`]),
//! and each set unpacks codes its own way ([`Unpack`]): with AVX-512 both widths through
//! tables, with AVX2 the two-bit codes.
//! Blocks of several words rather than one: the factors loaded per channel (keys) or per
//! token (values) then serve them all, which took K4V4 at 8k tokens from 1.69-1.78 ms to
//! 1.44-1.46 ms per layer on one thread (`decode_timing`, blocks of 32).
//!
//! Each span converts only its own tokens' scales and zeros (the keys' transposed, so that
//! a group's per-channel factors are contiguous and its setup vectorizes), and the values'
//! zero term is summed inside the block loop, where the token's weights are at hand.

use super::span::{Partial, Span};
use super::view::{Parts, QuantizedHead};
#[cfg(target_arch = "x86_64")]
use crate::host::lanes::Fused;
use crate::host::{
    lanes::{dot, MulAdd, Separate},
    softmax::exp_in_place,
};

/// The instruction sets the loops are compiled for, each with its own way of unpacking
/// codes ([`Unpack`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) enum Isa {
    /// AVX-512 F and VL with AVX2 and FMA: two- and four-bit codes through tables.
    Avx512,
    /// AVX2 and FMA: two-bit codes through a table.
    Avx2,
    /// No CPU features assumed.
    Portable,
}

impl Isa {
    /// Every set, fastest first.
    const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Portable];

    /// Whether this CPU runs the loops compiled for this set (checked once per feature).
    fn runs_here(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => crate::host::has_avx512vl(),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => crate::host::has_avx2(),
            Isa::Portable => true,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Those this CPU runs, fastest first (the last is always [`Isa::Portable`]).
    #[cfg(test)]
    pub(super) fn available() -> Vec<Isa> {
        Self::ALL
            .into_iter()
            .filter(|isa| isa.runs_here())
            .collect()
    }

    /// The fastest this CPU runs.
    pub(super) fn best() -> Isa {
        Self::ALL
            .into_iter()
            .find(|isa| isa.runs_here())
            .unwrap_or(Isa::Portable)
    }
}

/// Attention of the pre-scaled queries `q` (`[pairs, rep, D]`, query heads grouped by
/// their KV head) over the tokens of `span`, for every (batch, KV head) pair, with the
/// loops compiled for `isa` (the next slower set where this CPU lacks it).
pub(super) fn span(isa: Isa, kv: &Parts<'_>, q: &[f32], rep: usize, span: &Span) -> Vec<Partial> {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
        fn avx512(kv: &Parts<'_>, q: &[f32], rep: usize, span: &Span) -> Vec<Partial> {
            pairs::<Fused512>(kv, q, rep, span)
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2(kv: &Parts<'_>, q: &[f32], rep: usize, span: &Span) -> Vec<Partial> {
            pairs::<Fused>(kv, q, rep, span)
        }
        if isa == Isa::Avx512 && Isa::Avx512.runs_here() {
            // SAFETY: the CPU supports AVX-512 F and VL, AVX2 and FMA (checked at run time).
            return unsafe { avx512(kv, q, rep, span) };
        }
        if isa != Isa::Portable && Isa::Avx2.runs_here() {
            // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
            return unsafe { avx2(kv, q, rep, span) };
        }
    }
    let _ = isa;
    pairs::<Separate>(kv, q, rep, span)
}

/// How the loops turn packed codes into floats, for the instruction set they are
/// compiled for; the multiply-add comes with it.
trait Unpack: MulAdd {
    /// The `PW = 32 / BITS` codes of a word, lowest bits first, centred (`code - mid`).
    #[inline(always)]
    fn unpack<const BITS: u32, const PW: usize>(word: u32) -> [f32; PW] {
        unpack::<BITS, PW>(word)
    }
}

impl Unpack for Separate {}

/// AVX2: two-bit codes through a table ([`table2`]).
#[cfg(target_arch = "x86_64")]
impl Unpack for Fused {
    #[inline(always)]
    fn unpack<const BITS: u32, const PW: usize>(word: u32) -> [f32; PW] {
        if BITS == 2 {
            // SAFETY: the loops take `Fused` only in `span`'s AVX2 function.
            unsafe { table2::<PW>(word) }
        } else {
            unpack::<BITS, PW>(word)
        }
    }
}

/// Fused multiply-adds inside functions compiled for AVX-512 F and VL as well as AVX2
/// and FMA.
#[cfg(target_arch = "x86_64")]
struct Fused512;

#[cfg(target_arch = "x86_64")]
impl MulAdd for Fused512 {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        Fused::mul_add(a, b, c)
    }
}

/// AVX-512: two-bit codes as under AVX2, four-bit codes through a table ([`table4`]).
#[cfg(target_arch = "x86_64")]
impl Unpack for Fused512 {
    #[inline(always)]
    fn unpack<const BITS: u32, const PW: usize>(word: u32) -> [f32; PW] {
        // SAFETY: the loops take `Fused512` only in `span`'s AVX-512 function.
        unsafe {
            if BITS == 2 {
                table2::<PW>(word)
            } else {
                table4::<PW>(word)
            }
        }
    }
}

/// A plain loop, no closure: a closure would be compiled without the caller's target
/// features, and [`Fused`]'s `mul_add` would become a library call.
#[inline(always)]
fn pairs<M: Unpack>(kv: &Parts<'_>, q: &[f32], rep: usize, span: &Span) -> Vec<Partial> {
    let d = kv.key_dim;
    let mut parts = Vec::with_capacity(kv.batch * kv.heads);
    // The float16 window's chunks, converted: one buffer for the whole span.
    let mut window = Vec::new();
    for pair in 0..kv.batch * kv.heads {
        let q = &q[pair * rep * d..(pair + 1) * rep * d];
        parts.push(head::<M>(kv, pair, q, rep, span, &mut window));
    }
    parts
}

/// Attention of `rep` query rows `q` (`[rep, D]`) over pair `index`'s tokens in `span`:
/// its quantized tokens, then its window tokens (a float16 window converted in `window`).
#[inline(always)]
fn head<M: Unpack>(
    kv: &Parts<'_>,
    index: usize,
    q: &[f32],
    rep: usize,
    span: &Span,
    window: &mut Vec<f32>,
) -> Partial {
    let (d, dv) = (kv.key_dim, kv.value_dim);
    let quantized = span.tokens.len();
    let total = quantized + span.window.len();
    let mut scores = vec![0f32; rep * total];
    if let (Some(keys), true) = (&kv.keys, quantized > 0) {
        let k = keys.head(index, d, kv.quantized);
        match keys.bits {
            2 => key_scores::<M, 2, 16>(&k, q, rep, span, &mut scores, total),
            _ => key_scores::<M, 4, 8>(&k, q, rep, span, &mut scores, total),
        }
    }
    // The window in chunks: a float16 window is converted a chunk at a time, into a
    // buffer that stays in the core's cache while every query row reads it.
    let first = index * kv.window_stride + span.window.start;
    for (at, chunk) in window_chunks(span) {
        let keys = kv
            .residual_keys
            .get_in((first + at) * d..(first + at + chunk) * d, window);
        for (r, qr) in q.chunks_exact(d).enumerate() {
            let row = &mut scores[r * total + quantized + at..][..chunk];
            for (s, key) in row.iter_mut().zip(keys.chunks_exact(d)) {
                *s = dot::<M>(qr, key);
            }
        }
    }
    let (mut max, mut sum) = (vec![0f32; rep], vec![0f32; rep]);
    for (r, row) in scores.chunks_exact_mut(total).enumerate() {
        (max[r], sum[r]) = exp_in_place(row);
    }
    let mut out = vec![0f32; rep * dv];
    if let (Some(values), true) = (&kv.values, quantized > 0) {
        let v = values.head(index, kv.quantized, dv);
        match values.bits {
            2 => value_output::<M, 2, 16>(&v, &scores, total, span, rep, &mut out),
            _ => value_output::<M, 4, 8>(&v, &scores, total, span, rep, &mut out),
        }
    }
    for (at, chunk) in window_chunks(span) {
        let values = kv
            .residual_values
            .get_in((first + at) * dv..(first + at + chunk) * dv, window);
        for (r, out) in out.chunks_exact_mut(dv).enumerate() {
            let weights = &scores[r * total + quantized + at..][..chunk];
            for (&w, value) in weights.iter().zip(values.chunks_exact(dv)) {
                for (o, &x) in out.iter_mut().zip(value) {
                    *o = M::mul_add(w, x, *o);
                }
            }
        }
    }
    Partial { out, max, sum }
}

/// Window tokens converted and read at once: 128 tokens of 64 channels are 32 KiB in
/// float32, which stays in a core's L2 cache while the query rows read it.
const WINDOW_CHUNK: usize = 128;

/// `(offset, tokens)` of each chunk of `span`'s window, offsets from its first token.
fn window_chunks(span: &Span) -> impl Iterator<Item = (usize, usize)> {
    let len = span.window.len();
    (0..len)
        .step_by(WINDOW_CHUNK)
        .map(move |at| (at, WINDOW_CHUNK.min(len - at)))
}

/// The zero point that goes with centred codes: `q * s + z = (q - mid) * s + (z + mid * s)`.
///
/// Centring keeps the factored-out term `sum w * zero` near the size of the result: with
/// the raw minimum as zero, it and the code term are both large and nearly cancel (values
/// grouped around 0 have a zero near -2), which cost two decimal digits.
#[inline(always)]
fn centred_zero<const BITS: u32>(scale: f32, zero: f32) -> f32 {
    zero + scale * ((1u32 << BITS) - 1) as f32 / 2.0
}

/// `scales` and `zeros` (`zeros` replaced by [`centred_zero`]s) in float32.
fn centred<const BITS: u32>(scales: Vec<f32>, mut zeros: Vec<f32>) -> (Vec<f32>, Vec<f32>) {
    for (z, &s) in zeros.iter_mut().zip(&scales) {
        *z = centred_zero::<BITS>(s, *z);
    }
    (scales, zeros)
}

/// The `PW = 32 / BITS` codes of a word, lowest bits first, centred (`code - mid`): a
/// fixed-size loop over constant shifts, a few vector instructions per word.
#[inline(always)]
fn unpack<const BITS: u32, const PW: usize>(word: u32) -> [f32; PW] {
    let mask = (1u32 << BITS) - 1;
    let mid = mask as f32 / 2.0;
    let mut out = [0f32; PW];
    for (j, o) in out.iter_mut().enumerate() {
        // Through i32: a u32 to f32 conversion takes several vector instructions.
        *o = ((word >> (BITS as usize * j)) & mask) as i32 as f32 - mid;
    }
    out
}

/// A word's sixteen two-bit codes, centred, through a table: the word shifted by each
/// lane's amount, then `vpermilps`, which reads only the low two bits of each lane, picks
/// the centred value. Two instructions per eight codes, where masking, converting and
/// centring took four.
///
/// # Safety
/// The CPU must support AVX2, and `PW` must be 16.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn table2<const PW: usize>(word: u32) -> [f32; PW] {
    use std::arch::x86_64::*;
    debug_assert_eq!(PW, 16);
    let w = _mm256_set1_epi32(word as i32);
    let table = _mm256_setr_ps(-1.5, -0.5, 0.5, 1.5, -1.5, -0.5, 0.5, 1.5);
    let low = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    let high = _mm256_srlv_epi32(w, _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30));
    let mut out = [0f32; PW];
    _mm256_storeu_ps(out.as_mut_ptr(), _mm256_permutevar_ps(table, low));
    _mm256_storeu_ps(out.as_mut_ptr().add(8), _mm256_permutevar_ps(table, high));
    out
}

/// A word's eight four-bit codes, centred, through a sixteen-entry table: the word shifted
/// by each lane's amount, then `vpermt2ps`, which reads only the low four bits of each
/// lane. Two instructions per eight codes, where masking, converting and centring took
/// four.
///
/// # Safety
/// The CPU must support AVX-512 F and VL, and `PW` must be 8.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn table4<const PW: usize>(word: u32) -> [f32; PW] {
    use std::arch::x86_64::*;
    debug_assert_eq!(PW, 8);
    let w = _mm256_set1_epi32(word as i32);
    let low = _mm256_setr_ps(-7.5, -6.5, -5.5, -4.5, -3.5, -2.5, -1.5, -0.5);
    let high = _mm256_setr_ps(0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
    let index = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    let mut out = [0f32; PW];
    _mm256_storeu_ps(out.as_mut_ptr(), _mm256_permutex2var_ps(low, index, high));
    out
}

/// How far ahead in a channel row of packed keys [`prefetch`] asks for: two cache lines.
///
/// A block of keys reads a few words from each of D channel rows, far apart: D
/// interleaved streams, more than the hardware prefetchers follow, so a decode step (whose
/// layers' caches are cold by their turn) waited on memory. Asking ahead took K4V4 at 8k
/// tokens from 1.19-1.23 to 1.00-1.03 ms per call over 30 layers read in turn
/// (`decode_timing`), and changed nothing with hot caches.
const PREFETCH_WORDS: usize = 32;

/// Asks the CPU to bring the cache line holding `p` closer.
#[inline(always)]
fn prefetch(p: *const u32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it reads nothing and faults on no address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Query rows handled together: their accumulators stay in vector registers (3 rows of
/// [`BLOCK`] floats is 6 AVX registers).
const ROWS: usize = 3;

/// Tokens (keys) or channels (values) one accumulator row holds: one or two packed words,
/// so that the query factors (keys) or the weights and scale (values) loaded for a
/// channel or a token serve more than one word. Not 32: its 12 accumulators, with the
/// unpacking constants, outgrew the 16 AVX registers and spilled to the stack (2-5% slower
/// on one thread, `RAYON_NUM_THREADS=1 decode_timing 4096`). Groups are 32 or more, so a
/// block never straddles two.
const BLOCK: usize = 16;

/// Calls `$f::<M, BITS, PW, NR>(args)` for `nr` rows (1 to [`ROWS`]) with the bit width's
/// constants, so that every inner loop has fixed trip counts.
macro_rules! by_rows {
    ($self:ident . $f:ident, $m:ty, $bits:expr, $nr:expr, ($($arg:expr),* $(,)?)) => {
        match ($bits, $nr) {
            (2, 3) => $self.$f::<$m, 2, 16, 3>($($arg),*),
            (2, 2) => $self.$f::<$m, 2, 16, 2>($($arg),*),
            (2, _) => $self.$f::<$m, 2, 16, 1>($($arg),*),
            (_, 3) => $self.$f::<$m, 4, 8, 3>($($arg),*),
            (_, 2) => $self.$f::<$m, 4, 8, 2>($($arg),*),
            (_, _) => $self.$f::<$m, 4, 8, 1>($($arg),*),
        }
    };
}

/// One group of quantized keys (per channel: row `c` of `packed` holds channel `c` of
/// every token) with the query rows folded into its scales.
struct KeyGroup<'a> {
    packed: &'a [u32],
    /// Words per channel row.
    words: usize,
    /// `a[r * D + c] = q[r, c] * scale[c, group]`.
    a: &'a [f32],
    dim: usize,
    /// `sum_c q[r, c] * centred_zero[c, group]` per row.
    bias: &'a [f32],
}

impl KeyGroup<'_> {
    /// Scores of rows `r0 .. r0 + NR` for the [`BLOCK`] tokens of word columns
    /// `w .. w + BLOCK / PW`, written from column `col` of `scores` (row stride `ld`).
    /// A channel's words are adjacent, and its query factors are loaded once for all of
    /// them.
    #[inline(always)]
    fn block<M: Unpack, const BITS: u32, const PW: usize, const NR: usize>(
        &self,
        w: usize,
        col: usize,
        r0: usize,
        scores: &mut [f32],
        ld: usize,
    ) {
        let (d, words) = (self.dim, self.words);
        // Checked once here, so that the loop below reads without bounds checks: they
        // were most of its instructions, and their registers pushed the accumulators'
        // neighbours to the stack.
        assert!(w + BLOCK / PW <= words && d * words <= self.packed.len());
        assert!((r0 + NR) * d <= self.a.len());
        let mut acc = [[0f32; BLOCK]; NR];
        for c in 0..d {
            // SAFETY: `c < d` and `w + BLOCK / PW <= words` (asserted above), so the
            // block's words of channel row `c` lie inside `packed`.
            let row = unsafe { self.packed.as_ptr().add(c * words + w) };
            prefetch(row.wrapping_add(PREFETCH_WORDS));
            let mut a = [0f32; NR];
            for (r, a) in a.iter_mut().enumerate() {
                // SAFETY: `(r0 + r) * d + c < (r0 + NR) * d <= a.len()` (asserted above).
                *a = unsafe { *self.a.get_unchecked((r0 + r) * d + c) };
            }
            for i in 0..BLOCK / PW {
                // SAFETY: `i < BLOCK / PW`: inside the block (above).
                let codes = M::unpack::<BITS, PW>(unsafe { *row.add(i) });
                for (acc, &a) in acc.iter_mut().zip(&a) {
                    for (o, &code) in acc[i * PW..][..PW].iter_mut().zip(&codes) {
                        *o = M::mul_add(a, code, *o);
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let row = r0 + r;
            let bias = self.bias[row];
            for (o, &x) in scores[row * ld + col..][..BLOCK].iter_mut().zip(acc) {
                *o = x + bias;
            }
        }
    }
}

/// Scores `[rep, ld]` (from column 0) of query rows `q` (`[rep, D]`) over the quantized
/// keys of `span`, one group at a time.
#[inline(always)]
fn key_scores<M: Unpack, const BITS: u32, const PW: usize>(
    k: &QuantizedHead<'_>,
    q: &[f32],
    rep: usize,
    span: &Span,
    scores: &mut [f32],
    ld: usize,
) {
    let g = k.group;
    let d = q.len() / rep;
    let groups = k.scales.len() / d;
    let words = groups * g / PW;
    // The span's groups, each a row of D channels: a group's factors are then contiguous.
    let cols = span.tokens.start / g..span.tokens.end / g;
    let (scales, zeros) = centred::<BITS>(
        k.scales.transposed(d, cols.clone()),
        k.zeros.transposed(d, cols.clone()),
    );
    let mut a = vec![0f32; rep * d];
    let mut bias = vec![0f32; rep];
    for (i, group) in cols.enumerate() {
        let (s, z) = (&scales[i * d..][..d], &zeros[i * d..][..d]);
        for r in 0..rep {
            let qr = &q[r * d..][..d];
            for ((a, &qc), &s) in a[r * d..][..d].iter_mut().zip(qr).zip(s) {
                *a = qc * s;
            }
            bias[r] = dot::<M>(qr, z);
        }
        let rows = KeyGroup {
            packed: k.packed,
            words,
            a: &a,
            dim: d,
            bias: &bias,
        };
        for w in (group * g / PW..(group + 1) * g / PW).step_by(BLOCK / PW) {
            let col = w * PW - span.tokens.start;
            for r0 in (0..rep).step_by(ROWS) {
                by_rows!(
                    rows.block,
                    M,
                    BITS,
                    ROWS.min(rep - r0),
                    (w, col, r0, scores, ld)
                );
            }
        }
    }
}

/// `out` (`[rep, Dv]`) += the weighted sum of the quantized values of `span`, with
/// `weights` (`[rep, ld]`, from column 0) for its tokens.
///
/// One group of channels at a time: its per-token factors `w[r, n] * scale[n, group]` and
/// its zero term `sum_n w[r, n] * zero[n, group]` are computed once, in vector loops, and
/// the block loops then read one factor per row and token. (Computed inside the block
/// loop, they cost more than the codes' multiply-adds: every block of a group repeated
/// them, with strided loads of the weights, scales and zeros.)
#[inline(always)]
fn value_output<M: Unpack, const BITS: u32, const PW: usize>(
    v: &QuantizedHead<'_>,
    weights: &[f32],
    ld: usize,
    span: &Span,
    rep: usize,
    out: &mut [f32],
) {
    let dv = out.len() / rep;
    let (g, tokens) = (v.group, span.tokens.len());
    let groups = dv / g;
    let params = span.tokens.start * groups..span.tokens.end * groups;
    let (scales, zeros) = centred::<BITS>(
        v.scales.get(params.clone()).into_owned(),
        v.zeros.get(params).into_owned(),
    );
    let words = dv / PW;
    let packed = &v.packed[span.tokens.start * words..span.tokens.end * words];
    let (mut scale, mut zero) = (vec![0f32; tokens], vec![0f32; tokens]);
    let mut factors = vec![0f32; tokens * ROWS];
    for group in 0..groups {
        for (n, (s, z)) in scale.iter_mut().zip(&mut zero).enumerate() {
            (*s, *z) = (scales[n * groups + group], zeros[n * groups + group]);
        }
        let channels = group * g..(group + 1) * g;
        for r0 in (0..rep).step_by(ROWS) {
            let nr = ROWS.min(rep - r0);
            // Row by row: a plain vector loop (token-major, with a stride of `nr`, it was
            // a scalar one).
            let factors = &mut factors[..tokens * nr];
            for (r, f) in factors.chunks_exact_mut(tokens).enumerate() {
                let w = &weights[(r0 + r) * ld..][..tokens];
                for ((f, &w), &s) in f.iter_mut().zip(w).zip(&scale) {
                    *f = w * s;
                }
                let bias = dot::<M>(w, &zero);
                for o in &mut out[(r0 + r) * dv..][channels.clone()] {
                    *o += bias;
                }
            }
            let rows = ValueRows {
                packed,
                words,
                tokens,
                factors,
            };
            for first in channels.clone().step_by(BLOCK) {
                let out = &mut out[r0 * dv..];
                by_rows!(rows.block, M, BITS, nr, (first, dv, out));
            }
        }
    }
}

/// The quantized values of one span (per token: row `n` of `packed` holds token `n`'s
/// channels) and their factors for up to [`ROWS`] query rows.
struct ValueRows<'a> {
    packed: &'a [u32],
    /// Words per token.
    words: usize,
    /// Tokens in the span.
    tokens: usize,
    /// `[NR, tokens]`: `w[r, n] * scale[n, group]` for the group being read.
    factors: &'a [f32],
}

impl ValueRows<'_> {
    /// Rows `0 .. NR` of `out` (row stride `dv`) += `sum_n factor[n, r] * code[n, ch]`
    /// for the [`BLOCK`] channels from `first` (inside one group: groups are 32 channels
    /// or more).
    #[inline(always)]
    fn block<M: Unpack, const BITS: u32, const PW: usize, const NR: usize>(
        &self,
        first: usize,
        dv: usize,
        out: &mut [f32],
    ) {
        let (words, tokens) = (self.words, self.tokens);
        // Checked once here, so that the loop below reads without bounds checks.
        assert!(first / PW + BLOCK / PW <= words && tokens * words <= self.packed.len());
        assert!(NR * tokens <= self.factors.len());
        let mut acc = [[0f32; BLOCK]; NR];
        for n in 0..tokens {
            // SAFETY: `n < tokens` and the block's words lie inside a token's row
            // (asserted above).
            let row = unsafe { self.packed.as_ptr().add(n * words + first / PW) };
            let mut a = [0f32; NR];
            for (r, a) in a.iter_mut().enumerate() {
                // SAFETY: `r * tokens + n < NR * tokens <= factors.len()` (above).
                *a = unsafe { *self.factors.get_unchecked(r * tokens + n) };
            }
            for i in 0..BLOCK / PW {
                // SAFETY: `i < BLOCK / PW`: inside the block (above).
                let codes = M::unpack::<BITS, PW>(unsafe { *row.add(i) });
                for (acc, &a) in acc.iter_mut().zip(&a) {
                    for (o, &code) in acc[i * PW..][..PW].iter_mut().zip(&codes) {
                        *o = M::mul_add(a, code, *o);
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (o, &x) in out[r * dv + first..][..BLOCK].iter_mut().zip(acc) {
                *o += x;
            }
        }
    }
}
