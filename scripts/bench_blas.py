"""Times MLX float32 matmuls on the CPU at the shapes SmolLM2 decode and prefill use.

Run twice to compare MLX's bundled reference BLAS with the system OpenBLAS that the
project's binaries link (see scripts/mlx-sys/README.md):
    scripts/bench-blas.sh
"""
import time

import mlx.core as mx

mx.set_default_device(mx.cpu)


def bench(m: int, k: int, n: int, reps: int) -> float:
    a = mx.random.normal((m, k))
    b = mx.random.normal((k, n))
    mx.eval(a, b)
    mx.eval(a @ b)
    start = time.perf_counter()
    for _ in range(reps):
        mx.eval(a @ b)
    return (time.perf_counter() - start) / reps


SHAPES = {
    "decode  1x576 @ 576x1536": ((1, 576, 1536), 200),
    "lm head 1x576 @ 576x49152": ((1, 576, 49152), 20),
    "prefill 512x576 @ 576x1536": ((512, 576, 1536), 10),
}
for name, (shape, reps) in SHAPES.items():
    print(f"{name}: {bench(*shape, reps) * 1e3:9.3f} ms")
