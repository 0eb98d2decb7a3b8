//! Reusing the KV cache of an earlier request whose tokens start the new prompt.
//!
//! A slot holds one conversation's caches and the tokens they cover. A new prompt takes
//! the slot sharing its longest prefix, truncates the caches to that prefix (a quantized
//! cache may keep fewer tokens: it keeps whole groups) and prefills only the rest.
//!
//! A request may name its conversation (`Engine::generate_in`): it then always gets that
//! conversation's slot, and anonymous requests never truncate a named slot for its prefix
//! (they may still evict it when every slot is in use). A slot built with other cache
//! settings is never reused: the caller rebuilds its caches (see `Slot::rebuild`).

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
    /// The conversation the slot belongs to, for requests that name one.
    pub conversation: Option<String>,
}

impl Slot {
    /// An empty slot.
    pub fn new(choice: CacheConfig, caches: Vec<Box<dyn KvCache>>) -> Self {
        Self {
            choice,
            caches,
            tokens: Vec::new(),
            last_used: Instant::now(),
            conversation: None,
        }
    }

    /// Empties the slot and gives it new caches of kind `choice` (a slot whose caches were
    /// built with other settings cannot serve a request: truncating them would run it on
    /// the old settings).
    pub fn rebuild(&mut self, choice: CacheConfig, caches: Vec<Box<dyn KvCache>>) {
        self.choice = choice;
        self.caches = caches;
        self.tokens.clear();
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

impl Slot {
    /// Makes the caches and the token list agree after a generation, which may leave the
    /// caches one token longer (an end-of-text token fed ahead of being read) or shorter
    /// (a last token accepted but not fed) than the tokens (see `crate::decode`).
    pub fn sync(&mut self) -> Result<(), crate::cache::CacheError> {
        let held = self.caches.first().map_or(0, |c| c.len());
        if held > self.tokens.len() {
            self.truncate(self.tokens.len())?;
        } else {
            self.tokens.truncate(held);
        }
        Ok(())
    }
}

/// Length of the common prefix of two token lists.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The slot to serve an anonymous `prompt` with: the anonymous one of the same cache kind
/// sharing the longest prefix, else a new one while fewer than `max_slots` exist, else the
/// least recently used. Returns the index into `slots` (a new slot is pushed by the caller
/// when it is `len`). The least recently used slot may have another cache kind: the caller
/// must rebuild it then.
pub fn choose(slots: &[Slot], choice: CacheConfig, prompt: &[u32], max_slots: usize) -> usize {
    let best = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.choice == choice && s.conversation.is_none())
        .map(|(i, s)| (common_prefix(&s.tokens, prompt), i))
        .max();
    match best {
        Some((shared, i)) if shared > 0 => i,
        _ => new_or_least_recent(slots, max_slots),
    }
}

/// The slot of `conversation`, else a new one while fewer than `max_slots` exist, else the
/// least recently used (which the caller hands over to the conversation).
pub fn choose_for(slots: &[Slot], conversation: &str, max_slots: usize) -> usize {
    slots
        .iter()
        .position(|s| s.conversation.as_deref() == Some(conversation))
        .unwrap_or_else(|| new_or_least_recent(slots, max_slots))
}

fn new_or_least_recent(slots: &[Slot], max_slots: usize) -> usize {
    if slots.len() < max_slots.max(1) {
        return slots.len();
    }
    slots
        .iter()
        .enumerate()
        .min_by_key(|(_, s)| s.last_used)
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(tokens: &[u32]) -> Slot {
        let mut s = Slot::new(
            CacheConfig::Full,
            vec![CacheConfig::Full.make(&crate::backend::Backend::HOST)],
        );
        s.tokens = tokens.to_vec();
        s
    }

    /// A slot whose one cache holds `held` positions and whose token list is `tokens`.
    fn filled(held: usize, tokens: usize) -> Slot {
        let mut s = slot(&(0..tokens as u32).collect::<Vec<_>>());
        let kv = mlx_rs::Array::from_slice(&vec![0.5f32; held * 4], &[1, 1, held as i32, 4]);
        s.caches[0].attend(&kv, &kv, &kv, 1.0).unwrap();
        s
    }

    #[test]
    fn sync_cuts_the_longer_of_caches_and_tokens() {
        // A token fed ahead of being read (an end-of-text token on MLX): the cache is cut.
        let mut s = filled(6, 5);
        s.sync().unwrap();
        assert_eq!((s.caches[0].len(), s.tokens.len()), (5, 5));
        // A token accepted but never fed (the host backend): the token list is cut.
        let mut s = filled(6, 7);
        s.sync().unwrap();
        assert_eq!((s.caches[0].len(), s.tokens.len()), (6, 6));
        let mut s = filled(6, 6);
        s.sync().unwrap();
        assert_eq!((s.caches[0].len(), s.tokens.len()), (6, 6));
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

    #[test]
    fn conversations_keep_their_own_slots() {
        let mut slots = vec![slot(&[1, 2, 3]), slot(&[1, 2, 9, 9])];
        slots[1].conversation = Some("chat-1".into());
        assert_eq!(choose_for(&slots, "chat-1", 2), 1);
        // Unknown conversation: a new slot while there is room, else the oldest.
        assert_eq!(choose_for(&slots, "chat-2", 3), 2);
        assert_eq!(choose_for(&slots, "chat-2", 2), 0);
        // An anonymous prompt does not take over a conversation's slot for its prefix.
        assert_eq!(choose(&slots, CacheConfig::Full, &[1, 2, 9, 4], 2), 0);
    }
}
