//! A model's memory needs, estimated from its file sizes before it is downloaded, so the app
//! can flag models that will not fit in RAM.
//!
//! MLX keeps weights in their stored format (a 4-bit checkpoint stays 4-bit), so the weight
//! files' size is the weights' size in memory. On top come activations, temporary buffers,
//! the runtime and a KV cache of moderate length: a fixed part plus a share of the weights.
//! It is an estimate for a warning, not a guarantee.

use serde::Serialize;

/// Fixed cost of a loaded model: runtime, tokenizer, a few thousand tokens of KV cache.
pub const BASE_OVERHEAD_BYTES: u64 = 512 * 1024 * 1024;
/// Activations and temporaries, as a share of the weights (1/10).
pub const OVERHEAD_DIVISOR: u64 = 10;

const WEIGHT_EXTENSIONS: &[&str] = &[".safetensors", ".gguf", ".bin", ".pth", ".pt", ".npz"];

/// Estimated memory for running a model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryEstimate {
    /// Bytes of weight files.
    pub weights_bytes: u64,
    /// Runtime, activations and cache on top of the weights.
    pub overhead_bytes: u64,
    /// `weights_bytes + overhead_bytes`.
    pub total_bytes: u64,
}

/// How an estimate compares with this machine's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryFit {
    /// Fits in the memory free right now.
    Fits,
    /// Fits in RAM, but only if other programs give memory back (expect swapping).
    Tight,
    /// Larger than the machine's RAM: it will not run well, if at all.
    TooLarge,
}

/// An estimate checked against the machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryCheck {
    /// The estimate.
    pub estimate: MemoryEstimate,
    /// Physical memory of the machine.
    pub total_ram: u64,
    /// Memory free for new allocations now.
    pub available_ram: u64,
    /// The verdict.
    pub fit: MemoryFit,
}

impl MemoryEstimate {
    /// Estimates from `(file name, size)` pairs; only weight files count
    /// (`.safetensors`, `.gguf`, `.bin`, `.pth`, `.pt`, `.npz`).
    pub fn from_files<'a>(files: impl IntoIterator<Item = (&'a str, u64)>) -> Self {
        let weights_bytes = files
            .into_iter()
            .filter(|(name, _)| WEIGHT_EXTENSIONS.iter().any(|ext| name.ends_with(ext)))
            .map(|(_, size)| size)
            .sum();
        Self::from_weights(weights_bytes)
    }

    /// Estimates from the total size of the weights.
    pub fn from_weights(weights_bytes: u64) -> Self {
        let overhead_bytes = BASE_OVERHEAD_BYTES + weights_bytes / OVERHEAD_DIVISOR;
        MemoryEstimate {
            weights_bytes,
            overhead_bytes,
            total_bytes: weights_bytes + overhead_bytes,
        }
    }

    /// The verdict for a machine with `total_ram` bytes, `available_ram` of them free.
    pub fn fit(&self, total_ram: u64, available_ram: u64) -> MemoryFit {
        if self.total_bytes > total_ram {
            MemoryFit::TooLarge
        } else if self.total_bytes > available_ram {
            MemoryFit::Tight
        } else {
            MemoryFit::Fits
        }
    }

    /// Checks the estimate against this machine's memory (via `sysinfo`).
    pub fn check(&self) -> MemoryCheck {
        let mut system = sysinfo::System::new();
        system.refresh_memory();
        let (total_ram, available_ram) = (system.total_memory(), system.available_memory());
        MemoryCheck {
            estimate: self.clone(),
            total_ram,
            available_ram,
            fit: self.fit(total_ram, available_ram),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1024 * 1024 * 1024;

    #[test]
    fn counts_only_weights() {
        let e = MemoryEstimate::from_files([
            ("config.json", 1000),
            ("tokenizer.json", 5_000_000),
            ("model-00001-of-00002.safetensors", 2 * GIB),
            ("model-00002-of-00002.safetensors", GIB),
        ]);
        assert_eq!(e.weights_bytes, 3 * GIB);
        assert_eq!(e.total_bytes, 3 * GIB + BASE_OVERHEAD_BYTES + 3 * GIB / 10);
    }

    #[test]
    fn verdicts() {
        let e = MemoryEstimate::from_weights(4 * GIB);
        assert_eq!(e.fit(16 * GIB, 12 * GIB), MemoryFit::Fits);
        assert_eq!(e.fit(16 * GIB, 2 * GIB), MemoryFit::Tight);
        assert_eq!(e.fit(4 * GIB, 4 * GIB), MemoryFit::TooLarge);
    }

    #[test]
    fn reads_this_machine() {
        let c = MemoryEstimate::from_weights(1).check();
        assert!(c.total_ram > 0);
        assert!(c.available_ram <= c.total_ram);
    }
}
