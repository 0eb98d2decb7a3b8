//! GGUF metadata: typed values and lookups by key.

use std::collections::HashMap;

use super::cursor::Cursor;
use super::{GgufError, MAX_STRING_BYTES};

/// The value type codes of the GGUF specification.
pub mod code {
    /// `uint8`
    pub const U8: u32 = 0;
    /// `int8`
    pub const I8: u32 = 1;
    /// `uint16`
    pub const U16: u32 = 2;
    /// `int16`
    pub const I16: u32 = 3;
    /// `uint32`
    pub const U32: u32 = 4;
    /// `int32`
    pub const I32: u32 = 5;
    /// `float32`
    pub const F32: u32 = 6;
    /// `bool` (one byte)
    pub const BOOL: u32 = 7;
    /// `string` (`u64` length and UTF-8 bytes)
    pub const STRING: u32 = 8;
    /// `array` (element type, `u64` count, elements)
    pub const ARRAY: u32 = 9;
    /// `uint64`
    pub const U64: u32 = 10;
    /// `int64`
    pub const I64: u32 = 11;
    /// `float64`
    pub const F64: u32 = 12;
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `uint8`
    U8(u8),
    /// `int8`
    I8(i8),
    /// `uint16`
    U16(u16),
    /// `int16`
    I16(i16),
    /// `uint32`
    U32(u32),
    /// `int32`
    I32(i32),
    /// `float32`
    F32(f32),
    /// `bool`
    Bool(bool),
    /// `string`
    String(String),
    /// `uint64`
    U64(u64),
    /// `int64`
    I64(i64),
    /// `float64`
    F64(f64),
    /// A one-level array of one element type (GGUF allows nesting; no model uses it, and
    /// this reader refuses it).
    Array(Array),
}

/// A metadata array.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    /// Numbers of any numeric type (and booleans as 0 or 1), widened to `f64`, with the
    /// type code they were stored as.
    Numbers {
        /// The element type code.
        code: u32,
        /// The values.
        values: Vec<f64>,
    },
    /// Strings.
    Strings(Vec<String>),
}

/// Size in bytes of a fixed-size value type, `None` for strings, arrays and unknown codes.
pub(super) fn fixed_size(code: u32) -> Option<u64> {
    Some(match code {
        code::U8 | code::I8 | code::BOOL => 1,
        code::U16 | code::I16 => 2,
        code::U32 | code::I32 | code::F32 => 4,
        code::U64 | code::I64 | code::F64 => 8,
        _ => return None,
    })
}

/// The specification's name of a type code.
pub fn type_name(code: u32) -> &'static str {
    match code {
        code::U8 => "uint8",
        code::I8 => "int8",
        code::U16 => "uint16",
        code::I16 => "int16",
        code::U32 => "uint32",
        code::I32 => "int32",
        code::F32 => "float32",
        code::BOOL => "bool",
        code::STRING => "string",
        code::ARRAY => "array",
        code::U64 => "uint64",
        code::I64 => "int64",
        code::F64 => "float64",
        _ => "unknown",
    }
}

impl Value {
    /// The value's type code (an array's is [`code::ARRAY`]).
    pub fn code(&self) -> u32 {
        match self {
            Value::U8(_) => code::U8,
            Value::I8(_) => code::I8,
            Value::U16(_) => code::U16,
            Value::I16(_) => code::I16,
            Value::U32(_) => code::U32,
            Value::I32(_) => code::I32,
            Value::F32(_) => code::F32,
            Value::Bool(_) => code::BOOL,
            Value::String(_) => code::STRING,
            Value::U64(_) => code::U64,
            Value::I64(_) => code::I64,
            Value::F64(_) => code::F64,
            Value::Array(_) => code::ARRAY,
        }
    }

    /// A description of the type for messages ("uint32", "array of string").
    pub fn type_description(&self) -> &'static str {
        match self {
            Value::Array(Array::Strings(_)) => "an array of strings",
            Value::Array(Array::Numbers { .. }) => "an array of numbers",
            Value::String(_) => "a string",
            _ => "a number",
        }
    }

    /// A numeric scalar as `f64` (booleans are 0 or 1).
    pub fn as_f64(&self) -> Option<f64> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::F32(v) => v.into(),
            Value::Bool(v) => u8::from(v).into(),
            Value::U64(v) => v as f64,
            Value::I64(v) => v as f64,
            Value::F64(v) => v,
            Value::String(_) | Value::Array(_) => return None,
        })
    }

    /// Reads a value of type `code` (`key` names it in errors).
    pub(super) fn read(cur: &mut Cursor<'_>, code: u32, key: &str) -> Result<Value, GgufError> {
        let what = || format!("the value of metadata {key:?}");
        Ok(match code {
            code::STRING => Value::String(cur.string(MAX_STRING_BYTES, &what)?),
            code::ARRAY => Value::Array(read_array(cur, key)?),
            _ => {
                let Some(size) = fixed_size(code) else {
                    return Err(GgufError::UnknownValueType {
                        key: key.to_string(),
                        code,
                    });
                };
                scalar(code, cur.take(size, &what)?)
            }
        })
    }
}

/// A fixed-size value from its little-endian bytes (`bytes.len()` is its size).
fn scalar(code: u32, b: &[u8]) -> Value {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    let (b1, b2, b4, b8) = ([w[0]], [w[0], w[1]], [w[0], w[1], w[2], w[3]], w);
    match code {
        code::U8 => Value::U8(b1[0]),
        code::I8 => Value::I8(i8::from_le_bytes(b1)),
        code::U16 => Value::U16(u16::from_le_bytes(b2)),
        code::I16 => Value::I16(i16::from_le_bytes(b2)),
        code::U32 => Value::U32(u32::from_le_bytes(b4)),
        code::I32 => Value::I32(i32::from_le_bytes(b4)),
        code::F32 => Value::F32(f32::from_le_bytes(b4)),
        code::BOOL => Value::Bool(b1[0] != 0),
        code::U64 => Value::U64(u64::from_le_bytes(b8)),
        code::I64 => Value::I64(i64::from_le_bytes(b8)),
        _ => Value::F64(f64::from_le_bytes(b8)),
    }
}

fn read_array(cur: &mut Cursor<'_>, key: &str) -> Result<Array, GgufError> {
    let what = || format!("the array header of metadata {key:?}");
    let element = cur.u32(&what)?;
    let count = cur.u64(&what)?;
    // Every element takes at least this many bytes: a count the rest of the file cannot
    // hold is refused before anything is allocated or read.
    let least = match element {
        code::STRING => 8,
        code::ARRAY => {
            return Err(GgufError::Unsupported(format!(
                "metadata {key:?} is an array of arrays, which no supported model uses: the \
                 file is damaged or not a supported model"
            )))
        }
        other => fixed_size(other).ok_or_else(|| GgufError::UnknownValueType {
            key: format!("{key}[]"),
            code: other,
        })?,
    };
    let limit = cur.remaining() / least;
    if count > limit {
        return Err(GgufError::Implausible {
            what: format!("the element count of metadata array {key:?}"),
            value: count,
            limit,
        });
    }
    let what = || format!("the elements of metadata array {key:?}");
    if element == code::STRING {
        // Grown as read, so that memory follows the bytes actually present.
        let mut strings = Vec::new();
        for _ in 0..count {
            strings.push(cur.string(MAX_STRING_BYTES, &what)?);
        }
        return Ok(Array::Strings(strings));
    }
    let bytes = cur.take(count * least, &what)?;
    let values = bytes
        .chunks_exact(least as usize)
        .map(|b| scalar(element, b).as_f64().unwrap_or(f64::NAN))
        .collect();
    Ok(Array::Numbers {
        code: element,
        values,
    })
}

/// All metadata of a file, by key.
#[derive(Clone, Default, PartialEq)]
pub struct Metadata {
    entries: HashMap<String, Value>,
}

/// Entries sorted by key, so that two equal headers print the same (the fuzz target
/// compares headers through `Debug`, since a NaN value is not `==` to itself).
impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sorted: std::collections::BTreeMap<_, _> = self.entries.iter().collect();
        f.debug_struct("Metadata")
            .field("entries", &sorted)
            .finish()
    }
}

impl Metadata {
    /// Adds an entry; a key seen before is an error.
    pub(super) fn insert(&mut self, key: String, value: Value) -> Result<(), GgufError> {
        if self.entries.contains_key(&key) {
            return Err(GgufError::DuplicateKey(key));
        }
        self.entries.insert(key, value);
        Ok(())
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.get(key)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    fn wrong(&self, key: &str, expected: &'static str, found: &Value) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: found.type_description(),
        }
    }

    /// A string value.
    pub fn string(&self, key: &str) -> Result<Option<&str>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong(key, "a string", other)),
        }
    }

    /// An array of strings.
    pub fn strings(&self, key: &str) -> Result<Option<&[String]>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(Array::Strings(s))) => Ok(Some(s)),
            // An empty array says nothing of its element type but the code: accept it.
            Some(Value::Array(Array::Numbers { values, .. })) if values.is_empty() => Ok(Some(&[])),
            Some(other) => Err(self.wrong(key, "an array of strings", other)),
        }
    }

    /// Numbers: a numeric array, or a scalar as one number.
    pub fn numbers(&self, key: &str) -> Result<Option<Vec<f64>>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(Array::Numbers { values, .. })) => Ok(Some(values.clone())),
            Some(v) => match v.as_f64() {
                Some(n) => Ok(Some(vec![n])),
                None => Err(self.wrong(key, "numbers", v)),
            },
        }
    }

    /// A numeric scalar (or the first element of a numeric array).
    pub fn number(&self, key: &str) -> Result<Option<f64>, GgufError> {
        Ok(self.numbers(key)?.and_then(|v| v.first().copied()))
    }
}
