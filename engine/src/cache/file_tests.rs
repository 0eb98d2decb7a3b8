//! Cache files: round trips, and refusal of files from another model or settings, and of
//! truncated, tampered, forged and random bytes, without panicking.

use std::collections::BTreeMap;

use kivi_kernels::testdata::{Layer, Profile, XorShift};
use mlx_rs::{Array, Dtype};

use super::*;
use crate::backend::Backend;
use crate::cache::{CacheConfig, KiviConfig, KvCache};

const HOST: Backend = Backend::HOST;

const MODEL: &str = "HuggingFaceTB/SmolLM2-135M-Instruct@Q4_1";

fn kivi(kb: u32, vb: u32, g: usize, r: usize) -> CacheConfig {
    CacheConfig::Kivi(KiviConfig::new(kb, vb, g, r).unwrap())
}

/// `layers` caches made by `config`, each fed its own seeded stream of `tokens` in chunks.
fn filled(
    config: &CacheConfig,
    layers: usize,
    tokens: usize,
    dtype: Dtype,
) -> Vec<Box<dyn KvCache>> {
    filled_with_windows(config, &vec![None; layers], tokens, dtype)
}

/// [`filled`] for layers with the given sliding windows.
fn filled_with_windows(
    config: &CacheConfig,
    windows: &[Option<usize>],
    tokens: usize,
    dtype: Dtype,
) -> Vec<Box<dyn KvCache>> {
    windows
        .iter()
        .enumerate()
        .map(|(layer, &window)| {
            let mut cache = config.make_layer(window, &HOST);
            let data = Layer::new(layer as u64, Profile::Outliers, (9, 3, 64), tokens, 1);
            let shape = [1, 3, tokens as i32, 64];
            let keys = Array::from_slice(&data.keys, &shape)
                .as_dtype(dtype)
                .unwrap();
            let values = Array::from_slice(&data.values, &shape)
                .as_dtype(dtype)
                .unwrap();
            let q = Array::zeros::<f32>(&[1, 9, tokens as i32, 64])
                .unwrap()
                .as_dtype(dtype)
                .unwrap();
            cache.attend(&q, &keys, &values, 0.125).unwrap();
            cache
        })
        .collect()
}

fn bytes_of(config: &CacheConfig, caches: &[Box<dyn KvCache>]) -> Vec<u8> {
    let extra = BTreeMap::from([(
        "document".to_string(),
        "moby-dick.txt#sha256:fe28".to_string(),
    )]);
    to_bytes(
        MODEL,
        config,
        &HOST,
        caches.iter().map(|c| c.as_ref()),
        &extra,
    )
    .unwrap()
}

/// Each layer's arrays: name, shape and exact bytes.
type Contents = Vec<Vec<(String, Vec<i32>, Vec<u8>)>>;

fn contents(caches: &[Box<dyn KvCache>]) -> Contents {
    caches
        .iter()
        .map(|c| {
            let mut arrays: Vec<_> = c
                .state()
                .unwrap()
                .arrays
                .into_iter()
                .map(|(name, a)| {
                    (
                        name,
                        a.shape().to_vec(),
                        Tensor::from_array(&a).unwrap().data,
                    )
                })
                .collect();
            arrays.sort();
            arrays
        })
        .collect()
}

#[test]
fn round_trips_bit_for_bit() {
    for (config, dtype) in [
        (kivi(4, 2, 32, 32), Dtype::Float32),
        (kivi(2, 2, 64, 0), Dtype::Float16),
        (
            CacheConfig::Kivi(
                KiviConfig::new(2, 4, 32, 128)
                    .unwrap()
                    .with_key_axis(crate::cache::KeyAxis::PerToken),
            ),
            Dtype::Float32,
        ),
        (CacheConfig::Full, Dtype::Float32),
        // KIVI+: sinks at the front of the residual arrays, keys and values rotated.
        ("k2v2-g32-r32-s4-rot".parse().unwrap(), Dtype::Float32),
    ] {
        let caches = filled(&config, 3, 150, dtype);
        let bytes = bytes_of(&config, &caches);
        let loaded = from_bytes(&bytes, MODEL, &config, &HOST).unwrap();
        assert_eq!(loaded.header.tokens, 150);
        assert_eq!(loaded.header.layers, 3);
        assert_eq!(loaded.header.config, config);
        assert_eq!(loaded.header.extra["document"], "moby-dick.txt#sha256:fe28");
        assert_eq!(contents(&loaded.caches), contents(&caches), "{config}");
        for (a, b) in loaded.caches.iter().zip(&caches) {
            assert_eq!(a.stats(), b.stats());
        }
        // The reopened cache goes on exactly like the original.
        let data = Layer::new(99, Profile::Gaussian, (9, 3, 64), 1, 1);
        let step = |cache: &mut Box<dyn KvCache>| {
            let kv = Array::from_slice(&data.keys, &[1, 3, 1, 64])
                .as_dtype(dtype)
                .unwrap();
            let q = Array::from_slice(&data.queries, &[1, 9, 1, 64])
                .as_dtype(dtype)
                .unwrap();
            let out = cache.attend(&q, &kv, &kv, 0.125).unwrap();
            Tensor::from_array(&out).unwrap().data
        };
        let (mut original, mut reopened) = (caches, loaded.caches);
        assert_eq!(step(&mut original[1]), step(&mut reopened[1]));
    }
}

/// A file of the previous version (plain KIVI, the same layout) still opens; an unknown
/// version says so.
#[test]
fn version_2_files_open_and_unknown_versions_are_named() {
    let config = kivi(2, 2, 32, 32);
    let caches = filled(&config, 2, 100, Dtype::Float32);
    let rewrite = |version: &str| {
        let states = caches.iter().map(|c| c.state().unwrap()).collect();
        encode_as(version, MODEL, &config, states, &[], &BTreeMap::new()).unwrap()
    };
    let old = from_bytes(&rewrite("2"), MODEL, &config, &HOST).unwrap();
    assert_eq!(contents(&old.caches), contents(&caches));
    let err = from_bytes(&rewrite("9"), MODEL, &config, &HOST).unwrap_err();
    assert!(matches!(err, CacheFileError::Version { .. }), "{err}");
}

#[test]
fn window_layers_round_trip_and_their_windows_are_recorded() {
    let config: CacheConfig = "k2v2-g32-r32-s4".parse().unwrap();
    let windows = [Some(8), None, Some(8), None];
    let caches = filled_with_windows(&config, &windows, 150, Dtype::Float32);
    let loaded = from_bytes(&bytes_of(&config, &caches), MODEL, &config, &HOST).unwrap();
    assert_eq!(loaded.header.windows, [8, 0, 8, 0]);
    assert_eq!(contents(&loaded.caches), contents(&caches));
    for (a, b) in loaded.caches.iter().zip(&caches) {
        assert_eq!(a.stats(), b.stats());
        assert_eq!(a.len(), 150);
    }
    // Files of models without window layers record none.
    let plain = filled(&config, 2, 40, Dtype::Float32);
    let loaded = from_bytes(&bytes_of(&config, &plain), MODEL, &config, &HOST).unwrap();
    assert!(loaded.header.windows.is_empty());
}

#[test]
fn empty_caches_round_trip() {
    let config = kivi(2, 2, 32, 32);
    let caches: Vec<Box<dyn KvCache>> = (0..4).map(|_| config.make(&HOST)).collect();
    let loaded = from_bytes(&bytes_of(&config, &caches), MODEL, &config, &HOST).unwrap();
    assert_eq!((loaded.header.tokens, loaded.caches.len()), (0, 4));
    assert!(loaded.caches.iter().all(|c| c.is_empty()));
}

#[test]
fn saves_and_loads_a_file() {
    let config = kivi(2, 2, 32, 32);
    let caches = filled(&config, 2, 100, Dtype::Float32);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doc.kvcache");
    save(
        &path,
        MODEL,
        &config,
        &HOST,
        caches.iter().map(|c| c.as_ref()),
        &BTreeMap::new(),
    )
    .unwrap();
    let loaded = load(&path, MODEL, &config, &HOST).unwrap();
    assert_eq!(contents(&loaded.caches), contents(&caches));
    let missing = load(&dir.path().join("nope"), MODEL, &config, &HOST).unwrap_err();
    assert!(matches!(missing, CacheFileError::Io { .. }), "{missing}");
}

#[test]
fn refuses_another_model_or_other_settings() {
    let config = kivi(4, 2, 32, 32);
    let bytes = bytes_of(&config, &filled(&config, 2, 80, Dtype::Float32));
    let err = from_bytes(&bytes, "Qwen/Qwen2.5-0.5B-Instruct", &config, &HOST).unwrap_err();
    assert!(matches!(err, CacheFileError::WrongModel { .. }), "{err}");
    assert!(err.to_string().contains(MODEL), "{err}");
    for other in [kivi(4, 4, 32, 32), kivi(4, 2, 32, 64), CacheConfig::Full] {
        let err = from_bytes(&bytes, MODEL, &other, &HOST).unwrap_err();
        assert!(matches!(err, CacheFileError::WrongSettings { .. }), "{err}");
        assert!(err.to_string().contains("k4v2-g32-r32"), "{err}");
    }
}

#[test]
fn saving_with_the_wrong_settings_is_refused() {
    let caches = filled(&kivi(4, 2, 32, 32), 1, 80, Dtype::Float32);
    let err = to_bytes(
        MODEL,
        &kivi(2, 2, 32, 32),
        &HOST,
        caches.iter().map(|c| c.as_ref()),
        &BTreeMap::new(),
    )
    .unwrap_err();
    assert!(matches!(err, CacheFileError::Save(_)), "{err}");
}

#[test]
fn refuses_truncated_files() {
    let config = kivi(2, 2, 32, 32);
    let bytes = bytes_of(&config, &filled(&config, 2, 70, Dtype::Float32));
    let mut cuts: Vec<usize> = (0..64).collect();
    cuts.extend((64..bytes.len()).step_by(97));
    cuts.push(bytes.len() - 1);
    for cut in cuts {
        let err = from_bytes(&bytes[..cut], MODEL, &config, &HOST).unwrap_err();
        assert!(
            matches!(err, CacheFileError::Length(_) | CacheFileError::Corrupt(_)),
            "cut at {cut}: {err}"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        from_bytes(&longer, MODEL, &config, &HOST),
        Err(CacheFileError::Length(_))
    ));
}

#[test]
fn refuses_tampered_files() {
    let config = kivi(2, 2, 32, 32);
    let bytes = bytes_of(&config, &filled(&config, 2, 70, Dtype::Float32));
    let mut rng = XorShift::new(1);
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut positions: Vec<usize> = (0..header_end).step_by(7).collect();
    positions.extend(
        (0..200).map(|_| header_end + (rng.next_u64() as usize) % (bytes.len() - header_end)),
    );
    for at in positions {
        let mut tampered = bytes.clone();
        tampered[at] ^= 1 << (rng.next_u64() % 8);
        let err = from_bytes(&tampered, MODEL, &config, &HOST).unwrap_err();
        if at >= header_end {
            assert!(
                matches!(err, CacheFileError::Checksum),
                "data byte {at}: {err}"
            );
        }
    }
}

/// Files with a valid checksum whose arrays do not fit their header or settings.
#[test]
fn refuses_forged_files() {
    let config = kivi(2, 2, 32, 32);
    let caches = filled(&config, 1, 100, Dtype::Float32);
    let state = caches[0].state().unwrap();
    let forge = |edit: &dyn Fn(&mut CacheState)| {
        let mut s = state.clone();
        edit(&mut s);
        encode(MODEL, &config, vec![s], &[], &BTreeMap::new()).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("token count", forge(&|s| s.tokens += 1)),
        (
            "missing array",
            forge(&|s| s.arrays.retain(|(n, _)| n != "residual.values")),
        ),
        (
            "unknown array",
            forge(&|s| {
                s.arrays
                    .push(("extra".into(), Array::from_slice(&[1.0f32], &[1])))
            }),
        ),
        (
            "packed as floats",
            forge(&|s| {
                let (_, a) = s
                    .arrays
                    .iter_mut()
                    .find(|(n, _)| n == "keys.packed")
                    .unwrap();
                *a = a.as_dtype(Dtype::Float32).unwrap();
            }),
        ),
        (
            "short scales",
            forge(&|s| {
                let (_, a) = s
                    .arrays
                    .iter_mut()
                    .find(|(n, _)| n == "values.scales")
                    .unwrap();
                *a = a.split_at_indices(&[1], Some(2)).unwrap().remove(1);
            }),
        ),
        (
            "1-D residual",
            forge(&|s| {
                let (_, a) = s
                    .arrays
                    .iter_mut()
                    .find(|(n, _)| n == "residual.values")
                    .unwrap();
                *a = a.reshape(&[-1]).unwrap();
            }),
        ),
        (
            "3-D residual",
            forge(&|s| {
                let (_, a) = s
                    .arrays
                    .iter_mut()
                    .find(|(n, _)| n == "residual.keys")
                    .unwrap();
                *a = a.reshape(&[3, -1, 64]).unwrap();
            }),
        ),
    ];
    for (what, bytes) in cases {
        let err = from_bytes(&bytes, MODEL, &config, &HOST).unwrap_err();
        assert!(matches!(err, CacheFileError::Corrupt(_)), "{what}: {err}");
    }
    // More layers claimed than the file has tensors for.
    let two = encode(
        MODEL,
        &config,
        vec![state.clone(), state.clone()],
        &[],
        &BTreeMap::new(),
    )
    .unwrap();
    assert!(from_bytes(&two, MODEL, &config, &HOST).is_ok());
}

#[test]
fn refuses_random_bytes() {
    let config = CacheConfig::Full;
    let mut rng = XorShift::new(2);
    let mut inputs: Vec<Vec<u8>> = vec![vec![], b"hello".to_vec(), vec![0xff; 8], vec![0; 64]];
    for len in [9, 40, 300] {
        inputs.push((0..len).map(|_| rng.next_u64() as u8).collect());
    }
    // A valid length prefix followed by junk JSON.
    let mut junk = 16u64.to_le_bytes().to_vec();
    junk.extend(b"{\"a\":{\"dtype\":1}");
    inputs.push(junk);
    for input in inputs {
        assert!(from_bytes(&input, MODEL, &config, &HOST).is_err());
        assert!(read_header(&input).is_err());
    }
}
