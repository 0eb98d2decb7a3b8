//! Build script for `mlx-sys` on Linux (the project's overlay; see scripts/mlx-sys/README.md).
//!
//! Upstream's script clones MLX with cmake and links Apple frameworks. Here MLX's C++
//! library comes from the `mlx`/`mlx-cpu` wheels in the project's virtual environment:
//! `mlx-c` is built against it with `MLX_C_USE_SYSTEM_MLX=ON`, `mlxc` is linked statically
//! and `libmlx.so` dynamically. Dependents that link executables read `DEP_MLX_RPATH` to
//! embed the library's folder, so binaries and tests run without `LD_LIBRARY_PATH`.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

#[path = "src/bindgen_config.rs"]
mod bindgen_config;

const MLX_C_ROOT: &str = "src/mlx-c";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=include");
    println!("cargo:rerun-if-changed=src/mach_time.c");
    println!("cargo:rerun-if-env-changed=MLX_PYTHON");
    println!("cargo:rerun-if-env-changed=KIVI_BLAS");

    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let include = manifest.join("include");
    let mlx = locate_mlx(&manifest);
    check_version(&mlx, &manifest.join(MLX_C_ROOT));

    let dst = build_mlx_c(&mlx, &include);
    cc::Build::new()
        .file("src/mach_time.c")
        .compile("kivi_mach_time");

    println!("cargo:rustc-link-search=native={}", dst.display());
    println!("cargo:rustc-link-lib=static=mlxc");
    println!("cargo:rustc-link-search=native={}", mlx.lib.display());
    link_blas();
    println!("cargo:rustc-link-lib=dylib=mlx");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rerun-if-changed={}", mlx.lib.join("libmlx.so").display());

    println!("cargo::metadata=rpath={}", mlx.lib.display());
    println!("cargo::metadata=include={}", mlx.include.display());
    println!("cargo::metadata=version={}", mlx.version);

    generate_bindings(&manifest.join(MLX_C_ROOT), &include);
}

/// Where the MLX wheel put its library, headers and version.
struct Mlx {
    prefix: PathBuf,
    lib: PathBuf,
    include: PathBuf,
    version: String,
}

/// Finds the MLX wheel through the project's virtual environment (or `MLX_PYTHON`).
fn locate_mlx(manifest: &Path) -> Mlx {
    let python = env::var_os("MLX_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            manifest
                .ancestors()
                .map(|dir| dir.join(".venv/bin/python"))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "mlx-sys: no Python with MLX found. Run `make setup` (or scripts/setup.sh) to \
                 create .venv with mlx[cpu], or set MLX_PYTHON to a Python that has it."
            )
        });
    let output = Command::new(&python)
        .args(["-m", "mlx", "--cmake-dir"])
        .output()
        .unwrap_or_else(|err| panic!("mlx-sys: cannot run {}: {err}", python.display()));
    if !output.status.success() {
        panic!(
            "mlx-sys: `{} -m mlx --cmake-dir` failed ({}). Install MLX with `make setup`.\n{}",
            python.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let prefix = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let include = prefix.join("include");
    let version_h = include.join("mlx/version.h");
    let header = fs::read_to_string(&version_h)
        .unwrap_or_else(|err| panic!("mlx-sys: cannot read {}: {err}", version_h.display()));
    let part = |name: &str| {
        header
            .lines()
            .find_map(|line| line.trim().strip_prefix(name)?.trim().parse::<u32>().ok())
            .unwrap_or_else(|| panic!("mlx-sys: {name} missing from {}", version_h.display()))
    };
    let version = format!(
        "{}.{}.{}",
        part("#define MLX_VERSION_MAJOR"),
        part("#define MLX_VERSION_MINOR"),
        part("#define MLX_VERSION_PATCH")
    );
    Mlx {
        lib: prefix.join("lib"),
        prefix,
        include,
        version,
    }
}

/// mlx-c is written against one MLX release; a different one compiles but misbehaves.
fn check_version(mlx: &Mlx, mlx_c_root: &Path) {
    let cmake = fs::read_to_string(mlx_c_root.join("CMakeLists.txt")).unwrap();
    let pinned = cmake
        .lines()
        .find_map(|line| line.trim().strip_prefix("GIT_TAG v"))
        .map(|tag| tag.trim_end_matches(')').trim().to_owned())
        .expect("mlx-sys: mlx-c's CMakeLists.txt names no MLX tag");
    if pinned != mlx.version {
        panic!(
            "mlx-sys: mlx-c {} expects MLX {pinned}, but the environment has MLX {} at {}. \
             Install the matching wheel: pip install 'mlx[cpu]=={pinned}' (make setup does this).",
            env::var("CARGO_PKG_VERSION").unwrap(),
            mlx.version,
            mlx.prefix.display()
        );
    }
}

/// Builds the static `mlxc` library against the wheel; returns the folder holding it.
fn build_mlx_c(mlx: &Mlx, include: &Path) -> PathBuf {
    let force_include = format!(
        "-include {} -include {}",
        include.join("kivi_mlx_half.h").display(),
        include.join("kivi_std_format.hpp").display()
    );
    let dst = cmake::Config::new(MLX_C_ROOT)
        .define("MLX_C_USE_SYSTEM_MLX", "ON")
        .define("MLX_C_BUILD_EXAMPLES", "OFF")
        .define("BUILD_SHARED_LIBS", "OFF")
        .define("CMAKE_PREFIX_PATH", &mlx.prefix)
        // The wrappers are thin; an optimized build costs little and debug builds
        // of dependents stay fast.
        .profile("Release")
        .cxxflag(force_include)
        .build_target("mlxc")
        .build();
    dst.join("build")
}

/// Routes MLX's BLAS calls to the system OpenBLAS when it is installed.
///
/// The wheel's `libmlx.so` depends on a bundled reference BLAS, which is much slower at
/// sgemm. An executable that itself depends on `libopenblas.so` puts OpenBLAS ahead of
/// the bundled library in the dynamic linker's search order, so `cblas_sgemm` and friends
/// resolve there. `KIVI_BLAS=bundled` keeps the wheel's BLAS (for comparison).
fn link_blas() {
    let wanted = env::var("KIVI_BLAS").unwrap_or_else(|_| "openblas".into());
    match wanted.as_str() {
        "bundled" => println!("cargo::metadata=blas=bundled"),
        "openblas" => {
            let found = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"]
                .iter()
                .map(Path::new)
                .find(|dir| dir.join("libopenblas.so").exists());
            match found {
                Some(dir) => {
                    // Nothing in Rust calls OpenBLAS, so a plain `rustc-link-lib` would be
                    // dropped by --as-needed; dependents' build scripts add it to their
                    // executables with --no-as-needed (scripts/build/mlx_link.rs).
                    println!("cargo::metadata=blas=openblas");
                    println!("cargo::metadata=blas_dir={}", dir.display());
                }
                None => {
                    println!(
                        "cargo:warning=libopenblas-dev is not installed; MLX uses the wheel's \
                         slower reference BLAS (run make setup)"
                    );
                    println!("cargo::metadata=blas=bundled");
                }
            }
        }
        other => panic!("mlx-sys: KIVI_BLAS must be `openblas` or `bundled`, not `{other}`"),
    }
}

fn generate_bindings(mlx_c_root: &Path, include: &Path) {
    let headers =
        bindgen_config::discover_headers(mlx_c_root).expect("Unable to discover mlx-c headers");
    for header in &headers {
        let relative = bindgen_config::relative_header(mlx_c_root, header)
            .expect("Unable to record an mlx-c header");
        println!("cargo:rerun-if-changed={}", mlx_c_root.join(relative).display());
    }
    let bindings = bindgen_config::builder(mlx_c_root, &headers)
        .clang_arg(format!("-include{}", include.join("kivi_mlx_half.h").display()))
        // On ARM bindgen renders `__fp16` as a one-field tuple struct, which mlx-rs
        // unwraps with `.0`; match that shape (bfloat16_t stays a plain u16 there too).
        .new_type_alias("float16_t")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .parse_callbacks(Box::new(DefaultFloat16))
        .generate()
        .expect("Unable to generate mlx-c bindings");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("Unable to write mlx-c bindings");
}

/// mlx-rs zero-initializes a `float16_t` before reading a scalar into it.
#[derive(Debug)]
struct DefaultFloat16;

impl bindgen::callbacks::ParseCallbacks for DefaultFloat16 {
    fn add_derives(&self, info: &bindgen::callbacks::DeriveInfo<'_>) -> Vec<String> {
        if info.name == "float16_t" {
            vec!["Default".into()]
        } else {
            vec![]
        }
    }
}
