//! MLX works from Rust on this platform: the operations the KIVI cache and the models rest
//! on, each checked against a result computed by hand or by plain loops.

use mlx_rs::{fast::scaled_dot_product_attention, ops, Array};

fn values(a: &Array) -> Vec<f32> {
    a.eval().unwrap();
    a.as_slice::<f32>().to_vec()
}

#[test]
fn matmul_matches_hand_computation() {
    let a = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let b = Array::from_slice(&[5.0f32, 6.0, 7.0, 8.0], &[2, 2]);
    let c = a.matmul(&b).unwrap();
    assert_eq!(c.shape(), &[2, 2]);
    assert_eq!(values(&c), vec![19.0, 22.0, 43.0, 50.0]);
}

/// A [K, N] matrix whose every group of 32 along N spans the integer levels 0..2^b-1, so
/// that affine quantization is exact and the products can be compared for equality.
fn level_matrix(k: usize, n: usize, bits: u32) -> Vec<f32> {
    let levels = (1u32 << bits) as usize;
    (0..k * n)
        .map(|i| {
            let (row, col) = (i / n, i % n);
            ((col + 3 * row) % levels) as f32 - 1.0
        })
        .collect()
}

#[test]
fn quantize_and_quantized_matmul_at_2_and_4_bits() {
    let (m, k, n) = (2usize, 4usize, 64usize);
    for bits in [2, 4] {
        let w = level_matrix(k, n, bits as u32);
        let x: Vec<f32> = (0..m * k).map(|i| (i as f32) * 0.5 - 1.0).collect();
        let w_arr = Array::from_slice(&w, &[k as i32, n as i32]);
        let (packed, scales, biases) = ops::quantize(&w_arr, 32, bits).unwrap();
        // 32 bits per u32 word: 16 two-bit or 8 four-bit values.
        assert_eq!(packed.shape(), &[k as i32, (n as i32) * bits / 32]);
        assert_eq!(scales.shape(), &[k as i32, (n / 32) as i32]);
        assert_eq!(biases.shape(), &[k as i32, (n / 32) as i32]);

        let restored = ops::dequantize(&packed, &scales, &biases, 32, bits).unwrap();
        assert_eq!(
            values(&restored),
            w,
            "bits={bits}: exact levels round-trip exactly"
        );

        // x [m, k] @ w [k, n], with w quantized along n (transpose = false).
        let x_arr = Array::from_slice(&x, &[m as i32, k as i32]);
        let y = ops::quantized_matmul(&x_arr, &packed, &scales, &biases, false, 32, bits).unwrap();
        assert_eq!(y.shape(), &[m as i32, n as i32]);
        let mut expected = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                expected[i * n + j] = (0..k).map(|l| x[i * k + l] * w[l * n + j]).sum();
            }
        }
        for (got, want) in values(&y).iter().zip(&expected) {
            assert!((got - want).abs() < 1e-4, "bits={bits}: {got} vs {want}");
        }
    }
}

#[test]
fn scaled_dot_product_attention_with_grouped_kv_heads() {
    // 4 query heads share 2 KV heads (heads 0,1 -> kv 0; heads 2,3 -> kv 1).
    let (heads, kv_heads, t, d) = (4usize, 2usize, 3usize, 2usize);
    let q: Vec<f32> = (0..heads * d).map(|i| (i as f32) * 0.25 - 0.5).collect();
    let k: Vec<f32> = (0..kv_heads * t * d)
        .map(|i| ((i * 7 % 5) as f32) * 0.3 - 0.4)
        .collect();
    let v: Vec<f32> = (0..kv_heads * t * d).map(|i| (i as f32) - 3.0).collect();
    let scale = 1.0 / (d as f32).sqrt();

    let out = scaled_dot_product_attention(
        Array::from_slice(&q, &[1, heads as i32, 1, d as i32]),
        Array::from_slice(&k, &[1, kv_heads as i32, t as i32, d as i32]),
        Array::from_slice(&v, &[1, kv_heads as i32, t as i32, d as i32]),
        scale,
        None,
        None,
    )
    .unwrap();
    assert_eq!(out.shape(), &[1, heads as i32, 1, d as i32]);

    let mut expected = Vec::new();
    for h in 0..heads {
        let kv = h / (heads / kv_heads);
        let scores: Vec<f32> = (0..t)
            .map(|j| {
                (0..d)
                    .map(|c| q[h * d + c] * k[(kv * t + j) * d + c])
                    .sum::<f32>()
                    * scale
            })
            .collect();
        let max = scores.iter().cloned().fold(f32::MIN, f32::max);
        let weights: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f32 = weights.iter().sum();
        for c in 0..d {
            expected.push(
                (0..t)
                    .map(|j| weights[j] / total * v[(kv * t + j) * d + c])
                    .sum::<f32>(),
            );
        }
    }
    for (got, want) in values(&out).iter().zip(&expected) {
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    }
}
