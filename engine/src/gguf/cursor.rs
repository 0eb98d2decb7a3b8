//! Bounds-checked little-endian reads over a prefix of a file.

use super::GgufError;

/// Reads through `bytes`, the first bytes of a file of `file_len` bytes. A read past
/// `file_len` is [`GgufError::Truncated`]; a read past `bytes` but within the file is
/// [`GgufError::NeedMore`], so that the caller can read more of the file and parse again.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    file_len: u64,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8], file_len: u64) -> Self {
        Self {
            bytes,
            pos: 0,
            file_len: file_len.max(bytes.len() as u64),
        }
    }

    /// The offset of the next read.
    pub(super) fn pos(&self) -> u64 {
        self.pos as u64
    }

    pub(super) fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Bytes of the file after the cursor.
    pub(super) fn remaining(&self) -> u64 {
        self.file_len - self.pos as u64
    }

    /// The next `n` bytes.
    pub(super) fn take(
        &mut self,
        n: u64,
        what: &dyn Fn() -> String,
    ) -> Result<&'a [u8], GgufError> {
        let start = self.pos as u64;
        let truncated = || GgufError::Truncated {
            what: what(),
            offset: start,
            file_len: self.file_len,
        };
        let end = start.checked_add(n).ok_or_else(truncated)?;
        if end > self.file_len {
            return Err(truncated());
        }
        if end > self.bytes.len() as u64 {
            return Err(GgufError::NeedMore(end));
        }
        // `end <= bytes.len()`, so it fits a usize.
        let slice = &self.bytes[self.pos..end as usize];
        self.pos = end as usize;
        Ok(slice)
    }

    pub(super) fn array<const N: usize>(
        &mut self,
        what: &dyn Fn() -> String,
    ) -> Result<[u8; N], GgufError> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(super) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(super) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: a `u64` length, then that many UTF-8 bytes (at most `limit`).
    pub(super) fn string(
        &mut self,
        limit: u64,
        what: &dyn Fn() -> String,
    ) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        if len > limit.min(self.remaining()) {
            return Err(GgufError::Implausible {
                what: format!("the length of {}", what()),
                value: len,
                limit: limit.min(self.remaining()),
            });
        }
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::Utf8(what()))
    }
}
