//! Cutting strings that callers control without splitting a character.
//!
//! Byte slicing (`&s[..n]`) panics when `n` falls inside a multi-byte UTF-8 character, and a
//! name, a prefix or a message from a request can hold any character. Every place that
//! shortens such a string goes through [`truncate`].

/// The longest prefix of `s` that is at most `max_bytes` bytes long and ends on a
/// character boundary (so it may be shorter than `max_bytes` by up to three bytes).
///
/// ```
/// use listwatch_api::text::truncate;
/// assert_eq!(truncate("abc", 2), "ab");
/// assert_eq!(truncate("aé", 2), "a"); // 'é' is two bytes: never split
/// assert_eq!(truncate("abc", 10), "abc");
/// ```
pub fn truncate(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Naive model: the longest prefix of whole characters within the byte budget.
        #[test]
        fn truncation_never_panics_and_never_splits_a_character(s in "\\PC{0,40}", max in 0usize..80) {
            let t = truncate(&s, max);
            let mut model = String::new();
            for c in s.chars() {
                if model.len() + c.len_utf8() > max {
                    break;
                }
                model.push(c);
            }
            prop_assert_eq!(t, model.as_str());
            prop_assert!(s.starts_with(t));
        }
    }

    #[test]
    fn multibyte_characters_are_kept_whole_or_dropped() {
        let s = format!("{}é", "a".repeat(57));
        assert_eq!(truncate(&s, 58), "a".repeat(57));
        assert_eq!(truncate("日本語", 4), "日");
        assert_eq!(truncate("🦀x", 3), "");
        assert_eq!(truncate("", 0), "");
    }
}
