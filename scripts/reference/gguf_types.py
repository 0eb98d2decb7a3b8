"""GGUF files of every tensor type the engine loads, for engine/tests/gguf_types.rs, made
with the `gguf` package (llama.cpp's own Python library) as the independent reference.

  blocks OUT_DIR      blocks.gguf: one tensor of random (valid) blocks per type;
                      expected.gguf: the same tensors as gguf's dequantizer decodes them (F32).
  smollm2 SRC OUT_DIR the offline SmolLM2 GGUF as F16 and as three llama.cpp-style mixes:
                      Q4_K_M, Q5_K_M and Q6_K. SmolLM2's rows (576 values) do not fill the
                      256-value K-quant blocks, so, as llama-quantize does, only ffn_down
                      (rows of 1536) takes the K type; other matrices take its fallback
                      (Q5_0, Q5_1, Q8_0), the embedding Q8_0; and a Q8_0 file. Beside
                      each, NAME-values.F16.gguf: its values as gguf decodes them, in F16.

The gguf package decodes every type but encodes only Q4_0 to Q8_0; the K-quant encoders
below are simple (min/max per sub-block, no search), and each is checked here against
gguf's decoder before a file is written.

  .venv/bin/python scripts/reference/gguf_types.py blocks /tmp/out
"""

import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize, quantize

QK_K = 256

# Where each type's float16 factors sit in its block (offset in bytes), so that random
# blocks get finite, modest ones.
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
BLOCK = {
    T.Q4_0: (32, 18), T.Q4_1: (32, 20), T.Q5_0: (32, 22), T.Q5_1: (32, 24), T.Q8_0: (32, 34),
    T.Q2_K: (256, 84), T.Q3_K: (256, 110), T.Q4_K: (256, 144), T.Q5_K: (256, 176),
    T.Q6_K: (256, 210),
}


def random_blocks(rng, qtype, rows, cols):
    elems, size = BLOCK[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // elems, size), dtype=np.uint8)
    for at in HALF_FIELDS[qtype]:
        half = rng.uniform(0.001, 0.05, size=len(blocks)).astype(np.float16)
        blocks[:, at:at + 2] = half.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


def write_blocks(out_dir):
    rng = np.random.default_rng(7)
    rows, cols = 4, 512
    got = GGUFWriter(out_dir / "blocks.gguf", "llama")
    want = GGUFWriter(out_dir / "expected.gguf", "llama")
    for qtype in BLOCK:
        data = random_blocks(rng, qtype, rows, cols)
        got.add_tensor(f"{qtype.name}.weight", data, raw_dtype=qtype)
        want.add_tensor(f"{qtype.name}.weight", dequantize(data, qtype).astype(np.float32))
    floats = rng.standard_normal((rows, cols)).astype(np.float32)
    got.add_tensor("F32.weight", floats)
    want.add_tensor("F32.weight", floats)
    got.add_tensor("F16.weight", floats.astype(np.float16))
    want.add_tensor("F16.weight", floats.astype(np.float16).astype(np.float32))
    bf16 = quantize(floats, T.BF16)
    got.add_tensor("BF16.weight", bf16, raw_dtype=T.BF16)
    want.add_tensor("BF16.weight", dequantize(bf16, T.BF16).astype(np.float32))
    for w in (got, want):
        finish(w)


def f16(x):
    return x.astype(np.float16)


def pack_scales_k4(sc, mn):
    """Q4_K's and Q5_K's 12 bytes of eight 6-bit scales and mins (inverse of the decoder)."""
    out = np.zeros((len(sc), 12), dtype=np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = mn[:, 0:4] | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((mn[:, 4:8] & 0x0F) << 4)
    return out


def encode_k_affine(x, bits):
    """Q4_K (bits 4) or Q5_K (bits 5): per 32 values `d*sc*q - dmin*m`."""
    top = (1 << bits) - 1
    sub = x.reshape(-1, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0)
    hi = sub.max(axis=2)
    scale, minimum = (hi - lo) / top, -lo
    d = f16(scale.max(axis=1) / 63)
    dmin = f16(minimum.max(axis=1) / 63)
    df, mf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(scale, df, out=np.zeros_like(scale), where=df > 0)), 0, 63)
    mn = np.clip(np.round(np.divide(minimum, mf, out=np.zeros_like(minimum), where=mf > 0)), 0, 63)
    step, zero = (df * sc)[:, :, None], (mf * mn)[:, :, None]
    q = np.clip(np.round(np.divide(sub + zero, step, out=np.zeros_like(sub), where=step > 0)), 0, top)
    q = q.astype(np.uint8)
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    low = q & 0x0F
    qs = (low[:, 0::2, :] | (low[:, 1::2, :] << 4)).reshape(-1, 128)
    parts = [d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
             pack_scales_k4(sc, mn)]
    if bits == 5:
        qh = np.zeros((len(q), 32), dtype=np.uint8)
        for i in range(8):
            qh |= ((q[:, i, :] >> 4) & 1) << i
        parts.append(qh)
    return np.concatenate(parts + [qs], axis=1)


def encode_q6_k(x):
    """Q6_K: per 16 values `d*sc*(q-32)`, sc a signed byte."""
    sub = x.reshape(-1, 16, 16)
    amax = np.abs(sub).max(axis=2)
    scale = amax / 31
    d = f16(scale.max(axis=1) / 127)
    df = d.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(scale, df, out=np.zeros_like(scale), where=df > 0)), -128, 127)
    step = (df * sc)[:, :, None]
    q = np.clip(np.round(np.divide(sub, step, out=np.zeros_like(sub), where=step != 0)), -32, 31)
    c = (q + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # [block, half, quarter, l]
    ql = np.concatenate([(c[:, :, 0] & 0x0F) | ((c[:, :, 2] & 0x0F) << 4),
                         (c[:, :, 1] & 0x0F) | ((c[:, :, 3] & 0x0F) << 4)], axis=2)
    qh = (c[:, :, 0] >> 4) | ((c[:, :, 1] >> 4) << 2) | ((c[:, :, 2] >> 4) << 4) | ((c[:, :, 3] >> 4) << 6)
    return np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64),
                           sc.astype(np.int8).view(np.uint8), d.view(np.uint8).reshape(-1, 2)], axis=1)


ENCODERS = {
    T.Q4_K: lambda x: encode_k_affine(x, 4),
    T.Q5_K: lambda x: encode_k_affine(x, 5),
    T.Q6_K: encode_q6_k,
}


# The 32-value type each K-quant encoder must stay close to (relative RMS error at most
# 1.5 times gguf's own encoder's): a check that the bytes mean what they should.
BASELINE = {T.Q4_K: T.Q4_0, T.Q5_K: T.Q5_0, T.Q6_K: T.Q5_0}


def rel_rms(back, x):
    return float(np.sqrt(np.mean((back - x) ** 2) / np.mean(x ** 2)))


def encode(x, qtype):
    """x ([rows, cols] float32) in `qtype`, as bytes [rows, row bytes]; K-quants checked
    through gguf's decoder against gguf's own encoder of a 32-value type."""
    if qtype not in ENCODERS:
        return quantize(x, qtype)
    rows, cols = x.shape
    data = ENCODERS[qtype](x.reshape(-1, QK_K)).reshape(rows, -1)
    err = rel_rms(dequantize(data, qtype).reshape(rows, cols), x)
    base = BASELINE[qtype]
    base_err = rel_rms(dequantize(quantize(x, base), base).reshape(rows, cols), x)
    assert err <= 1.5 * base_err, f"{qtype.name} encoder: error {err:.4f}, {base.name} {base_err:.4f}"
    return data


MIXES = {
    # file name: (general.file_type, ffn_down's type, other matrices', the embedding's)
    "F16": (1, None, None, None),
    "Q8_0": (7, T.Q8_0, T.Q8_0, T.Q8_0),
    "Q4_K_M": (15, T.Q4_K, T.Q5_0, T.Q8_0),
    "Q5_K_M": (17, T.Q5_K, T.Q5_1, T.Q8_0),
    "Q6_K": (18, T.Q6_K, T.Q8_0, T.Q8_0),
}


def copy_metadata(reader, writer, file_type):
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", "general.file_type"):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), main, sub)
    writer.add_file_type(file_type)


def write_smollm2(src, out_dir):
    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    floats = {t.name: dequantize(t.data, t.tensor_type).astype(np.float32) for t in reader.tensors}
    stem = Path(src).name.split(".")[0]
    for name, (file_type, down, other, embed) in MIXES.items():
        writer = GGUFWriter(out_dir / f"{stem}.{name}.gguf", arch)
        copy_metadata(reader, writer, file_type)
        for tensor_name, x in floats.items():
            if x.ndim == 1 or "norm" in tensor_name:
                writer.add_tensor(tensor_name, x)
                continue
            qtype = down if "ffn_down" in tensor_name else embed if "token_embd" in tensor_name else other
            if qtype is None:
                writer.add_tensor(tensor_name, x.astype(np.float16))
            else:
                writer.add_tensor(tensor_name, encode(x, qtype), raw_dtype=qtype)
        finish(writer)
        if name != "F16":
            # The mix's own values, decoded by gguf, in float16: what loading the mix must
            # reproduce.
            mixed = GGUFReader(out_dir / f"{stem}.{name}.gguf")
            writer = GGUFWriter(out_dir / f"{stem}.{name}-values.F16.gguf", arch)
            copy_metadata(reader, writer, 1)
            for t in mixed.tensors:
                x = dequantize(t.data, t.tensor_type).astype(np.float32)
                writer.add_tensor(t.name, x if x.ndim == 1 else x.astype(np.float16))
            finish(writer)


def finish(writer):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "blocks":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        write_blocks(out)
    elif len(sys.argv) == 4 and sys.argv[1] == "smollm2":
        out = Path(sys.argv[3])
        out.mkdir(parents=True, exist_ok=True)
        write_smollm2(sys.argv[2], out)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
