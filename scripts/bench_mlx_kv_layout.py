"""Why the KIVI cache's MLX arrays are exact-size rather than preallocated buffers.

Times, on MLX's CPU at SmolLM2's decode shapes (3 KV heads, head_dim 64, 3 query rows per
KV head, group 32):
- a decode step's two quantized products over the history (`q @ K` with per-channel keys
  `[B, H, D, T]` grouped along T, `w @ V` with values `[B, H, T, D]` grouped along D) on
  exact-size arrays against views of buffers with 256 tokens of headroom (what an
  in-place cache would hand MLX);
- growing the history by one group (a concatenation, once per G tokens);
- growing the residual window by one token: concatenated against written in place.

Every figure is the minimum over rounds of a mean over repeats, the variants interleaved:
    .venv/bin/python scripts/bench_mlx_kv_layout.py
"""
import time

import mlx.core as mx

mx.set_default_device(mx.cpu)

B, H, D, G, ROWS = 1, 3, 64, 32, 3
ROUNDS, REPEATS = 3, 300


def per_call_ms(f) -> float:
    mx.eval(f())
    start = time.perf_counter()
    for _ in range(REPEATS):
        mx.eval(f())
    return (time.perf_counter() - start) / REPEATS * 1e3


def interleaved(variants: dict) -> dict:
    times = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, f in variants.items():
            times[name].append(per_call_ms(f))
    return {name: min(t) for name, t in times.items()}


def history(bits: int, tokens: int) -> None:
    capacity = tokens + 256
    keys = mx.quantize(mx.random.normal((B, H, D, capacity)), group_size=G, bits=bits)
    values = mx.quantize(mx.random.normal((B, H, capacity, D)), group_size=G, bits=bits)
    packed, groups = tokens * bits // 32, tokens // G

    def key_view():
        return [keys[0][..., :packed], keys[1][..., :groups], keys[2][..., :groups]]

    def value_view():
        return [a[:, :, :tokens] for a in values]

    key_exact = [mx.array(a) for a in key_view()]
    value_exact = [mx.array(a) for a in value_view()]
    new_group = mx.quantize(mx.random.normal((B, H, D, G)), group_size=G, bits=bits)
    q = mx.random.normal((B, H, ROWS, D))
    w = mx.softmax(mx.random.normal((B, H, ROWS, tokens)), axis=-1)
    mx.eval(keys, values, key_exact, value_exact, new_group, q, w)

    def scores(parts):
        return mx.quantized_matmul(q, *parts, transpose=False, group_size=G, bits=bits)

    def output(parts):
        return mx.quantized_matmul(w, *parts, transpose=False, group_size=G, bits=bits)

    t = interleaved({
        "keys exact": lambda: scores(key_exact),
        "keys view": lambda: scores(key_view()),
        "values exact": lambda: output(value_exact),
        "values view": lambda: output(value_view()),
        "flush": lambda: [mx.concatenate([a, b], axis=-1) for a, b in zip(key_exact, new_group)],
    })
    print(
        f"{bits}-bit, {tokens} tokens: q @ K {t['keys exact']:.3f} ms exact, "
        f"{t['keys view']:.3f} ms on a view ({t['keys view'] / t['keys exact']:.2f}x); "
        f"w @ V {t['values exact']:.3f} ms exact, {t['values view']:.3f} ms on a view "
        f"({t['values view'] / t['values exact']:.2f}x); keys + one group concatenated "
        f"{t['flush']:.3f} ms per flush, {t['flush'] / G:.4f} ms per token"
    )


def window(held: int) -> None:
    rows = mx.random.normal((B, H, held, D)).astype(mx.float16)
    token = mx.random.normal((B, H, 1, D)).astype(mx.float16)
    buffer = mx.zeros((B, H, held + 64, D), dtype=mx.float16)
    mx.eval(rows, token, buffer)

    def in_place():
        nonlocal buffer
        buffer[:, :, held : held + 1] = token
        return buffer[:, :, : held + 1]

    t = interleaved({
        "concatenated": lambda: mx.concatenate([rows, token], axis=2),
        "in place": in_place,
    })
    print(
        f"window of {held} tokens + 1: concatenated {t['concatenated']:.4f} ms, "
        f"written in place {t['in place']:.4f} ms"
    )


for bits in (4, 2):
    for tokens in (4096, 8192):
        history(bits, tokens)
window(144)
