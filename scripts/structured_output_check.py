"""Checks the KIVI server's structured output with the official `openai` Python client.

Usage: .venv/bin/python scripts/structured_output_check.py BASE_URL MODEL API_KEY

Run by engine/tests/server_openai.rs against servers it starts on the offline SmolLM2 and
Qwen2.5-Coder 0.5B; it can also be pointed at a running `kivi serve`. Every answer asked
for under a schema must parse and validate under the `jsonschema` package (an
implementation independent of the engine's grammar), streamed or whole; an answer cut by
`max_tokens` must say `length`; a schema or a format the server cannot keep to is a 400
on `response_format`. Prints one line per check and the time each answer took, and exits
non-zero on the first failure.
"""

import json
import sys
import time

import jsonschema
import openai
from openai import OpenAI

CONTRACT = (
    "This agreement, made on 3 May 2024 between Ada Lovelace (seller) and Charles "
    "Babbage (buyer), sells one analytical engine for 1200 pounds. Witnessed by Mary "
    "Somerville. Signed by both parties."
)

# Nested objects, arrays, enums, required fields, numbers with bounds.
CONTRACT_SCHEMA = {
    "type": "object",
    "properties": {
        "parties": {
            "type": "array",
            "minItems": 1,
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 40},
                    "role": {"enum": ["buyer", "seller", "witness"]},
                },
                "required": ["name", "role"],
                "additionalProperties": False,
            },
        },
        "date": {
            "type": "object",
            "properties": {
                "year": {"type": "integer", "minimum": 1800, "maximum": 2100},
                "month": {"type": "integer", "minimum": 1, "maximum": 12},
                "day": {"type": "integer", "minimum": 1, "maximum": 31},
            },
            "required": ["year", "month", "day"],
            "additionalProperties": False,
        },
        "price": {"type": "number", "minimum": 0},
        "currency": {"type": "string", "maxLength": 12},
        "signed": {"type": "boolean"},
    },
    "required": ["parties", "date", "price", "signed"],
    "additionalProperties": False,
}

# Strings with quotes and newlines: the answer must escape them to stay JSON.
QUOTE_SCHEMA = {
    "type": "object",
    "properties": {
        "speaker": {"type": "string", "maxLength": 30},
        "quote": {"type": "string", "maxLength": 120},
        "lines": {"type": "array", "items": {"type": "string", "maxLength": 60}, "maxItems": 3},
    },
    "required": ["speaker", "quote", "lines"],
    "additionalProperties": False,
}
QUOTE = (
    'Ishmael wrote: "Call me Ishmael." Then, on a new line:\n"Some years ago - never mind '
    'how long precisely -"\nGive the speaker, the quote with its quotation marks, and its '
    "lines as JSON."
)

# References to the schema's own definitions (`$defs`, `$ref`), two levels deep.
TREE_SCHEMA = {
    "$defs": {
        "person": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 20},
                "children": {"type": "array", "items": {"$ref": "#/$defs/child"}, "maxItems": 3},
            },
            "required": ["name", "children"],
            "additionalProperties": False,
        },
        "child": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 20}},
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "$ref": "#/$defs/person",
}


def check(name, condition, detail=""):
    if not condition:
        print(f"FAIL {name}: {detail}", flush=True)
        sys.exit(1)
    print(f"ok   {name}", flush=True)


def response_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def main():
    base_url, model, api_key = sys.argv[1:4]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=600)

    def ask(content, fmt, max_tokens=300, **kwargs):
        started = time.monotonic()
        out = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": content}],
            max_tokens=max_tokens,
            temperature=0,
            response_format=fmt,
            **kwargs,
        )
        return out, time.monotonic() - started

    cases = [
        ("contract", CONTRACT + " Give its parties, date, price, currency and whether it is signed.", CONTRACT_SCHEMA),
        ("quotes and newlines", QUOTE, QUOTE_SCHEMA),
        ("$defs and $ref", "Mary has two children, Tom and Ann. Describe the family as JSON.", TREE_SCHEMA),
    ]
    for name, content, schema in cases:
        out, secs = ask(content, response_format(name.replace(" ", "_"), schema))
        text = out.choices[0].message.content
        check(f"json_schema {name}: finish_reason stop", out.choices[0].finish_reason == "stop", out)
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            check(f"json_schema {name}: parses", False, f"{e}: {text!r}")
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as e:
            check(f"json_schema {name}: validates", False, f"{e.message}: {text!r}")
        check(
            f"json_schema {name}: parses and validates ({out.usage.completion_tokens} tokens, {secs:.1f} s)",
            True,
        )
        print(f"     {text}", flush=True)

    # Any JSON object.
    out, _ = ask(
        "Alice is 30 years old and lives in Paris. Give her name, age and city as a JSON object.",
        {"type": "json_object"},
    )
    text = out.choices[0].message.content
    check("json_object: an object", isinstance(json.loads(text), dict), text)

    # The same schema streamed: the pieces join into JSON that validates.
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": CONTRACT + " Give the parties and date."}],
        max_tokens=300,
        temperature=0,
        response_format=response_format("contract", CONTRACT_SCHEMA),
        stream=True,
    )
    pieces, finish = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    joined = "".join(pieces)
    jsonschema.validate(json.loads(joined), CONTRACT_SCHEMA)
    check("json_schema streamed: joins, parses and validates", finish == "stop", (finish, joined))

    # A schema answer cut by max_tokens says so: finish_reason length, never stop.
    out, _ = ask(CONTRACT, response_format("contract", CONTRACT_SCHEMA), max_tokens=5)
    check("json_schema cut by max_tokens: length", out.choices[0].finish_reason == "length", out)

    # A plain answer is unchanged by `{"type": "text"}`.
    out, _ = ask("Say hello.", {"type": "text"}, max_tokens=4)
    check("text format: an answer", out.choices[0].finish_reason in ("stop", "length"), out)

    # Formats the server cannot keep to are refused, naming the field.
    refusals = [
        ("an unknown type", {"type": "xml"}, "response_format.type"),
        ("a schema of an unknown type", response_format("bad", {"type": "no-such-type"}), "response_format"),
        ("a schema that is not an object", response_format("bad", ["not", "an", "object"]), "response_format.json_schema.schema"),
    ]
    for name, fmt, param in refusals:
        try:
            ask("Say hello.", fmt, max_tokens=4)
            check(f"400 for {name}", False, "no error")
        except openai.BadRequestError as e:
            check(f"400 for {name}", e.status_code == 400 and e.param == param, e.body)

    print("all structured output checks passed", flush=True)


if __name__ == "__main__":
    main()
