//! Where and how the model runs: the one place where the engine's numerics depend on the
//! platform.
//!
//! A [`Backend`] is chosen when a model loads and passed to the model and its caches;
//! nothing else (no environment variable, no `cfg!(target_os)`) chooses kernels, devices
//! or dtypes. It names:
//!
//! - the kernels: the plain-Rust host kernels ([`Kernels::Host`]: CPU only, float32
//!   compute) or MLX operations ([`Kernels::Mlx`]), the path a Mac runs;
//! - the device MLX's operations run on: the CPU or the GPU (Metal on a Mac, CUDA with
//!   MLX's CUDA build);
//! - the compute dtype of activations, dense weights and quantization scales; the KV
//!   cache's scales, zeros and residual window are stored in [`Backend::storage_dtype`].
//!
//! Written as `host`, `host-f32`, `mlx-cpu-f32`, `mlx-cpu-f16`, `mlx-gpu-f16`,
//! `mlx-gpu-bf16`, ... ([`FromStr`], [`fmt::Display`]). The default
//! ([`Backend::platform_default`]) is MLX on the GPU in float16 on Apple silicon, and the
//! host kernels elsewhere. `KIVI_BACKEND` sets it for a process ([`Backend::chosen`]), so
//! that a test suite can run on another backend.

use std::fmt;
use std::str::FromStr;

use mlx_rs::Dtype;
use serde::{Deserialize, Serialize};

pub use kivi_kernels::qmatmul::Activations;
pub use kivi_kernels::Kernels;

/// OpenBLAS's kernel choice and thread spin, for executables to correct first thing in
/// `main` ([`openblas::prepare`]).
pub use kivi_kernels::host::openblas;

/// The environment variable [`Backend::chosen`] reads.
pub const BACKEND_ENV: &str = "KIVI_BACKEND";

/// Where MLX's operations run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// MLX's CPU back end.
    Cpu,
    /// The GPU: Metal on a Mac, CUDA with MLX's CUDA build.
    Gpu,
}

/// The dtype a model computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// float32.
    F32,
    /// float16, a Mac's default.
    F16,
    /// bfloat16.
    Bf16,
}

impl Precision {
    /// The MLX dtype.
    pub fn dtype(self) -> Dtype {
        match self {
            Precision::F32 => Dtype::Float32,
            Precision::F16 => Dtype::Float16,
            Precision::Bf16 => Dtype::Bfloat16,
        }
    }

    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::F32 => 4,
            Precision::F16 | Precision::Bf16 => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        }
    }

    fn long_name(self) -> &'static str {
        match self {
            Precision::F32 => "float32",
            Precision::F16 => "float16",
            Precision::Bf16 => "bfloat16",
        }
    }
}

/// Why a backend cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The text names no backend.
    #[error(
        "unknown backend {0:?}: use host, host-f32, or mlx-cpu or mlx-gpu, optionally with \
         -f32, -f16 or -bf16 (for example mlx-gpu-f16)"
    )]
    Unknown(String),
    /// A combination the kernels cannot run.
    #[error("{0}")]
    Unsupported(String),
    /// The device is not there in this build or on this machine.
    #[error("{0}")]
    Unavailable(String),
}

/// Where and how the model runs. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Backend {
    kernels: Kernels,
    device: Device,
    compute: Precision,
    /// How the host kernels' quantized products take their inputs; float with MLX's
    /// operations, which never read it.
    activations: Activations,
}

/// Positions from which MLX's CPU back end multiplies a quantized matrix densely
/// (dequantize, then matmul) rather than with `quantized_matmul`.
///
/// MLX's CPU back end has no blocked quantized GEMM, so its `quantized_matmul` cost grows
/// linearly with the rows: measured here, a 256-token prefill chunk through a 576x1536
/// 4-bit matrix takes 270 ms with `quantized_matmul` and 37 ms as dequantize + (OpenBLAS)
/// sgemm, while one decode row is faster quantized (1.3 ms against 6.9 ms, dequantizing
/// dominates); they cross at about 6 rows. (The host backend makes the same choice in its
/// own kernels, `kivi_kernels::qmatmul::DENSE_MIN_ROWS`.)
const MLX_DENSE_MIN_ROWS: usize = 8;

impl Backend {
    /// The host kernels on the CPU in float32 (KV scales, zeros and window in float16),
    /// their quantized products over int8 inputs ([`Backend::host_activations`]).
    pub const HOST: Backend = Backend {
        kernels: Kernels::Host,
        device: Device::Cpu,
        compute: Precision::F32,
        activations: Activations::Int8,
    };

    /// [`Backend::HOST`] with float32 inputs to its quantized products (`host-f32`): the
    /// engine's logits are then mlx-lm's, which the reference tests check to 1e-2.
    pub const HOST_F32: Backend = Backend {
        activations: Activations::Float,
        ..Backend::HOST
    };

    /// MLX operations on `device` in `compute`.
    pub const fn mlx(device: Device, compute: Precision) -> Backend {
        Backend {
            kernels: Kernels::Mlx,
            device,
            compute,
            activations: Activations::Float,
        }
    }

    /// The default of this platform: MLX on the GPU in float16 on Apple silicon (Metal),
    /// the host kernels on the CPU elsewhere (MLX's CPU back end emulates float16 on x86
    /// and runs its quantized kernels as scalar loops; see `MLX_DENSE_MIN_ROWS`).
    pub fn platform_default() -> Backend {
        if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
            Backend::mlx(Device::Gpu, Precision::F16)
        } else {
            Backend::HOST
        }
    }

    /// The backend `KIVI_BACKEND` names, or the platform's default when it is unset or
    /// empty.
    pub fn chosen() -> Result<Backend, BackendError> {
        match std::env::var(BACKEND_ENV) {
            Ok(text) if !text.trim().is_empty() => text.parse(),
            _ => Ok(Backend::platform_default()),
        }
    }

    /// Which kernels run, and so which runtime (`crate::runtime::chosen`): on the host
    /// backends the model's operations run on host memory, decode steps and prompt chunks
    /// alike, rather than as MLX operations (a prompt chunk through MLX's CPU back end took
    /// 1.3-1.5x as long, mostly in MLX's dequantization of the weights and its scalar
    /// `exp`, `docs/benchmarks.md`).
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// Where MLX's operations run.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The compute precision.
    pub fn precision(&self) -> Precision {
        self.compute
    }

    /// The dtype activations, dense weights and quantization scales are kept in.
    pub fn compute_dtype(&self) -> Dtype {
        self.compute.dtype()
    }

    /// The dtype a KIVI cache keeps its scales, zeros and residual window in, and the host
    /// backend its full cache: float16 when the model computes in float32 (a float32
    /// window and float32 scales would hold a K2V2 cache 3.8x smaller than float16 instead
    /// of 5.2x, and a float32 full cache is twice the bytes every decode step reads),
    /// otherwise the compute dtype. Keys and values of these models stay well inside
    /// float16's range.
    pub fn storage_dtype(&self) -> Dtype {
        match self.compute {
            Precision::F32 => Dtype::Float16,
            other => other.dtype(),
        }
    }

    /// The dtype a full-precision cache keeps its keys and values in: the storage dtype
    /// with the host kernels (their decode loop converts float16 as it reads), the compute
    /// dtype with MLX's operations, whose fused attention reads its inputs' dtype (a
    /// float16 cache under float32 compute would be converted in full at every step).
    pub fn full_cache_dtype(&self) -> Dtype {
        match self.kernels {
            Kernels::Host => self.storage_dtype(),
            Kernels::Mlx => self.compute_dtype(),
        }
    }

    /// How the host kernels' quantized products take their inputs: quantized to int8 per
    /// block of 32 on `host`, as llama.cpp's CPU products do, so that a block of codes is
    /// one integer dot product (VNNI or AVX2); in float32 on `host-f32`. Int8 inputs make a
    /// SmolLM2 decode step about 1.1x faster on a 2-core x86 CPU, move its perplexity by
    /// less than 0.1% and its logits from mlx-lm's by up to 0.25 (`docs/benchmarks.md`).
    /// The output head takes float32 inputs either way (`Llama::logits`).
    pub fn host_activations(&self) -> Activations {
        self.activations
    }

    /// Whether MLX multiplies a quantized matrix by `rows` rows densely (dequantize, then
    /// matmul) rather than with `quantized_matmul`: on MLX's CPU back end for prompt chunks
    /// (see `MLX_DENSE_MIN_ROWS`); never on the GPU, whose quantized kernels are fast at any
    /// size.
    pub fn dequantize_for_matmul(&self, rows: usize) -> bool {
        self.device == Device::Cpu && rows >= MLX_DENSE_MIN_ROWS
    }

    /// Whether the GPU-stream guard ([`crate::gpu_rules`]) checks the arrays the model and
    /// its caches make: in debug builds (every test run) and on the GPU.
    pub fn guarded(&self) -> bool {
        cfg!(debug_assertions) || self.device == Device::Gpu
    }

    /// MLX's device for this backend.
    pub fn mlx_device(&self) -> mlx_rs::Device {
        match self.device {
            Device::Cpu => mlx_rs::Device::cpu(),
            Device::Gpu => mlx_rs::Device::gpu(),
        }
    }

    /// Whether this process can run the backend: a GPU backend needs MLX with Metal or
    /// CUDA and a device.
    pub fn check_available(&self) -> Result<(), BackendError> {
        if self.device == Device::Gpu && !gpu_available() {
            return Err(BackendError::Unavailable(format!(
                "the backend {self} needs a GPU, but this build of MLX has none (the Linux \
                 wheel mlx[cpu] runs on the CPU only): choose host or mlx-cpu, or install \
                 MLX with Metal (macOS) or CUDA"
            )));
        }
        Ok(())
    }

    /// Checks that the backend is available ([`Backend::check_available`]) and makes its
    /// device MLX's default, so that every operation the model and its caches build runs
    /// there. Called when a model loads.
    pub fn activate(&self) -> Result<(), BackendError> {
        self.check_available()?;
        mlx_rs::Device::set_default(&self.mlx_device());
        Ok(())
    }

    /// Runs `f` with this backend's device as MLX's default for the operations it builds on
    /// this thread. [`Backend::activate`] sets the process's default when a model loads;
    /// the model's forward pass is scoped as well, so that models on two backends in one
    /// process (the tests compare them) each run where they were loaded for.
    pub fn scoped<T>(&self, f: impl FnOnce() -> T) -> T {
        match mlx_rs::Stream::try_default_on_device(&self.mlx_device()) {
            Ok(stream) => mlx_rs::with_stream(&stream, f),
            // A device MLX lacks: `activate` refused it when the model loaded.
            Err(_) => f(),
        }
    }

    /// A sentence for people: "MLX on the GPU, float16".
    pub fn description(&self) -> String {
        let storage = if self.storage_dtype() == self.compute_dtype() {
            String::new()
        } else {
            " (KV cache in float16)".to_string()
        };
        match self.kernels {
            Kernels::Host => {
                let inputs = match self.host_activations() {
                    Activations::Float => "",
                    Activations::Int8 => ", int8 inputs to quantized products",
                };
                format!("host kernels on the CPU, float32{storage}{inputs}")
            }
            Kernels::Mlx => format!(
                "MLX on the {}, {}{storage}",
                match self.device {
                    Device::Cpu => "CPU",
                    Device::Gpu => "GPU",
                },
                self.compute.long_name()
            ),
        }
    }
}

impl Default for Backend {
    fn default() -> Self {
        Backend::platform_default()
    }
}

/// Hands the buffers MLX keeps for reuse back to the system. Between prompt chunks (as
/// mlx-lm does): a growing KIVI history frees an array of the previous length at each
/// flush, and the allocator's cache of such buffers would otherwise grow with the context.
pub(crate) fn release_freed_buffers() {
    // SAFETY: no arguments; MLX's allocator frees only buffers no array holds.
    unsafe { mlx_sys::mlx_clear_cache() };
}

/// Whether MLX can run on a GPU here (Metal or CUDA).
fn gpu_available() -> bool {
    let (mut metal, mut cuda) = (false, false);
    // SAFETY: each call writes one bool through a valid pointer.
    let metal_ok = unsafe { mlx_sys::mlx_metal_is_available(&mut metal) } == 0;
    let cuda_ok = unsafe { mlx_sys::mlx_cuda_is_available(&mut cuda) } == 0;
    (metal_ok && metal) || (cuda_ok && cuda)
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kernels, self.device) {
            (Kernels::Host, _) => match self.activations {
                Activations::Int8 => f.write_str("host"),
                Activations::Float => f.write_str("host-f32"),
            },
            (Kernels::Mlx, Device::Cpu) => write!(f, "mlx-cpu-{}", self.compute.name()),
            (Kernels::Mlx, Device::Gpu) => write!(f, "mlx-gpu-{}", self.compute.name()),
        }
    }
}

impl FromStr for Backend {
    type Err = BackendError;

    /// `host` (int8 inputs to quantized products) or `host-f32` (float32 throughout);
    /// `mlx-cpu` (float32) or `mlx-gpu` (float16), each optionally with `-f32`, `-f16` or
    /// `-bf16`.
    fn from_str(s: &str) -> Result<Self, BackendError> {
        let text = s.trim().to_ascii_lowercase();
        let unknown = || BackendError::Unknown(s.trim().to_string());
        let (base, precision) = match text.rsplit_once('-') {
            Some((base, p @ ("f32" | "f16" | "bf16"))) => (base, Some(p)),
            _ => (text.as_str(), None),
        };
        let precision = precision.map(|p| match p {
            "f32" => Precision::F32,
            "f16" => Precision::F16,
            _ => Precision::Bf16,
        });
        match base {
            "host" => match precision {
                None => Ok(Backend::HOST),
                Some(Precision::F32) => Ok(Backend::HOST_F32),
                Some(other) => Err(BackendError::Unsupported(format!(
                    "the host kernels compute in float32, not {}: use host, or mlx-cpu-{} for \
                     MLX's operations in {} on the CPU",
                    other.long_name(),
                    other.name(),
                    other.long_name()
                ))),
            },
            "mlx-cpu" => Ok(Backend::mlx(
                Device::Cpu,
                precision.unwrap_or(Precision::F32),
            )),
            "mlx-gpu" => Ok(Backend::mlx(
                Device::Gpu,
                precision.unwrap_or(Precision::F16),
            )),
            _ => Err(unknown()),
        }
    }
}

impl Serialize for Backend {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Backend {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_defaults_fill_in() {
        for name in [
            "host",
            "host-f32",
            "mlx-cpu-f32",
            "mlx-cpu-f16",
            "mlx-cpu-bf16",
            "mlx-gpu-f16",
            "mlx-gpu-f32",
        ] {
            let backend: Backend = name.parse().unwrap();
            assert_eq!(backend.to_string(), name);
            let json = serde_json::to_string(&backend).unwrap();
            assert_eq!(serde_json::from_str::<Backend>(&json).unwrap(), backend);
        }
        assert_eq!("host-f32".parse::<Backend>().unwrap(), Backend::HOST_F32);
        assert_eq!(Backend::HOST.host_activations(), Activations::Int8);
        assert_eq!(Backend::HOST_F32.host_activations(), Activations::Float);
        assert_eq!(
            " MLX-CPU ".parse::<Backend>().unwrap(),
            Backend::mlx(Device::Cpu, Precision::F32)
        );
        assert_eq!(
            "mlx-gpu".parse::<Backend>().unwrap(),
            Backend::mlx(Device::Gpu, Precision::F16)
        );
        for bad in ["", "metal", "mlx", "mlx-cpu-f64", "cuda-f16"] {
            assert!(
                matches!(bad.parse::<Backend>(), Err(BackendError::Unknown(_))),
                "{bad}"
            );
        }
        let err = "host-f16".parse::<Backend>().unwrap_err().to_string();
        assert!(err.contains("mlx-cpu-f16"), "{err}");
    }

    #[test]
    fn dtypes_and_paths_follow_the_backend() {
        let host = Backend::HOST;
        assert_eq!(host.compute_dtype(), Dtype::Float32);
        assert_eq!(host.storage_dtype(), Dtype::Float16);
        assert_eq!(host.kernels(), Kernels::Host);
        assert!(host.dequantize_for_matmul(256) && !host.dequantize_for_matmul(1));
        let mac = Backend::mlx(Device::Gpu, Precision::F16);
        assert_eq!(mac.storage_dtype(), Dtype::Float16);
        assert!(mac.kernels() == Kernels::Mlx && !mac.dequantize_for_matmul(4096));
        let cpu16 = Backend::mlx(Device::Cpu, Precision::F16);
        assert!(cpu16.kernels() == Kernels::Mlx && cpu16.dequantize_for_matmul(8));
        assert_eq!(
            Backend::mlx(Device::Cpu, Precision::Bf16).storage_dtype(),
            Dtype::Bfloat16
        );
        assert_eq!(mac.description(), "MLX on the GPU, float16");
        assert_eq!(
            host.description(),
            "host kernels on the CPU, float32 (KV cache in float16), int8 inputs to \
             quantized products"
        );
        assert_eq!(
            Backend::HOST_F32.description(),
            "host kernels on the CPU, float32 (KV cache in float16)"
        );
    }

    #[test]
    fn a_gpu_backend_without_a_gpu_is_refused_with_a_way_out() {
        if gpu_available() {
            return;
        }
        let err = Backend::mlx(Device::Gpu, Precision::F16)
            .activate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mlx-gpu-f16") && err.contains("mlx-cpu"),
            "{err}"
        );
    }
}
