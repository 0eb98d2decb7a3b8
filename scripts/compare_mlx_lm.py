"""mlx-lm's side of scripts/compare-mlx-lm.sh: decode/prefill speed, peak memory and
perplexity of mlx-lm on the same weights (scripts/gguf_to_mlx.py --format exact) and the
same tokens as `kivi bench` / `kivi ppl`, and the side-by-side tables.

  python scripts/compare_mlx_lm.py bench MODEL_DIR --contexts 512,2k,4k,8k --out mlx-bench.json
  python scripts/compare_mlx_lm.py ppl MODEL_DIR --tokens kivi-tokens.json --out mlx-ppl.json
  python scripts/compare_mlx_lm.py report --mlx-bench 'round-*/mlx-bench.json' \
      --kivi-mlx 'round-*/kivi-mlx.json' --kivi-host 'round-*/kivi-host.json'

Each speed measurement runs in its own process (`bench-one`), as `kivi bench`'s do, so
that its peak resident memory is its own. Decode is mlx-lm's own loop, `generate_step`
(the next step built and handed to MLX with `async_eval` before the current token is
read). Prompt chunks go through MLX's dense product over dequantized weights, as the
engine's CPU backends run them: MLX's CPU quantized product grows linearly with the rows
(about 12 prompt tokens/s here through mlx-lm's stock layers), which would make an 8k
context take minutes per measurement; decode steps use mlx-lm's stock quantized layers.

mlx-lm's quantized cache (QuantizedKVCache, `kv_bits`) groups keys and values per token
(MLX's affine quantization along the head dimension, group 64 by default) and has no
full-precision window: it is compared with KIVI at equal bits, not as the same method.
"""

import argparse
import glob
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm import load
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import KVCache, QuantizedKVCache

# Rows from which a prompt chunk's products run dense (the engine's threshold).
DENSE_ROWS = 8


def sizes(text):
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        out.append(int(item[:-1]) * 1024 if item.endswith("k") else int(item))
    return out


def kv_modes(text):
    """'none,4,2' -> [None, 4, 2] (None: full-precision KVCache)."""
    return [None if m.strip() in ("none", "full") else int(m) for m in text.split(",")]


def mode_name(bits, group):
    return "full" if bits is None else f"kv_bits={bits} g{group}"


def make_cache(model, bits, group):
    layers = len(model.layers)
    if bits is None:
        return [KVCache() for _ in range(layers)]
    return [QuantizedKVCache(group_size=group, bits=bits) for _ in range(layers)]


def dense_prompt_products():
    """Prompt chunks (DENSE_ROWS rows or more) multiply dequantized weights densely."""
    stock = nn.QuantizedLinear.__call__

    def linear(self, x):
        if x.size // x.shape[-1] < DENSE_ROWS:
            return stock(self, x)
        w = mx.dequantize(self.weight, self.scales, self.biases,
                          group_size=self.group_size, bits=self.bits)
        y = x @ w.T
        return y + self["bias"] if "bias" in self else y

    nn.QuantizedLinear.__call__ = linear


def run_chunks(model, cache, ids, chunk):
    """Feeds ids in chunks, evaluating each (as the engine does); returns the last logits."""
    logits = None
    for start in range(0, len(ids), chunk):
        logits = model(mx.array([ids[start:start + chunk]]), cache=cache)
        mx.eval(logits)
    return logits[0, -1]


def fill(model, cache, ids, chunk):
    """Feeds ids in chunks through the decoder only (the engine projects only the prompt's
    last position onto the vocabulary, and generate_step runs that one here)."""
    for start in range(0, len(ids), chunk):
        mx.eval(model.model(mx.array([ids[start:start + chunk]]), cache=cache))


def resident_bytes():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def corpus_tokens(tokenizer, text_path, longest):
    text = Path(text_path).read_text()
    return tokenizer.encode(text[: longest * 8], add_special_tokens=False)


def bench_one(args):
    """One measurement in this process: prints one JSON line."""
    dense_prompt_products()
    model, tokenizer = load(args.model)
    bits = None if args.bits in ("none", "full") else int(args.bits)
    corpus = corpus_tokens(tokenizer, args.text, args.context)
    # Warm-up, untimed (as kivi's children do): MLX's first operations and page faults.
    cache = make_cache(model, bits, args.group_size)
    run_chunks(model, cache, corpus[:16], 16)
    for _, _ in zip(range(2), generate_step(mx.array(corpus[16:17]), model, prompt_cache=cache,
                                            sampler=lambda lp: mx.argmax(lp, axis=-1))):
        pass
    rss_after_load = resident_bytes()
    prompt = corpus[: args.context - args.decode_tokens]
    cache = make_cache(model, bits, args.group_size)
    t = time.perf_counter()
    # All but the last prompt token: generate_step runs that one as its first step.
    fill(model, cache, prompt[:-1], args.prefill_chunk)
    prefill_s = time.perf_counter() - t
    steps = generate_step(mx.array(prompt[-1:]), model, prompt_cache=cache,
                          max_tokens=args.decode_tokens,
                          sampler=lambda lp: mx.argmax(lp, axis=-1))
    t = time.perf_counter()
    count = sum(1 for _ in steps)
    decode_s = time.perf_counter() - t
    print(json.dumps({
        "config": mode_name(bits, args.group_size),
        "context": args.context,
        "prefill_tokens_per_s": (len(prompt) - 1) / prefill_s,
        "decode_tokens_per_s": count / decode_s,
        "rss_after_load_bytes": rss_after_load,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }), flush=True)


def bench(args):
    """Every (context, cache) of a round, each in its own process."""
    samples = []
    for round_ in range(args.repeats):
        for context in sizes(args.contexts):
            for bits in args.kv_bits.split(","):
                out = subprocess.run(
                    [sys.executable, __file__, "bench-one", args.model, "--text", args.text,
                     "--context", str(context), "--bits", bits.strip(),
                     "--group-size", str(args.group_size),
                     "--decode-tokens", str(args.decode_tokens),
                     "--prefill-chunk", str(args.prefill_chunk)],
                    check=True, capture_output=True, text=True)
                sample = json.loads(out.stdout.strip().splitlines()[-1])
                sample["round"] = round_ + 1
                samples.append(sample)
                print(f"  mlx-lm · {sample['config']} · {context}: prefill "
                      f"{sample['prefill_tokens_per_s']:.1f} tok/s, decode "
                      f"{sample['decode_tokens_per_s']:.2f} tok/s, peak "
                      f"{sample['peak_rss_bytes'] / 2**20:.0f} MiB", flush=True)
    Path(args.out).write_text(json.dumps({"engine": "mlx-lm", "samples": samples}, indent=1))
    print(f"wrote {args.out}")


def ppl(args):
    model, _ = load(args.model)
    dump = json.loads(Path(args.tokens).read_text())
    plan = dump["plan"]
    window, scored, chunk = plan["window"], plan["scored"], plan["chunk"]
    results = []
    for text in dump["texts"]:
        for bits in kv_modes(args.kv_bits):
            total, count, per_window = 0.0, 0, []
            for ids in text["windows"]:
                cache = make_cache(model, bits, args.group_size)
                nll = []
                for start in range(0, window, chunk):
                    piece = ids[start:start + chunk]
                    logits = model(mx.array([piece]), cache=cache)[0].astype(mx.float32)
                    # position p predicts p + 1; targets window - scored .. window - 1
                    lo = max(start, window - scored - 1)
                    hi = min(start + len(piece), window - 1)
                    if lo < hi:
                        rows = logits[lo - start:hi - start]
                        targets = mx.array(ids[lo + 1:hi + 1])
                        lse = mx.logsumexp(rows, axis=-1)
                        picked = mx.take_along_axis(rows, targets[:, None], axis=-1)[:, 0]
                        nll.extend((lse - picked).tolist())
                    else:
                        mx.eval(logits)
                total += sum(nll)
                count += len(nll)
                per_window.append(float(mx.exp(mx.array(sum(nll) / len(nll))).item()))
            name = mode_name(bits, args.group_size)
            value = float(mx.exp(mx.array(total / count)).item())
            print(f"  {text['text']} · {name}: perplexity {value:.3f} {per_window}", flush=True)
            results.append({"text": text["text"], "config": name, "perplexity": value,
                            "window_perplexity": per_window, "tokens_scored": count})
    Path(args.out).write_text(json.dumps({"engine": "mlx-lm", "results": results}, indent=1))
    print(f"wrote {args.out}")


KIVI_CONFIGS = ("full", "k4v4-g32-r128", "k2v2-g32-r128")


def load_rounds(pattern, engine):
    """Samples of every round file matching `pattern`, keyed (engine, config, context, round).

    kivi bench files (one round each) hold entries with their samples; mlx-lm files hold
    samples."""
    out = {}
    for n, path in enumerate(sorted(glob.glob(pattern)), start=1):
        # The round is the folder's (round-N): the engines' files of one round pair up.
        found = re.search(r"round-(\d+)", path)
        rnd = int(found.group(1)) if found else n
        data = json.loads(Path(path).read_text())
        listed = data.get("samples") or [s for e in data["entries"] for s in e["samples"]]
        for s in listed:
            out[(engine, s["config"], s["context"], rnd)] = s
    return out


def report(args):
    g = args.group_size
    samples = {}
    samples.update(load_rounds(args.mlx_bench, "mlx-lm"))
    samples.update(load_rounds(args.kivi_mlx, "mlx"))
    samples.update(load_rounds(args.kivi_host, "host"))
    rounds = sorted({k[3] for k in samples})
    contexts = sorted({k[2] for k in samples})
    mlx_lm = {"full": "full", "k4v4-g32-r128": f"kv_bits=4 g{g}", "k2v2-g32-r128": f"kv_bits=2 g{g}"}

    def value(engine, config, context, rnd, field):
        s = samples.get((engine, config, context, rnd))
        return None if s is None else s[field]

    def median(engine, config, context, field):
        vals = [value(engine, config, context, r, field) for r in rounds]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    def ratio(a, b, context, field="decode_tokens_per_s"):
        """Median over rounds of a / b, each (engine, config); '-' when missing."""
        per = []
        for r in rounds:
            x, y = value(*a, context, r, field), value(*b, context, r, field)
            if x is not None and y:
                per.append(x / y)
        return f"{statistics.median(per):.2f}x" if per else "-"

    def fmt(v, digits=2):
        return "-" if v is None else f"{v:.{digits}f}"

    print(f"\nrounds: {len(rounds)}; medians over rounds, ratios are medians of per-round ratios")
    for field, title in (("decode_tokens_per_s", "decode tok/s"),
                         ("prefill_tokens_per_s", "prefill tok/s")):
        print(f"\n### {title}: the MLX backend (float32, CPU) against mlx-lm\n")
        print("| context | cache | mlx-lm | MLX backend | MLX / mlx-lm | MLX / MLX full |")
        print("|---|---|---:|---:|---:|---:|")
        for c in contexts:
            for k in KIVI_CONFIGS:
                m = mlx_lm[k]
                print(f"| {c} | {k} vs {m} | {fmt(median('mlx-lm', m, c, field))} | "
                      f"{fmt(median('mlx', k, c, field))} | "
                      f"{ratio(('mlx', k), ('mlx-lm', m), c, field)} | "
                      f"{ratio(('mlx', k), ('mlx', 'full'), c, field)} |")
        print(f"\n### {title}: the MLX backend against the host backend\n")
        print("| context | cache | host | MLX backend | MLX / host | host / host full |")
        print("|---|---|---:|---:|---:|---:|")
        for c in contexts:
            for k in KIVI_CONFIGS:
                print(f"| {c} | {k} | {fmt(median('host', k, c, field))} | "
                      f"{fmt(median('mlx', k, c, field))} | "
                      f"{ratio(('mlx', k), ('host', k), c, field)} | "
                      f"{ratio(('host', k), ('host', 'full'), c, field)} |")

    print("\n### peak resident memory (MiB) and what the KV cache saved\n")
    print("| context | cache | mlx-lm after load | mlx-lm peak | MLX after load | MLX peak | MLX KV held "
          "| MLX peak saved / KV saved | host peak |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    mib = 2 ** 20
    for c in contexts:
        for k in KIVI_CONFIGS:
            per = []
            for r in rounds:
                full, kivi = samples.get(("mlx", "full", c, r)), samples.get(("mlx", k, c, r))
                if k != "full" and full and kivi:
                    kv_saved = full["kv"]["held_bytes"] - kivi["kv"]["held_bytes"]
                    per.append((full["peak_rss_bytes"] - kivi["peak_rss_bytes"]) / kv_saved)
            held = [s["kv"]["held_bytes"] for (e, kk, cc, _), s in samples.items()
                    if (e, kk, cc) == ("mlx", k, c)]
            peak = lambda e, cfg: median(e, cfg, c, "peak_rss_bytes")
            loaded = lambda e, cfg: median(e, cfg, c, "rss_after_load_bytes")
            print(f"| {c} | {k} | {fmt((loaded('mlx-lm', mlx_lm[k]) or 0) / mib, 0)} | "
                  f"{fmt((peak('mlx-lm', mlx_lm[k]) or 0) / mib, 0)} | "
                  f"{fmt((loaded('mlx', k) or 0) / mib, 0)} | "
                  f"{fmt((peak('mlx', k) or 0) / mib, 0)} | "
                  f"{fmt(statistics.median(held) / mib if held else None, 1)} | "
                  f"{f'{statistics.median(per):.0%}' if per else '-'} | "
                  f"{fmt((peak('host', k) or 0) / mib, 0)} |")

    if args.kivi_ppl and args.mlx_ppl:
        kp = json.loads(Path(args.kivi_ppl).read_text())["texts"]
        mp = json.loads(Path(args.mlx_ppl).read_text())["results"]
        print("\n| text | kivi cache | kivi perplexity | mlx-lm cache | mlx-lm perplexity |")
        print("|---|---|---|---|---|")
        for text in kp:
            for kname in KIVI_CONFIGS:
                mname = mlx_lm[kname]
                k = next((r for r in text["results"] if r["config"] == kname), None)
                m = next((r for r in mp if r["config"] == mname and r["text"] == text["text"]), None)
                if k and m:
                    print(f"| {text['text']} | {kname} | {k['perplexity']:.3f} | {mname} | "
                          f"{m['perplexity']:.3f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench")
    b.add_argument("model")
    b.add_argument("--text", required=True)
    b.add_argument("--contexts", default="512,2k,4k,8k")
    b.add_argument("--repeats", type=int, default=1)
    b.add_argument("--decode-tokens", type=int, default=32)
    b.add_argument("--prefill-chunk", type=int, default=256)
    b.add_argument("--kv-bits", default="none,4,2")
    b.add_argument("--group-size", type=int, default=64)
    b.add_argument("--out", required=True)
    o = sub.add_parser("bench-one")
    o.add_argument("model")
    o.add_argument("--text", required=True)
    o.add_argument("--context", type=int, required=True)
    o.add_argument("--bits", default="none")
    o.add_argument("--group-size", type=int, default=64)
    o.add_argument("--decode-tokens", type=int, default=32)
    o.add_argument("--prefill-chunk", type=int, default=256)
    p = sub.add_parser("ppl")
    p.add_argument("model")
    p.add_argument("--tokens", required=True, help="kivi ppl --dump-tokens output")
    p.add_argument("--kv-bits", default="none,4,2")
    p.add_argument("--group-size", type=int, default=64)
    p.add_argument("--out", required=True)
    r = sub.add_parser("report")
    r.add_argument("--mlx-bench", required=True, help="glob of mlx-lm round files")
    r.add_argument("--kivi-mlx", required=True, help="glob of kivi bench files, MLX backend")
    r.add_argument("--kivi-host", required=True, help="glob of kivi bench files, host backend")
    r.add_argument("--kivi-ppl")
    r.add_argument("--mlx-ppl")
    r.add_argument("--group-size", type=int, default=64)
    args = parser.parse_args()
    mx.set_default_device(mx.cpu)
    commands = {"bench": bench, "bench-one": bench_one, "ppl": ppl, "report": report}
    commands[args.command](args)


if __name__ == "__main__":
    main()
