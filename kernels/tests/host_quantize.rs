//! The host flush (`host::quantize`) equals the MLX quantizer and MLX's concatenation bit
//! for bit: codes, scales, zeros, dtypes and shapes, for keys grouped along tokens (the
//! transposed case) and values grouped along channels, in float32 and float16.

mod common;

use common::{array, bits, f32s, u32s};
use kivi_kernels::{
    host::quantize,
    mlx_quant::{self, QuantizedArray},
    testdata::{Layer, Profile},
    QuantSpec,
};
use mlx_rs::{Array, Dtype};

fn spec(bits: u32, group: usize) -> QuantSpec {
    QuantSpec::new(bits, group).unwrap()
}

fn assert_same(host: &QuantizedArray, mlx: &QuantizedArray, what: &str) {
    for (h, m, name) in [
        (&host.packed, &mlx.packed, "packed"),
        (&host.scales, &mlx.scales, "scales"),
        (&host.zeros, &mlx.zeros, "zeros"),
    ] {
        assert_eq!(h.shape(), m.shape(), "{what}: {name} shape");
        assert_eq!(h.dtype(), m.dtype(), "{what}: {name} dtype");
    }
    assert_eq!(u32s(&host.packed), u32s(&mlx.packed), "{what}: codes");
    assert_eq!(
        bits(&f32s(&host.scales)),
        bits(&f32s(&mlx.scales)),
        "{what}: scales"
    );
    assert_eq!(
        bits(&f32s(&host.zeros)),
        bits(&f32s(&mlx.zeros)),
        "{what}: zeros"
    );
    assert_eq!(host.spec, mlx.spec);
}

/// Keys `[1, 3, 256, 64]` of a layer, in `dtype`.
fn keys(seed: u64, profile: Profile, dtype: Dtype) -> Array {
    let layer = Layer::new(seed, profile, (9, 3, 64), 256, 1);
    array(&layer.keys, &[1, 3, 256, 64])
        .as_dtype(dtype)
        .unwrap()
}

#[test]
fn host_quantizer_equals_the_mlx_quantizer() {
    for profile in [Profile::Gaussian, Profile::Outliers] {
        for dtype in [Dtype::Float32, Dtype::Float16] {
            let x = keys(31, profile, dtype);
            for b in [2, 4] {
                for g in [32, 64] {
                    let what = format!("{profile:?} {dtype:?} b={b} G={g}");
                    // Groups along tokens (KIVI's keys) and along channels (its values).
                    let host = quantize::quantize(&x, spec(b, g), true).unwrap();
                    let mlx =
                        mlx_quant::quantize(&x.swap_axes(-1, -2).unwrap(), spec(b, g)).unwrap();
                    assert_same(&host, &mlx, &format!("{what}, along tokens"));
                    let host = quantize::quantize(&x, spec(b, g), false).unwrap();
                    let mlx = mlx_quant::quantize(&x, spec(b, g)).unwrap();
                    assert_same(&host, &mlx, &format!("{what}, along channels"));
                }
            }
        }
    }
}

#[test]
fn host_joins_equal_mlx_concatenation() {
    let x = keys(32, Profile::Outliers, Dtype::Float16);
    let parts = x.split_at_indices(&[64, 96], Some(2)).unwrap();
    for (transposed, axis) in [(true, -1), (false, -2)] {
        let quantized: Vec<QuantizedArray> = parts
            .iter()
            .map(|p| quantize::quantize(p, spec(4, 32), transposed).unwrap())
            .collect();
        let refs: Vec<&QuantizedArray> = quantized.iter().collect();
        let host = quantize::concatenate(&refs, axis).unwrap();
        let mlx = QuantizedArray::concatenate(&refs, axis).unwrap();
        let what = format!("along axis {axis}");
        assert_same(&host, &mlx, &what);
        // Whole groups quantize alone, so the joined parts are the whole quantized at once.
        let whole = quantize::quantize(&x, spec(4, 32), transposed).unwrap();
        assert_same(&host, &whole, &what);
    }
}

#[test]
fn bad_inputs_are_refused() {
    let x = keys(33, Profile::Gaussian, Dtype::Float32);
    let err = quantize::quantize(&x.as_dtype(Dtype::Bfloat16).unwrap(), spec(4, 32), true);
    assert!(err.unwrap_err().to_string().contains("float32 or float16"));
    // 48 tokens do not make whole groups of 32.
    let short = x.split_at_indices(&[48], Some(2)).unwrap().remove(0);
    assert!(quantize::quantize(&short, spec(4, 32), true).is_err());
    let a = quantize::quantize(&x, spec(4, 32), true).unwrap();
    let b = quantize::quantize(&x, spec(2, 32), true).unwrap();
    let err = quantize::concatenate(&[&a, &b], -1).unwrap_err();
    assert!(err.to_string().contains("quantized differently"), "{err}");
    // Keys of a different head count cannot join along tokens.
    let other = quantize::quantize(
        &x.split_at_indices(&[2], Some(1)).unwrap()[0],
        spec(4, 32),
        true,
    )
    .unwrap();
    let err = quantize::concatenate(&[&a, &other], -1).unwrap_err();
    assert!(err.to_string().contains("cannot join"), "{err}");
    assert!(quantize::concatenate(&[], -1).is_err());
}
