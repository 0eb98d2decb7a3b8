//! Attention in plain Rust with f64 accumulation: the spec the MLX paths are tested
//! against, and the error measures used to compare them.

/// Shapes of one attention call (batch 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads; `heads` is a multiple of it (grouped-query attention).
    pub kv_heads: usize,
    /// Query positions: the last `queries` of the `tokens` positions.
    pub queries: usize,
    /// Key/value positions.
    pub tokens: usize,
    /// Head dimension.
    pub dim: usize,
}

/// Softmax attention of queries `[heads, L, D]` over keys and values `[kv_heads, T, D]`,
/// causal: query `i` sits at position `T - L + i` and sees keys `0..=T - L + i`. Query head
/// `h` reads KV head `h / (heads / kv_heads)`. Returns `[heads, L, D]`.
pub fn attention(
    queries: &[f32],
    keys: &[f32],
    values: &[f32],
    shape: AttnShape,
    scale: f32,
) -> Vec<f32> {
    let AttnShape {
        heads,
        kv_heads,
        queries: l,
        tokens: t,
        dim: d,
    } = shape;
    assert_eq!(
        queries.len(),
        heads * l * d,
        "queries are not [{heads}, {l}, {d}]"
    );
    assert_eq!(
        keys.len(),
        kv_heads * t * d,
        "keys are not [{kv_heads}, {t}, {d}]"
    );
    assert_eq!(values.len(), keys.len(), "values differ from keys in size");
    assert!(l <= t && heads % kv_heads == 0);
    let rep = heads / kv_heads;
    let mut out = vec![0f32; heads * l * d];
    for h in 0..heads {
        let kv = h / rep;
        let k = &keys[kv * t * d..(kv + 1) * t * d];
        let v = &values[kv * t * d..(kv + 1) * t * d];
        for i in 0..l {
            let q = &queries[(h * l + i) * d..(h * l + i + 1) * d];
            let visible = t - l + i + 1;
            let scores: Vec<f64> = (0..visible)
                .map(|j| {
                    let dot: f64 = (0..d)
                        .map(|c| f64::from(q[c]) * f64::from(k[j * d + c]))
                        .sum();
                    dot * f64::from(scale)
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let o = &mut out[(h * l + i) * d..(h * l + i + 1) * d];
            for (c, o) in o.iter_mut().enumerate() {
                let acc: f64 = (0..visible)
                    .map(|j| weights[j] * f64::from(v[j * d + c]))
                    .sum();
                *o = (acc / total) as f32;
            }
        }
    }
    out
}

/// How far an output is from a reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStats {
    /// `||got - want|| / ||want||` (L2 over all elements).
    pub relative: f64,
    /// Mean over output vectors (rows of `dim`) of the cosine similarity with the reference.
    pub cosine: f64,
    /// Largest absolute difference.
    pub max_abs: f64,
}

/// Compares `got` with `want`, both made of rows of `dim` values.
pub fn compare(got: &[f32], want: &[f32], dim: usize) -> ErrorStats {
    assert_eq!(got.len(), want.len(), "compare: lengths differ");
    let (mut diff2, mut want2, mut max_abs) = (0f64, 0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        let (g, w) = (f64::from(g), f64::from(w));
        diff2 += (g - w) * (g - w);
        want2 += w * w;
        max_abs = max_abs.max((g - w).abs());
    }
    let rows = got.len() / dim;
    let cosine = got
        .chunks(dim)
        .zip(want.chunks(dim))
        .map(|(g, w)| {
            let dot: f64 = g
                .iter()
                .zip(w)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let ng: f64 = g.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt();
            let nw: f64 = w.iter().map(|&b| f64::from(b).powi(2)).sum::<f64>().sqrt();
            if ng == 0.0 && nw == 0.0 {
                1.0
            } else {
                dot / (ng * nw).max(f64::MIN_POSITIVE)
            }
        })
        .sum::<f64>()
        / rows.max(1) as f64;
    ErrorStats {
        relative: (diff2 / want2.max(f64::MIN_POSITIVE)).sqrt(),
        cosine,
        max_abs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_gives_its_value() {
        let shape = AttnShape {
            heads: 2,
            kv_heads: 1,
            queries: 1,
            tokens: 1,
            dim: 2,
        };
        let out = attention(
            &[1.0, 2.0, -1.0, 0.5],
            &[0.3, 0.4],
            &[5.0, -6.0],
            shape,
            0.7,
        );
        assert_eq!(out, vec![5.0, -6.0, 5.0, -6.0]);
    }

    #[test]
    fn causal_chunk_sees_only_the_past() {
        // Two tokens, two queries: the first query sees only token 0.
        let shape = AttnShape {
            heads: 1,
            kv_heads: 1,
            queries: 2,
            tokens: 2,
            dim: 1,
        };
        let out = attention(&[1.0, 1.0], &[0.0, 0.0], &[2.0, 4.0], shape, 1.0);
        assert_eq!(out, vec![2.0, 3.0]);
    }

    #[test]
    fn compare_measures() {
        let s = compare(&[1.0, 0.0], &[1.0, 0.0], 2);
        assert_eq!((s.relative, s.cosine, s.max_abs), (0.0, 1.0, 0.0));
        let s = compare(&[0.0, 1.0], &[1.0, 0.0], 2);
        assert!((s.relative - 2f64.sqrt()).abs() < 1e-12 && s.cosine.abs() < 1e-12);
    }
}
