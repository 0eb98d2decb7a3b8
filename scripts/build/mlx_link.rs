// Shared by the build scripts of every crate that links executables (binaries and tests);
// each includes this file. `cargo:rustc-link-arg` only reaches a package's own targets,
// so the mlx-sys overlay cannot do this for its dependents. It publishes:
// - DEP_MLX_RPATH: the folder of the wheel's libmlx.so, embedded as an rpath so that the
//   executables start without LD_LIBRARY_PATH;
// - DEP_MLX_BLAS / DEP_MLX_BLAS_DIR: when `openblas`, the executables depend on the system
//   OpenBLAS directly, which puts its sgemm ahead of the wheel's reference BLAS.
// Upstream mlx-sys (macOS) links MLX statically with Accelerate and publishes neither.
fn link_mlx() {
    for var in ["DEP_MLX_RPATH", "DEP_MLX_BLAS", "DEP_MLX_BLAS_DIR"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if let Ok(dir) = std::env::var("DEP_MLX_RPATH") {
        // First where the packages put the library (`make bundle`: /usr/bin/<app> and
        // /usr/lib/kivi-chat/mlx/lib), so an installed app uses its own copy; a build run
        // from `target/` has no such folder next to it and finds the wheel's.
        println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../lib/kivi-chat/mlx/lib");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    if std::env::var("DEP_MLX_BLAS").as_deref() == Ok("openblas") {
        let dir = std::env::var("DEP_MLX_BLAS_DIR").unwrap_or_default();
        println!("cargo:rustc-link-arg=-L{dir}");
        println!("cargo:rustc-link-arg=-Wl,--push-state,--no-as-needed,-lopenblas,--pop-state");
    }
}
