//! Writing small GGUF files (version 3, little-endian), for tests and fuzzing seeds.

use super::value::{code, Array, Value};
use super::DEFAULT_ALIGNMENT;

/// A tensor to write.
#[derive(Debug, Clone)]
pub struct TensorData {
    /// Its name.
    pub name: String,
    /// The ggml type code.
    pub code: u32,
    /// Dimensions in ggml's order (`dims[0]` is the row length).
    pub dims: Vec<u64>,
    /// Its data, already in the type's layout.
    pub data: Vec<u8>,
}

/// The bytes of a GGUF file with these metadata entries and tensors, laid out with the
/// alignment `general.alignment` sets (32 when absent).
pub fn to_bytes(metadata: &[(String, Value)], tensors: &[TensorData]) -> Vec<u8> {
    let alignment = metadata
        .iter()
        .find_map(|(k, v)| match v {
            Value::U32(a) if k == "general.alignment" && *a > 0 => Some(u64::from(*a)),
            _ => None,
        })
        .unwrap_or(DEFAULT_ALIGNMENT);
    let pad = |n: u64| (alignment - n % alignment) % alignment;
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        string(&mut out, key);
        out.extend(value.code().to_le_bytes());
        write_value(&mut out, value);
    }
    let mut offset = 0u64;
    for t in tensors {
        string(&mut out, &t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.code.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset += t.data.len() as u64;
        offset += pad(offset);
    }
    out.resize(out.len() + pad(out.len() as u64) as usize, 0);
    for t in tensors {
        out.extend(&t.data);
        out.resize(out.len() + pad(t.data.len() as u64) as usize, 0);
    }
    out
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend(v.to_le_bytes()),
        Value::U16(v) => out.extend(v.to_le_bytes()),
        Value::I16(v) => out.extend(v.to_le_bytes()),
        Value::U32(v) => out.extend(v.to_le_bytes()),
        Value::I32(v) => out.extend(v.to_le_bytes()),
        Value::F32(v) => out.extend(v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => string(out, s),
        Value::U64(v) => out.extend(v.to_le_bytes()),
        Value::I64(v) => out.extend(v.to_le_bytes()),
        Value::F64(v) => out.extend(v.to_le_bytes()),
        Value::Array(Array::Strings(items)) => {
            out.extend(code::STRING.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for s in items {
                string(out, s);
            }
        }
        Value::Array(Array::Numbers { code: c, values }) => {
            out.extend(c.to_le_bytes());
            out.extend((values.len() as u64).to_le_bytes());
            for &v in values {
                write_value(out, &number(*c, v));
            }
        }
    }
}

/// `v` as a scalar of type code `c` (float64 for unknown codes).
fn number(c: u32, v: f64) -> Value {
    match c {
        code::U8 => Value::U8(v as u8),
        code::I8 => Value::I8(v as i8),
        code::U16 => Value::U16(v as u16),
        code::I16 => Value::I16(v as i16),
        code::U32 => Value::U32(v as u32),
        code::I32 => Value::I32(v as i32),
        code::F32 => Value::F32(v as f32),
        code::BOOL => Value::Bool(v != 0.0),
        code::U64 => Value::U64(v as u64),
        code::I64 => Value::I64(v as i64),
        _ => Value::F64(v),
    }
}
