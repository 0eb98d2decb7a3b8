//! Bit packing in MLX's layout: code `i` of a word sits at bits `[i*b, (i+1)*b)`, so
//! packed data feeds MLX's `quantized_matmul` and `dequantize` as it is.

/// Packs `b`-bit codes (`b` in {2, 4, 8}) into `u32` words, `32 / b` codes per word.
///
/// # Panics
/// If `bits` is not 2, 4 or 8, or `codes.len()` is not a multiple of `32 / bits`. Codes must
/// be below `2^bits` (checked in debug builds).
pub fn pack(codes: &[u8], bits: u32) -> Vec<u32> {
    let mut words = vec![0; codes.len() / per_word(bits)];
    pack_into(codes, bits, &mut words);
    words
}

/// [`pack`] into `words`, which must hold exactly the packed codes.
///
/// # Panics
/// As [`pack`], and if `words` is not `codes.len() / (32 / bits)` long.
pub fn pack_into(codes: &[u8], bits: u32, words: &mut [u32]) {
    let per_word = per_word(bits);
    assert_eq!(codes.len() % per_word, 0, "codes must fill whole words");
    assert_eq!(
        words.len(),
        codes.len() / per_word,
        "one word per {per_word} codes"
    );
    for (word, chunk) in words.iter_mut().zip(codes.chunks_exact(per_word)) {
        *word = chunk.iter().enumerate().fold(0u32, |word, (i, &code)| {
            debug_assert!(
                u32::from(code) < (1 << bits),
                "code {code} exceeds {bits} bits"
            );
            word | (u32::from(code) << (i as u32 * bits))
        });
    }
}

/// Unpacks words made by [`pack`] back into one code per byte.
///
/// # Panics
/// If `bits` is not 2, 4 or 8.
pub fn unpack(words: &[u32], bits: u32) -> Vec<u8> {
    let per_word = per_word(bits);
    let mask = (1u32 << bits) - 1;
    words
        .iter()
        .flat_map(|&word| (0..per_word).map(move |i| ((word >> (i as u32 * bits)) & mask) as u8))
        .collect()
}

fn per_word(bits: u32) -> usize {
    // KIVI packs 2 or 4 bits; GGUF weights held at 8 bits are packed here too.
    assert!(
        matches!(bits, 2 | 4 | 8),
        "packing takes 2, 4 or 8 bits, not {bits}"
    );
    32 / bits as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_code_sits_in_the_lowest_bits() {
        let mut codes = vec![0u8; 16];
        codes[0] = 3;
        codes[15] = 1;
        assert_eq!(pack(&codes, 2), vec![3 | (1 << 30)]);
        let codes: Vec<u8> = (0..8).collect();
        assert_eq!(pack(&codes, 4), vec![0x7654_3210]);
    }

    #[test]
    fn round_trips() {
        for bits in [2u32, 4, 8] {
            let codes: Vec<u8> = (0..256u32)
                .map(|i| ((i * 7 + i / 3) % (1 << bits)) as u8)
                .collect();
            assert_eq!(unpack(&pack(&codes, bits), bits), codes);
        }
    }
}
