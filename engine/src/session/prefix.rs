//! Reusing the KV cache of an earlier request whose tokens start the new prompt.
//!
//! A slot holds one conversation's caches and the tokens they cover. A new prompt takes
//! the slot sharing its longest prefix, truncates the caches to that prefix (a quantized
//! cache may keep fewer tokens: it keeps whole groups) and prefills only the rest.

use std::time::Instant;

use crate::cache::{CacheConfig, KvCache};

/// One conversation's caches and the tokens they hold.
pub struct Slot {
    /// The cache kind, fixed for the slot's life.
    pub choice: CacheConfig,
    /// One cache per layer.
    pub caches: Vec<Box<dyn KvCache>>,
    /// The tokens whose keys and values the caches hold, in order.
    pub tokens: Vec<u32>,
    /// When the slot last served a request.
    pub last_used: Instant,
}

impl Slot {
    /// An empty slot.
    pub fn new(choice: CacheConfig, caches: Vec<Box<dyn KvCache>>) -> Self {
        Self {
            choice,
            caches,
            tokens: Vec::new(),
            last_used: Instant::now(),
        }
    }

    /// Keeps at most `len` tokens (in every layer the same number) and returns how many
    /// were kept.
    pub fn truncate(&mut self, len: usize) -> Result<usize, crate::cache::CacheError> {
        let mut keep = len.min(self.tokens.len());
        // A cache may keep fewer than asked; bring all layers down to the smallest.
        loop {
            let mut kept = keep;
            for cache in self.caches.iter_mut() {
                kept = kept.min(cache.truncate(keep)?);
            }
            if kept == keep {
                break;
            }
            keep = kept;
        }
        self.tokens.truncate(keep);
        Ok(keep)
    }
}

/// Length of the common prefix of two token lists.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The slot to serve `prompt` with: the one of the same cache kind sharing the longest
/// prefix, else a new one while fewer than `max_slots` exist, else the least recently used.
/// Returns the index into `slots` (a new slot is pushed by the caller when it is `len`).
pub fn choose(slots: &[Slot], choice: CacheConfig, prompt: &[u32], max_slots: usize) -> usize {
    let best = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.choice == choice)
        .map(|(i, s)| (common_prefix(&s.tokens, prompt), i))
        .max();
    match best {
        Some((shared, i)) if shared > 0 => i,
        _ if slots.len() < max_slots.max(1) => slots.len(),
        _ => slots
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.last_used)
            .map_or(0, |(i, _)| i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::FullCache;

    fn slot(tokens: &[u32]) -> Slot {
        let mut s = Slot::new(CacheConfig::Full, vec![Box::new(FullCache::new())]);
        s.tokens = tokens.to_vec();
        s
    }

    #[test]
    fn picks_the_longest_shared_prefix_of_the_same_kind() {
        let slots = vec![slot(&[1, 2, 3]), slot(&[1, 2, 9, 9]), slot(&[5])];
        assert_eq!(common_prefix(&[1, 2, 9, 4], &slots[1].tokens), 3);
        assert_eq!(choose(&slots, CacheConfig::Full, &[1, 2, 9, 4], 3), 1);
        assert_eq!(choose(&slots, CacheConfig::Full, &[5, 5], 3), 2);
        // Nothing shared and no room: the least recently used slot (the first made).
        assert_eq!(choose(&slots, CacheConfig::Full, &[7], 3), 0);
        // Nothing shared, room left: a new slot.
        assert_eq!(choose(&slots, CacheConfig::Full, &[7], 4), 3);
        let kivi = CacheConfig::Kivi(crate::cache::KiviConfig::default());
        assert_eq!(choose(&slots, kivi, &[1, 2, 3], 4), 3);
    }
}
