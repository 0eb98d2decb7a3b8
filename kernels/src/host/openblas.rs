//! OpenBLAS's kernel choice, corrected where it fell back to SSE3 code on a newer CPU, and
//! its threads' spinning, cut short ([`prepare`] does both, first thing in `main`).
//!
//! A `DYNAMIC_ARCH` OpenBLAS (Debian's) picks its kernels once, when the library loads,
//! from the CPU's family and model numbers. A CPU newer than the build gets its generic
//! fallback: Debian's 0.3.21 does not know family 6 model 207 (5th-generation Xeon,
//! which this project's CI machines are) and runs the SSE3 "Prescott" kernels there,
//! although the CPU has AVX-512. Every BLAS product then runs at a fraction of its speed:
//! prefill, whose attention and MLX's float32 matmuls are `sgemm`, took 1.57x as long at
//! 4k tokens (`kivi bench --contexts 4k`: 76.8 vs 120.9 tok/s).
//!
//! OpenBLAS reads `OPENBLAS_CORETYPE` in `gotoblas_dynamic_init`, and exports that
//! function and `gotoblas_dynamic_quit` (which only forgets the choice), so the choice
//! can be made again from the CPU's features. The functions are looked up at run time,
//! as `cblas_sgemm` is ([`super::blas`]): where the process has another BLAS
//! (Accelerate on macOS, a reference BLAS), nothing happens. A core the user names in
//! `OPENBLAS_CORETYPE` is kept.

use std::ffi::{c_char, c_void, CStr};

use super::blas::symbol;

/// Cores without AVX2 and FMA: OpenBLAS's choices for CPUs it does not recognise (and
/// for old ones). Anything else it picked is left alone.
const PRE_AVX2_CORES: [&str; 17] = [
    "Katmai",
    "Coppermine",
    "Northwood",
    "Prescott",
    "Banias",
    "Atom",
    "Core2",
    "Penryn",
    "Dunnington",
    "Nehalem",
    "Sandybridge",
    "Opteron",
    "Opteron_SSE3",
    "Barcelona",
    "Nano",
    "Bobcat",
    "Bulldozer",
];

/// Whether `core` is one of OpenBLAS's cores without AVX2 and FMA.
pub fn is_pre_avx2(core: &str) -> bool {
    PRE_AVX2_CORES.contains(&core)
}

/// A change of OpenBLAS's kernels made by [`select_core`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreChange {
    /// The core OpenBLAS chose when it loaded.
    pub from: String,
    /// The core it uses now.
    pub to: String,
}

/// The OpenBLAS core in use (`"Haswell"`, `"SkylakeX"`, ...), or `None` when the process
/// has no OpenBLAS.
pub fn core() -> Option<String> {
    type CoreName = unsafe extern "C" fn() -> *const c_char;
    let address = symbol(c"openblas_get_corename")?;
    // SAFETY: OpenBLAS's `char *openblas_get_corename(void)`, which returns a static,
    // NUL-terminated name.
    let name = unsafe { std::mem::transmute::<*mut c_void, CoreName>(address)() };
    // SAFETY: see above; a null pointer is checked first.
    (!name.is_null()).then(|| {
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    })
}

/// The core this CPU should run: `SkylakeX` with AVX-512 (F, CD, BW, DQ, VL), `Haswell`
/// with AVX2 and FMA, else `None`.
fn best_core() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512cd")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl")
        {
            return Some("SkylakeX");
        }
        if super::has_avx2() {
            return Some("Haswell");
        }
    }
    None
}

/// Makes OpenBLAS run the kernels this CPU supports when it fell back to pre-AVX2 ones,
/// and says what changed (`None`: no OpenBLAS, a core the user chose, or nothing better).
///
/// # Safety
/// Call it at the start of `main`, before any thread uses BLAS (MLX included) or reads
/// the environment: it sets `OPENBLAS_CORETYPE` and swaps the table of kernels that
/// every BLAS call reads.
pub unsafe fn select_core() -> Option<CoreChange> {
    if std::env::var_os("OPENBLAS_CORETYPE").is_some() {
        return None;
    }
    let from = core()?;
    let to = best_core()?;
    if !is_pre_avx2(&from) {
        return None;
    }
    let quit = symbol(c"gotoblas_dynamic_quit")?;
    let init = symbol(c"gotoblas_dynamic_init")?;
    type Void = unsafe extern "C" fn();
    std::env::set_var("OPENBLAS_CORETYPE", to);
    // SAFETY: both are OpenBLAS's `void f(void)`. `quit` only clears the table pointer
    // and `init` sets it again from `OPENBLAS_CORETYPE`; no BLAS call is running (the
    // caller's promise), and buffers are sized by a build constant, not by the core.
    unsafe {
        std::mem::transmute::<*mut c_void, Void>(quit)();
        std::mem::transmute::<*mut c_void, Void>(init)();
    }
    Some(CoreChange {
        from,
        to: core().unwrap_or_else(|| to.to_string()),
    })
}

/// OpenBLAS's threads wait for work after a product by spinning (each turn a
/// `sched_yield`) for `2^SPIN_LOG2` CPU cycles before they sleep. Its default, 2^28 (about
/// 0.1 s), kept both cores busy after every prompt: the first three to five decode steps
/// after a 512-token prefill took 20-23 ms against 7.5-8 ms for the rest (`kivi bench
/// --contexts 512 --decode-tokens 32`, K4V4, per-step times), because the decode step's
/// own threads shared the two cores with OpenBLAS's spinners, 60 ms lost per reply. 2^22
/// cycles (1-2 ms) still covers the gaps between the products of one prompt chunk.
const SPIN_LOG2: u32 = 22;

/// Makes OpenBLAS's threads spin for `2^`[`SPIN_LOG2`] cycles after a product instead of
/// its default 2^28, unless the user set `OPENBLAS_THREAD_TIMEOUT`; true when it did.
///
/// OpenBLAS reads that variable when it loads and applies it when it starts its threads,
/// which it does when it loads; so the variable is set, read again
/// (`openblas_read_env`), and the threads are stopped (`blas_thread_shutdown_`, as OpenBLAS
/// does before a `fork`) and started again (`blas_thread_init`). Nothing happens where
/// the process has no OpenBLAS or one without these functions.
///
/// # Safety
/// As [`select_core`]: at the start of `main`, before any other thread uses BLAS or reads
/// the environment.
pub unsafe fn shorten_thread_spin() -> bool {
    if std::env::var_os("OPENBLAS_THREAD_TIMEOUT").is_some() {
        return false;
    }
    let (Some(read_env), Some(stop), Some(start)) = (
        symbol(c"openblas_read_env"),
        symbol(c"blas_thread_shutdown_"),
        symbol(c"blas_thread_init"),
    ) else {
        return false;
    };
    type Void = unsafe extern "C" fn();
    type Status = unsafe extern "C" fn() -> i32;
    std::env::set_var("OPENBLAS_THREAD_TIMEOUT", SPIN_LOG2.to_string());
    // SAFETY: OpenBLAS's `void openblas_read_env(void)`, `int blas_thread_shutdown_(void)`
    // and `int blas_thread_init(void)`; no BLAS call is running (the caller's promise), so
    // the threads being stopped and started are idle.
    unsafe {
        std::mem::transmute::<*mut c_void, Void>(read_env)();
        std::mem::transmute::<*mut c_void, Status>(stop)();
        std::mem::transmute::<*mut c_void, Status>(start)();
    }
    true
}

/// The thread spin OpenBLAS will apply (`2^n` cycles), as it read it from the
/// environment; `None` without OpenBLAS, `Some(0)` for its built-in default.
pub fn thread_spin_log2() -> Option<i32> {
    type Get = unsafe extern "C" fn() -> i32;
    let address = symbol(c"openblas_thread_timeout")?;
    // SAFETY: OpenBLAS's `int openblas_thread_timeout(void)`, a read of a static.
    Some(unsafe { std::mem::transmute::<*mut c_void, Get>(address)() })
}

/// Everything this module corrects in OpenBLAS: [`select_core`], then
/// [`shorten_thread_spin`]. Returns the core change.
///
/// # Safety
/// As [`select_core`].
pub unsafe fn prepare() -> Option<CoreChange> {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        let change = select_core();
        shorten_thread_spin();
        change
    }
}
