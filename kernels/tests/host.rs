//! The host-memory attention kernel equals the f64 reference, whatever the split of the
//! keys and values into segments and their layouts, for decode and for chunks.

use kivi_kernels::host::attention::{attend, Segment, Shape};
use kivi_kernels::reference_attention::{attention, AttnShape};
use kivi_kernels::testdata::XorShift;

/// `[kv, T, D]` as segments `[cut_0, cut_1, ...]`, every other one channel-major, each
/// padded by a few floats per row and per head (strides larger than the content).
fn segments(
    data: &[f32],
    kv: usize,
    t: usize,
    d: usize,
    cuts: &[usize],
) -> Vec<(Vec<f32>, usize, usize, usize, bool)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &len) in cuts.iter().enumerate() {
        let channel_major = i % 2 == 1;
        let (rows, cols) = if channel_major { (d, len) } else { (len, d) };
        let row_stride = cols + 3;
        let head_stride = rows * row_stride + 5;
        let mut buf = vec![f32::NAN; kv * head_stride];
        for h in 0..kv {
            for n in 0..len {
                for c in 0..d {
                    let x = data[(h * t + start + n) * d + c];
                    let at = if channel_major {
                        c * row_stride + n
                    } else {
                        n * row_stride + c
                    };
                    buf[h * head_stride + at] = x;
                }
            }
        }
        out.push((buf, len, head_stride, row_stride, channel_major));
        start += len;
    }
    assert_eq!(start, t);
    out
}

#[test]
fn matches_the_reference_for_decode_and_chunks_over_segments() {
    let mut rng = XorShift::new(11);
    for (heads, kv_heads) in [(9, 3), (4, 4)] {
        for (t, l, cuts) in [
            (1usize, 1usize, vec![1usize]),
            (300, 1, vec![256, 44]),
            (300, 37, vec![100, 200]),
            (600, 300, vec![64, 128, 408]),
        ] {
            let d = 64;
            let q = rng.normals(heads * l * d);
            let k = rng.normals(kv_heads * t * d);
            let v = rng.normals(kv_heads * t * d);
            let want = attention(
                &q,
                &k,
                &v,
                AttnShape {
                    heads,
                    kv_heads,
                    queries: l,
                    tokens: t,
                    dim: d,
                },
                0.125,
            );
            let ks = segments(&k, kv_heads, t, d, &cuts);
            let vs = segments(&v, kv_heads, t, d, &cuts);
            fn view(s: &[(Vec<f32>, usize, usize, usize, bool)]) -> Vec<Segment<'_>> {
                s.iter()
                    .map(
                        |(data, len, head_stride, row_stride, channel_major)| Segment {
                            data,
                            len: *len,
                            head_stride: *head_stride,
                            row_stride: *row_stride,
                            channel_major: *channel_major,
                        },
                    )
                    .collect()
            }
            let mut out = vec![0f32; heads * l * d];
            let shape = Shape {
                batch: 1,
                heads,
                kv_heads,
                queries: l,
                dim: d,
                value_dim: d,
            };
            attend(&q, shape, &view(&ks), &view(&vs), 0.125, &mut out).unwrap();
            let worst = out
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 2e-5,
                "heads {heads}/{kv_heads} T {t} L {l}: {worst}"
            );
        }
    }
}

#[test]
fn refuses_shapes_that_do_not_fit() {
    let q = vec![0f32; 2 * 4];
    let k = vec![0f32; 3 * 4];
    let seg = Segment {
        data: &k,
        len: 3,
        head_stride: 12,
        row_stride: 4,
        channel_major: false,
    };
    let shape = Shape {
        batch: 1,
        heads: 2,
        kv_heads: 1,
        queries: 1,
        dim: 4,
        value_dim: 4,
    };
    let mut out = vec![0f32; 8];
    assert!(attend(&q, shape, &[seg], &[seg], 1.0, &mut out).is_ok());
    // More queries than tokens, and a segment shorter than it claims.
    assert!(attend(
        &q,
        Shape {
            queries: 4,
            ..shape
        },
        &[seg],
        &[seg],
        1.0,
        &mut out
    )
    .is_err());
    let short = Segment { len: 4, ..seg };
    assert!(attend(&q, shape, &[short], &[short], 1.0, &mut out).is_err());
}
