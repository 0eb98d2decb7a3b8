"""The report of scripts/compare-llama-cpp.sh: speed tables with medians over rounds and
per-round ratios against llama.cpp's float16 cache, the token check, and perplexity on
llama.cpp's protocol for both engines.

  .venv/bin/python scripts/compare_llama_cpp.py target/compare-llama-cpp --rounds 2 \
      --contexts 512,4k,8k
"""

import argparse
import json
import re
import statistics
from pathlib import Path


def tokens_of(context):
    return int(context[:-1]) * 1024 if context.endswith("k") else int(context)


def llama_ts(path):
    """Tokens per second of a one-test llama-bench JSON file."""
    rows = json.loads(Path(path).read_text())
    return rows[0]["avg_ts"]


def kivi_entries(path):
    """{(config, context): (decode tok/s, prefill tok/s)} of a kivi bench JSON report."""
    report = json.loads(Path(path).read_text())
    return {(e["config"], e["context"]): (e["decode_tokens_per_s"]["median"],
                                          e["prefill_tokens_per_s"]["median"])
            for e in report["entries"]}


def short(config):
    return {"full": "full"}.get(config, config.split("-")[0].upper())


def speed_tables(out, rounds, contexts):
    decode = {}   # column -> context -> [per round]
    prefill = {}
    for r in range(1, rounds + 1):
        d = out / f"round-{r}"
        kivi = kivi_entries(d / "kivi.json")
        configs = sorted({c for c, _ in kivi}, key=lambda c: (c != "full", c))
        for c in contexts:
            n = tokens_of(c)
            for k, v, name in (("f16", "f16", "llama.cpp f16"), ("f16", "q4_0", "llama.cpp K f16 V q4_0")):
                decode.setdefault(name, {}).setdefault(c, []).append(
                    llama_ts(d / f"llama-decode-{c}-{k}-{v}.json"))
            prefill.setdefault("llama.cpp", {}).setdefault(c, []).append(
                llama_ts(d / f"llama-prefill-{c}.json"))
            for config in configs:
                dec, pre = kivi[(config, n)]
                decode.setdefault(f"kivi {short(config)}", {}).setdefault(c, []).append(dec)
                prefill.setdefault(f"kivi {short(config)}", {}).setdefault(c, []).append(pre)
    for title, table, base in (("decode tok/s", decode, "llama.cpp f16"),
                               ("prefill tok/s", prefill, "llama.cpp")):
        columns = list(table)
        print(f"\n{title} (median of {rounds} rounds; ratio: median of per-round ratios to {base})\n")
        print("| context | " + " | ".join(columns) + " |")
        print("|---|" + "---:|" * len(columns))
        for c in contexts:
            cells = []
            for col in columns:
                values = table[col][c]
                cell = f"{statistics.median(values):.1f}"
                if col != base:
                    ratios = [v / b for v, b in zip(values, table[base][c])]
                    cell += f" ({statistics.median(ratios):.2f}x)"
                cells.append(cell)
            print(f"| {c} | " + " | ".join(cells) + " |")


def token_check(out):
    dump = out / "windows.json"
    llama = out / "llama-tokens.txt"
    if not dump.exists() or not llama.exists():
        return
    windows = json.loads(dump.read_text())["texts"][0]["windows"]
    ids = [int(t) for t in re.findall(r"-?\d+", llama.read_text())]
    same = total = 0
    first_diff = None
    for i, window in enumerate(windows):
        theirs = ids[i * len(window):(i + 1) * len(window)]
        for j, (a, b) in enumerate(zip(window, theirs)):
            total += 1
            if a == b:
                same += 1
            elif first_diff is None:
                first_diff = (i, j, a, b)
    print(f"\ntokens: {same} of {total} window tokens equal to llama-tokenize's"
          + (f" (first difference: window {first_diff[0]}, position {first_diff[1]}: "
             f"kivi {first_diff[2]}, llama.cpp {first_diff[3]})" if first_diff else ""))


def perplexity(out):
    kivi_path = out / "kivi-ppl.json"
    if not kivi_path.exists():
        return
    print("\nperplexity, llama.cpp's protocol (2048-token windows, second half scored, 512-token batches)\n")
    print("| engine | cache | storage bits (K/V) | perplexity | vs its own full precision |")
    print("|---|---|---|---:|---:|")
    base = None
    for cache, bits in (("f16", "16/16"), ("q8_0", "8.5/8.5"), ("q4_0", "4.5/4.5")):
        path = out / f"llama-ppl-{cache}.txt"
        if not path.exists():
            continue
        m = re.search(r"Final estimate: PPL = ([0-9.]+)", path.read_text())
        if not m:
            print(f"| llama.cpp | {cache} | {bits} | (no result: see {path.name}) | |")
            continue
        ppl = float(m.group(1))
        base = base or ppl
        print(f"| llama.cpp | {cache} | {bits} | {ppl:.3f} | {100 * (ppl / base - 1):+.2f}% |")
    results = json.loads(kivi_path.read_text())["texts"][0]["results"]
    full = next((r["perplexity"] for r in results if r["config"] == "full"), None)
    for r in results:
        delta = f"{100 * (r['perplexity'] / full - 1):+.2f}%" if full else ""
        print(f"| kivi | {r['config']} | | {r['perplexity']:.3f} | {delta} |")


def gguf_types(out, types):
    """Each llama-quantize'd file's perplexity in both engines (full-precision caches)."""
    rows = []
    for t in types:
        kivi = out / "types" / f"kivi-ppl-{t}.json"
        llama = out / "types" / f"llama-ppl-{t}.txt"
        if not kivi.exists() or not llama.exists():
            continue
        k = json.loads(kivi.read_text())
        ppl_k = k["texts"][0]["results"][0]["perplexity"]
        m = re.search(r"Final estimate: PPL = ([0-9.]+)", llama.read_text())
        ppl_l = float(m.group(1)) if m else float("nan")
        rows.append((t, ppl_l, ppl_k))
    if not rows:
        return
    print("\nGGUF types made by llama-quantize from the F16 copy, full-precision caches\n")
    print("| type | llama.cpp perplexity | kivi perplexity | kivi / llama.cpp |")
    print("|---|---:|---:|---:|")
    for t, l, k in rows:
        print(f"| {t} | {l:.3f} | {k:.3f} | {k / l:.4f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--contexts", default="512,4k,8k")
    ap.add_argument("--types", default="")
    args = ap.parse_args()
    if args.rounds > 0:
        speed_tables(args.out, args.rounds, args.contexts.split(","))
    token_check(args.out)
    perplexity(args.out)
    gguf_types(args.out, [t for t in args.types.split(",") if t])


if __name__ == "__main__":
    main()
