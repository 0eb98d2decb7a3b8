//! A prompt fed in any chunks through the tiny Mistral (engine/tests/fixtures) with any
//! cache setting, on either runtime: every chunking runs, every cache then holds every
//! token, and the last position's logits agree with the prompt fed whole (as
//! `engine/tests/prompt_chunks.rs` states the bounds: rounding alone before the first
//! flush, what reading quantized groups changes after it).
//!
//! The input chooses the runtime, the setting (bit widths, group, residual, sinks,
//! rotation, key grouping), and the chunk lengths; the tokens follow from it.

#![no_main]

use std::cell::RefCell;
use std::path::Path;

use kivi_engine::backend::{Backend, Device, Precision};
use kivi_engine::cache::{CacheConfig, KvCache};
use kivi_engine::loader::{load_local, LoadedModel};
use libfuzzer_sys::fuzz_target;

const RUNTIMES: [Backend; 2] = [Backend::HOST, Backend::mlx(Device::Cpu, Precision::F32)];

thread_local! {
    static MODELS: RefCell<Vec<Option<LoadedModel>>> = RefCell::new(vec![None, None]);
}

/// The bytes, read one at a time (zeros once they run out).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[self.byte() as usize % options.len()]
    }
}

/// A cache setting named as the engine parses it.
fn setting(input: &mut Input<'_>) -> CacheConfig {
    if input.byte() % 8 == 0 {
        return CacheConfig::Full;
    }
    let bits = input.pick(&[(4, 2), (2, 2), (4, 4), (2, 4)]);
    let group = input.pick(&[32, 64]);
    let residual = group * input.pick(&[0, 1, 2]);
    let sinks = input.pick(&["", "-s4", "-s16", "-s1"]);
    let rotation = input.pick(&["", "-rot", "-rotk", "-rotv", "-rota"]);
    let axis = input.pick(&["", "", "", "-per-token"]);
    let name = format!(
        "k{}v{}-g{group}-r{residual}{sinks}{rotation}{axis}",
        bits.0, bits.1
    );
    name.parse().unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn logits_after(
    model: &LoadedModel,
    config: CacheConfig,
    pieces: &[&[u32]],
    total: usize,
) -> Vec<f32> {
    let mut caches: Vec<Box<dyn KvCache>> =
        config.make_layers(model.model.config(), model.model.backend());
    let mut hidden = None;
    for piece in pieces {
        hidden = Some(
            model
                .model
                .forward(piece, &mut caches)
                .unwrap_or_else(|e| panic!("{config}: pieces {:?}: {e}", lens(pieces))),
        );
    }
    for cache in &caches {
        assert_eq!(cache.len(), total, "{config}: pieces {:?}", lens(pieces));
    }
    let logits = model.model.last_logits(&hidden.expect("a piece")).unwrap();
    logits.eval().unwrap();
    logits.as_slice::<f32>().to_vec()
}

fn lens(pieces: &[&[u32]]) -> Vec<usize> {
    pieces.iter().map(|p| p.len()).collect()
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let runtime = input.byte() as usize % RUNTIMES.len();
    let config = setting(&mut input);
    let total = 1 + input.byte() as usize % 120;
    let tokens: Vec<u32> = (0..total)
        .map(|i| (i as u32 * 37 + u32::from(data.len() as u8)) % 251)
        .collect();
    let mut pieces: Vec<&[u32]> = Vec::new();
    let mut start = 0;
    while start < total {
        let len = (1 + input.byte() as usize % 16).min(total - start);
        pieces.push(&tokens[start..start + len]);
        start += len;
    }
    MODELS.with(|models| {
        let mut models = models.borrow_mut();
        let model = models[runtime].get_or_insert_with(|| {
            let dir =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures/tiny-mistral");
            load_local(&dir, RUNTIMES[runtime]).expect("the tiny Mistral loads")
        });
        let got = logits_after(model, config, &pieces, total);
        let want = logits_after(model, config, &[&tokens], total);
        assert!(got.iter().all(|x| x.is_finite()), "{config}: {got:?}");
        // Relative to the logits' spread, as in engine/tests/prompt_chunks.rs.
        let spread = want.iter().copied().fold(f32::NEG_INFINITY, f32::max)
            - want.iter().copied().fold(f32::INFINITY, f32::min);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max)
            / spread.max(f32::MIN_POSITIVE);
        let bound = match config {
            CacheConfig::Kivi(k) if total > k.sinks() + k.residual_length() + k.group_size() => {
                if k.key_bits().min(k.value_bits()) == 2 {
                    0.5
                } else {
                    0.2
                }
            }
            _ => 2e-2,
        };
        assert!(
            worst <= bound,
            "{config} on {}: pieces {:?}: logits differ from the prompt fed whole by {worst:.2e} \
             of their spread",
            RUNTIMES[runtime],
            lens(&pieces)
        );
    });
});
