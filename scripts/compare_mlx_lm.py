"""mlx-lm's side of scripts/compare-mlx-lm.sh: decode/prefill speed and perplexity of
mlx-lm on the same weights (scripts/gguf_to_mlx.py --format exact) and the same tokens
as `kivi bench` / `kivi ppl`, and the side-by-side table.

  python scripts/compare_mlx_lm.py bench MODEL_DIR --contexts 512,1k,2k,4k --out mlx-bench.json
  python scripts/compare_mlx_lm.py ppl MODEL_DIR --tokens kivi-tokens.json --out mlx-ppl.json
  python scripts/compare_mlx_lm.py report --kivi-bench B.json --mlx-bench B2.json \
      --kivi-ppl P.json --mlx-ppl P2.json

mlx-lm's quantized cache (QuantizedKVCache, `kv_bits`) groups keys and values per token
(MLX's affine quantization along the head dimension, group 64 by default) and has no
full-precision window: it is compared with KIVI at equal bits, not as the same method.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm import load
from mlx_lm.models.cache import KVCache, QuantizedKVCache


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


def run_chunks(model, cache, ids, chunk):
    """Feeds ids in chunks, evaluating each (as the engine does); returns the last logits."""
    logits = None
    for start in range(0, len(ids), chunk):
        logits = model(mx.array([ids[start:start + chunk]]), cache=cache)
        mx.eval(logits)
    return logits[0, -1]


def bench(args):
    model, tokenizer = load(args.model)
    text = Path(args.text).read_text()
    corpus = tokenizer.encode(text[: max(sizes(args.contexts)) * 8], add_special_tokens=False)
    # Warm-up, untimed (as kivi's children do): MLX's first operations and page faults.
    for bits in kv_modes(args.kv_bits):
        cache = make_cache(model, bits, args.group_size)
        logits = run_chunks(model, cache, corpus[:16], 16)
        mx.eval(model(mx.array([[int(mx.argmax(logits).item())]]), cache=cache))
    samples = {}
    for round_ in range(args.repeats):
        for context in sizes(args.contexts):
            prompt = corpus[: context - args.decode_tokens]
            for bits in kv_modes(args.kv_bits):
                cache = make_cache(model, bits, args.group_size)
                t = time.perf_counter()
                logits = run_chunks(model, cache, prompt, args.prefill_chunk)
                prefill_s = time.perf_counter() - t
                t = time.perf_counter()
                for _ in range(args.decode_tokens):
                    token = int(mx.argmax(logits).item())
                    logits = model(mx.array([[token]]), cache=cache)[0, -1]
                    mx.eval(logits)
                decode_s = time.perf_counter() - t
                key = (mode_name(bits, args.group_size), context)
                samples.setdefault(key, []).append(
                    (len(prompt) / prefill_s, args.decode_tokens / decode_s)
                )
                print(f"  round {round_ + 1} · {key[0]} · {context}: "
                      f"prefill {len(prompt) / prefill_s:.1f} tok/s, "
                      f"decode {args.decode_tokens / decode_s:.2f} tok/s", flush=True)
    entries = [
        {
            "config": name,
            "context": context,
            "prefill_tokens_per_s": statistics.median(s[0] for s in runs),
            "decode_tokens_per_s": statistics.median(s[1] for s in runs),
            "decode_runs": [s[1] for s in runs],
        }
        for (name, context), runs in samples.items()
    ]
    Path(args.out).write_text(json.dumps({"engine": "mlx-lm", "entries": entries}, indent=1))
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


def report(args):
    kb = json.loads(Path(args.kivi_bench).read_text())["entries"]
    mb = json.loads(Path(args.mlx_bench).read_text())["entries"]
    pairs = [("full", "full"), ("k4v4-g32-r128", f"kv_bits=4 g{args.group_size}"),
             ("k2v2-g32-r128", f"kv_bits=2 g{args.group_size}")]
    print("\n| context | kivi cache | kivi decode tok/s | mlx-lm cache | mlx-lm decode tok/s | kivi / mlx-lm |")
    print("|---|---|---|---|---|---|")
    for context in sorted({e["context"] for e in kb}):
        for kname, mname in pairs:
            k = next((e for e in kb if e["config"] == kname and e["context"] == context), None)
            m = next((e for e in mb if e["config"] == mname and e["context"] == context), None)
            if k and m:
                kd = k["decode_tokens_per_s"]["median"]
                md = m["decode_tokens_per_s"]
                print(f"| {context} | {kname} | {kd:.2f} | {mname} | {md:.2f} | {kd / md:.2f}x |")
    if args.kivi_ppl and args.mlx_ppl:
        kp = json.loads(Path(args.kivi_ppl).read_text())["texts"]
        mp = json.loads(Path(args.mlx_ppl).read_text())["results"]
        print("\n| text | kivi cache | kivi perplexity | mlx-lm cache | mlx-lm perplexity |")
        print("|---|---|---|---|---|")
        for text in kp:
            for kname, mname in pairs:
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
    b.add_argument("--contexts", default="512,1k,2k,4k")
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--decode-tokens", type=int, default=32)
    b.add_argument("--prefill-chunk", type=int, default=256)
    b.add_argument("--kv-bits", default="none,4,2")
    b.add_argument("--group-size", type=int, default=64)
    b.add_argument("--out", required=True)
    p = sub.add_parser("ppl")
    p.add_argument("model")
    p.add_argument("--tokens", required=True, help="kivi ppl --dump-tokens output")
    p.add_argument("--kv-bits", default="none,4,2")
    p.add_argument("--group-size", type=int, default=64)
    p.add_argument("--out", required=True)
    r = sub.add_parser("report")
    r.add_argument("--kivi-bench", required=True)
    r.add_argument("--mlx-bench", required=True)
    r.add_argument("--kivi-ppl")
    r.add_argument("--mlx-ppl")
    r.add_argument("--group-size", type=int, default=64)
    args = parser.parse_args()
    mx.set_default_device(mx.cpu)
    {"bench": bench, "ppl": ppl, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
