//! Stop sequences over streamed text: the output is cut before the first match, also when
//! a match spans several tokens. While the newest text could still be the start of a stop
//! sequence it is held back, and released once it cannot.

/// Filters streamed text pieces against stop sequences.
#[derive(Debug, Clone, Default)]
pub struct StopFilter {
    stops: Vec<String>,
    /// Text received but not released: a suffix that may begin a stop sequence.
    held: String,
    stopped: bool,
}

impl StopFilter {
    /// A filter for `stops` (none: every piece passes through at once).
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop sequence has matched (later pieces are ignored).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Takes the next piece; returns the text that is now safe to release and whether a
    /// stop sequence matched (then the text is everything before the match).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.held.push_str(piece);
        // The earliest match wins. Released text never ends inside a possible match, so a
        // match can only start in the held text.
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.stopped = true;
            let mut out = std::mem::take(&mut self.held);
            out.truncate(at);
            return (out, true);
        }
        let keep = self.longest_partial_match();
        let out = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        (out, false)
    }

    /// The rest of the held text, when the generation ends without a match.
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of the held text that is a proper prefix of
    /// a stop sequence. (Such a suffix starts on a character boundary: it equals the start
    /// of a valid string.)
    fn longest_partial_match(&self) -> usize {
        let held = self.held.as_bytes();
        self.stops
            .iter()
            .map(|stop| {
                let stop = stop.as_bytes();
                (1..stop.len().min(held.len() + 1))
                    .rev()
                    .find(|&k| held[held.len() - k..] == stop[..k])
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds pieces; returns the released text and whether it stopped.
    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool) {
        let mut f = StopFilter::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        for p in pieces {
            let (text, hit) = f.push(p);
            out.push(text);
            if hit {
                return (out, true);
            }
        }
        out.push(f.finish());
        (out, false)
    }

    #[test]
    fn without_stops_everything_passes_at_once() {
        assert_eq!(
            run(&[], &["a", "b"]),
            (vec!["a".into(), "b".into(), "".into()], false)
        );
    }

    #[test]
    fn a_match_across_pieces_is_cut_and_its_start_held_back() {
        let (out, hit) = run(&["END"], &["The e", "nd. E", "N", "D and more"]);
        assert!(hit);
        assert_eq!(out, vec!["The e", "nd. ", "", ""]);
        assert_eq!(out.concat(), "The end. ");
    }

    #[test]
    fn a_false_start_is_released_later() {
        let (out, hit) = run(&["\n\n"], &["a\n", "b", "\n"]);
        assert!(!hit);
        assert_eq!(out, vec!["a", "\nb", "", "\n"]);
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        let (out, hit) = run(&["cd", "b"], &["abcd"]);
        assert!(hit);
        assert_eq!(out.concat(), "a");
        let (out, _) = run(&["xyz", "yq"], &["axy", "q"]);
        assert_eq!(out.concat(), "ax");
    }

    #[test]
    fn multibyte_text_is_split_on_character_boundaries() {
        let (out, hit) = run(&["é!"], &["café", " ok é", "!"]);
        assert!(hit);
        assert_eq!(out, vec!["caf", "é ok ", ""]);
        let (out, hit) = run(&["🐋🐋"], &["a🐋", "b🐋"]);
        assert!(!hit);
        assert_eq!(out.concat(), "a🐋b🐋");
    }
}
