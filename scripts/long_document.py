#!/usr/bin/env python3
"""A long document end to end in `kivi chat`, as a user meets it: read, answered, the
session saved, the program ended, a follow-up asked in a new process from the saved cache.

The document is the start of Moby-Dick cut to about --tokens tokens, with two facts the book
does not hold planted at a third and two thirds of its depth. The first process reads the
document and asks for the first fact; the second, started afresh with only the session file,
asks for the second. Each question's answer is checked for its fact. Prints what the user
waits for: reading time and speed, time to first token of the follow-up after the restart,
the session file's size and read time, the KV cache's bytes against float16's, peak RSS.

    scripts/long_document.py                         # Qwen2.5-Coder 0.5B, 30k tokens
    scripts/long_document.py --tokens 4000 --model .data/models/SmolLM2-135M-Instruct.Q4_1.gguf

On demand (a 30k-token read takes minutes on a laptop CPU); `make test` runs the same flow
on a short document (cli/tests/cli.rs, the chat session test). Exits non-zero when a step
fails or a fact is not found.
"""

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FACTS = [
    (
        "The harbour master of Nantucket keeps the spare lantern key in a tin marked 4817.",
        "What number is marked on the tin that holds the spare lantern key?",
        "4817",
    ),
    (
        "The cook of the Pequod hides his best pepper in a barrel painted violet.",
        "What colour is the barrel where the cook hides his best pepper?",
        "violet",
    ),
]


def document(text: Path, chars: int) -> str:
    """The first `chars` characters of `text` (whole paragraphs), with the facts planted."""
    body = text.read_text(encoding="utf-8")[:chars]
    paragraphs = body[: body.rfind("\n\n")].split("\n\n")
    for i, (fact, _, _) in enumerate(FACTS, start=1):
        at = len(paragraphs) * i // (len(FACTS) + 1)
        paragraphs.insert(at, fact)
    return "\n\n".join(paragraphs) + "\n"


def chat(kivi: str, args: list[str], question: str, timeout: int) -> tuple[str, str, float]:
    start = time.monotonic()
    run = subprocess.run(
        [kivi, "chat", *args],
        input=question + "\n",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.monotonic() - start
    if run.returncode != 0:
        sys.exit(f"kivi chat failed ({run.returncode}):\n{run.stderr[-4000:]}")
    return run.stdout.strip(), run.stderr, wall


def field(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    if not found:
        sys.exit(f"no {pattern!r} in kivi's output:\n{text[-4000:]}")
    return found.group(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / ".data/models/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf"))
    p.add_argument("--text", default=str(ROOT / ".data/texts/moby-dick.txt"))
    p.add_argument("--tokens", type=int, default=30000, help="about this many document tokens")
    p.add_argument("--chars-per-token", type=float, default=4.1, help="to cut the text (English, BPE)")
    p.add_argument("--context", type=int, default=32768)
    p.add_argument("--cache", default=None, help="kivi's --cache (default: kivi's)")
    p.add_argument("--backend", default=None)
    p.add_argument("--kivi", default=str(ROOT / "target/release/kivi"))
    p.add_argument("--timeout", type=int, default=3600, help="seconds per process")
    a = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        doc = Path(tmp) / "moby-dick-part.txt"
        doc.write_text(document(Path(a.text), int(a.tokens * a.chars_per_token)), encoding="utf-8")
        session = Path(tmp) / "session.kivi"
        common = ["--model", a.model, "--context", str(a.context), "--max-tokens", "24", "--session", str(session)]
        if a.cache:
            common += ["--cache", a.cache]
        if a.backend:
            common += ["--backend", a.backend]

        answer1, err1, wall1 = chat(a.kivi, common + ["--file", str(doc)], FACTS[0][1], a.timeout)
        answer2, err2, wall2 = chat(a.kivi, common, FACTS[1][1], a.timeout)
        size = session.stat().st_size

    doc_tokens = int(field(r"\[document [^:]+: (\d+) tokens\]", err1))
    prompt1 = int(field(r"prompt (\d+) tok", err1))
    prefill1 = float(field(r"prefill ([\d.]+) tok/s", err1))
    ttft1 = float(field(r"first token ([\d.]+) s", err1))
    kv = field(r"KV [^:]+: ([\d.]+ MiB held vs [\d.]+ MiB fp16)", err1)
    cache = field(r"· KV (\S+)\]", err1)
    rss1 = field(r"RSS (\d+) MiB", err1)
    restored = field(r"tokens of KV cache read in ([\d.]+) s", err2)
    prompt2 = int(field(r"prompt (\d+) tok", err2))
    reused2 = int(field(r"\(reused (\d+)\)", err2))
    ttft2 = float(field(r"first token ([\d.]+) s", err2))
    rss2 = field(r"RSS (\d+) MiB", err2)
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    found = [fact[2].lower() in answer.lower() for fact, answer in zip(FACTS, [answer1, answer2])]
    print(f"model {Path(a.model).name} · cache {cache} · context {a.context}")
    print(f"document: {doc_tokens} tokens (prompt {prompt1})")
    print(f"read and answered: {wall1:.0f} s wall, prefill {prefill1:.1f} tok/s, first token after {ttft1:.1f} s")
    print(f"  Q: {FACTS[0][1]}\n  A: {answer1!r} -> {'found' if found[0] else 'NOT FOUND'}")
    print(f"  KV cache: {kv}; RSS {rss1} MiB")
    print(f"session file: {size / 2**20:.1f} MiB, read back in {restored} s by a new process")
    print(
        f"follow-up after the restart: prompt {prompt2} tok, {reused2} from the file, "
        f"first token after {ttft2:.2f} s ({ttft1 / max(ttft2, 1e-9):.0f}x sooner than the first read), "
        f"{wall2:.0f} s wall with the model load; RSS {rss2} MiB"
    )
    print(f"  Q: {FACTS[1][1]}\n  A: {answer2!r} -> {'found' if found[1] else 'NOT FOUND'}")
    print(f"peak RSS of either process: {children:.0f} MiB")
    if reused2 < prompt1:
        sys.exit("the follow-up did not reuse the saved cache")
    if not all(found):
        sys.exit("a planted fact was not found")


if __name__ == "__main__":
    main()
