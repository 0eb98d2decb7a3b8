"""Checks the KIVI server with the official `openai` Python client.

Usage: .venv/bin/python scripts/openai_client_check.py BASE_URL MODEL API_KEY

Run by engine/tests/server_openai.rs against a server it starts on the offline SmolLM2
(with API_KEY as its bearer token); it can also be pointed at a running `kivi serve`.
Prints one line per check and exits non-zero on the first failure.
"""

import sys
import threading

import openai
from openai import OpenAI


def check(name, condition, detail=""):
    if not condition:
        print(f"FAIL {name}: {detail}", flush=True)
        sys.exit(1)
    print(f"ok   {name}", flush=True)


def kv_of(usage):
    """The KIVI extension of a usage object (extra fields are kept by the client)."""
    extra = usage.model_extra or {}
    return extra.get("kv_cache"), extra.get("timings")


def main():
    base_url, model, api_key = sys.argv[1:4]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)

    models = client.models.list()
    check("models.list", [m.id for m in models.data] == [model], models)

    question = [{"role": "user", "content": "What is the capital of France?"}]
    whole = client.chat.completions.create(
        model=model, messages=question, max_tokens=8, temperature=0
    )
    text = whole.choices[0].message.content
    check("chat: an answer", whole.object == "chat.completion" and bool(text), whole)
    check("chat: finish_reason", whole.choices[0].finish_reason in ("stop", "length"), whole)
    usage = whole.usage
    check(
        "chat: usage",
        usage.prompt_tokens > 0
        and 0 < usage.completion_tokens <= 8
        and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens,
        usage,
    )
    kv, timings = kv_of(usage)
    # The cache holds every token run through the model: the prompt and the answer, but
    # for an answer cut by max_tokens its last token, which was sampled and never run.
    unread = 1 if whole.choices[0].finish_reason == "length" else 0
    check(
        "chat: usage.kv_cache",
        kv
        and kv["config"]
        and kv["held_bytes"] > 0
        and kv["tokens"] == usage.prompt_tokens + usage.completion_tokens - unread,
        usage,
    )
    check("chat: usage.timings", timings and timings["time_to_first_token_s"] is not None, usage)

    # Streamed, with the KIVI cache picked per request and usage in the last chunk.
    stream = client.chat.completions.create(
        model=model,
        messages=question,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"kv_cache": {"k_bits": 4, "v_bits": 2, "group_size": 32, "residual_length": 32}},
    )
    pieces, finish, last_usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            last_usage = chunk.usage
            check("stream: the usage chunk has no choices", chunk.choices == [], chunk)
            continue
        choice = chunk.choices[0]
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
    streamed = "".join(pieces)
    print(f"     streamed: {streamed!r}")
    check("stream: text", len(streamed) > 0, pieces)
    check("stream: finish_reason", finish in ("stop", "length"), finish)
    check("stream: usage chunk", last_usage is not None and last_usage.completion_tokens > 0)
    kv, _ = kv_of(last_usage)
    check("stream: KIVI config in usage", kv and kv["config"] == "k4v2-g32-r32", kv)
    check("stream: fp16 vs held bytes", kv["fp16_bytes"] > 0 and kv["held_bytes"] > 0, kv)

    # A follow-up that extends the conversation reuses its cache.
    follow_up = question + [
        {"role": "assistant", "content": text},
        {"role": "user", "content": "And of Italy?"},
    ]
    second = client.chat.completions.create(
        model=model, messages=follow_up, max_tokens=4, temperature=0
    )
    cached = second.usage.prompt_tokens_details.cached_tokens
    check(
        "follow-up: prompt_tokens_details.cached_tokens",
        cached >= usage.prompt_tokens,
        f"{cached} cached, first prompt {usage.prompt_tokens}",
    )

    # Seeded sampling repeats itself.
    def sample():
        out = client.completions.create(
            model=model, prompt="The sea was", max_tokens=5, temperature=1.0, top_p=0.9, seed=7
        )
        return out.choices[0].text

    check("seed: same seed, same text", sample() == sample())

    # Legacy completions, whole and streamed, and a stop sequence.
    completion = client.completions.create(
        model=model, prompt="Once upon a time, there was a little", max_tokens=6, temperature=0
    )
    full = completion.choices[0].text
    check("completions: text", completion.object == "text_completion" and len(full) > 0, completion)
    pieces = [
        c.choices[0].text
        for c in client.completions.create(
            model=model,
            prompt="Once upon a time, there was a little",
            max_tokens=6,
            temperature=0,
            stream=True,
        )
        if c.choices
    ]
    check("completions: streamed equals whole", "".join(pieces) == full, (pieces, full))
    stop = full.strip().split()[1] if len(full.split()) > 1 else full.strip()
    cut = client.completions.create(
        model=model,
        prompt="Once upon a time, there was a little",
        max_tokens=6,
        temperature=0,
        stop=[stop],
    )
    check(
        "completions: stop sequence",
        cut.choices[0].text == full[: full.find(stop)] and cut.choices[0].finish_reason == "stop",
        (stop, cut.choices[0].text, full),
    )

    # Short prompts, one word to eight: each is answered (the default cache's sinks are
    # still filling for the shortest).
    words = "Once upon a time there was a little".split()
    for n in range(1, len(words) + 1):
        out = client.completions.create(
            model=model, prompt=" ".join(words[:n]), max_tokens=3, temperature=0
        )
        check(
            f"completions: a {n}-word prompt",
            out.choices[0].finish_reason in ("length", "stop") and out.usage.prompt_tokens >= n,
            out,
        )

    # A request sent while another streams waits its turn and is answered; the stream is
    # not cut by it.
    stream = client.chat.completions.create(
        model=model, messages=question, max_tokens=12, temperature=0, stream=True
    )
    chunks = iter(stream)
    first = next(chunks)
    other = {}

    def send_other():
        other["out"] = client.completions.create(
            model=model, prompt="The sea", max_tokens=3, temperature=0
        )

    sender = threading.Thread(target=send_other)
    sender.start()
    rest = [c for c in chunks]
    sender.join(timeout=300)
    finish = next((c.choices[0].finish_reason for c in reversed(rest) if c.choices), None)
    check("a stream goes on while another request waits", finish in ("stop", "length"), rest)
    out = other.get("out")
    check(
        "a request sent while another streams is answered",
        out is not None and out.choices[0].finish_reason in ("stop", "length") and out.choices[0].text,
        (first, out),
    )

    # Errors arrive as the client's exceptions, with OpenAI's fields.
    try:
        client.chat.completions.create(
            model=model, messages=question, max_tokens=2, extra_body={"kv_cache": {"k_bits": 3}}
        )
        check("400 for bits 3", False, "no error")
    except openai.BadRequestError as e:
        check("400 for bits 3", e.status_code == 400 and e.param == "kv_cache.k_bits", e.body)
    try:
        client.chat.completions.create(model="gpt-4o", messages=question, max_tokens=2)
        check("404 for an unknown model", False, "no error")
    except openai.NotFoundError as e:
        check("404 for an unknown model", e.code == "model_not_found", e.body)
    try:
        OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
        check("401 for a wrong key", False, "no error")
    except openai.AuthenticationError as e:
        check("401 for a wrong key", e.status_code == 401 and e.code == "invalid_api_key", e.body)

    # OpenAI fields the server does not honour: accepted at the value that asks for
    # nothing, refused by name otherwise; a field OpenAI does not have is refused too.
    out = client.chat.completions.create(
        model=model, messages=question, max_tokens=2, temperature=0,
        user="u-1", frequency_penalty=0, presence_penalty=0, logit_bias={}, store=False,
        metadata={"team": "docs"},
    )
    check("defaults and labels accepted", out.choices[0].finish_reason in ("stop", "length"), out)
    for name, kwargs in [
        ("frequency_penalty", {"frequency_penalty": 0.5}),
        ("logit_bias", {"logit_bias": {"50256": -100}}),
        ("store", {"store": True}),
        ("reasoning_effort", {"reasoning_effort": "low"}),
        ("temprature", {"extra_body": {"temprature": 0}}),
    ]:
        try:
            client.chat.completions.create(model=model, messages=question, max_tokens=2, **kwargs)
            check(f"400 for {name}", False, "no error")
        except openai.BadRequestError as e:
            check(
                f"400 unsupported_parameter for {name}",
                e.param == name and e.code == "unsupported_parameter",
                e.body,
            )
    try:
        client.completions.create(model=model, prompt="Once", max_tokens=2, suffix=" end")
        check("400 for suffix", False, "no error")
    except openai.BadRequestError as e:
        check("400 unsupported_parameter for suffix", e.param == "suffix", e.body)

    print("all openai client checks passed", flush=True)


if __name__ == "__main__":
    main()
