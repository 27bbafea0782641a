//! Bounding what an error answer repeats of a request or of a stored object.
//!
//! An error message often quotes what it refuses: a name, a field's value, a query
//! parameter, a patched object. Those come from the caller (or from storage, where a caller
//! put them) and can be megabytes long; quoting escapes them again (`"` becomes `\"`, then
//! `\\\"` once the message is itself JSON), so an unbounded quote answers a small request
//! with a body many times its size. Upstream quotes in full; here every such quote goes
//! through this module.
//!
//! What it owns:
//! - [`wire_cost`]: the budget unit. A character that no layer escapes costs its UTF-8
//!   length; one that some layer escapes (`"`, `\`, control and other non-printable
//!   characters) costs [`ESCAPED_CHAR_COST`], more than the longest form the nested escapes
//!   of an error message give it (8 bytes for a `"` quoted twice then JSON-encoded).
//! - [`echo`] / [`echo_within`]: a value cut to a budget at a character boundary, with the
//!   visible marker `...<truncated from N bytes>` (upstream has no wording for a cut value;
//!   its `field.TooLong` writes `<value omitted>`, whose form the marker follows).
//! - [`echo_json`]: the JSON text of a value, bounded the same way while it is written (the
//!   full text is never held).
//! - [`bound_status`]: the backstop every error `Status` goes through before it is sent:
//!   message, details and causes together within [`MAX_STATUS_TEXT_BYTES`].
//!
//! Invariants: nothing here slices a string at a byte index that is not a character
//! boundary; an echoed value costs at most its budget plus the marker; a bounded Status's
//! JSON is at most a constant ([`MAX_STATUS_TEXT_BYTES`] plus per-cause framing) whatever
//! its input.

use std::borrow::Cow;

use serde_json::Value;

use crate::status::{Status, StatusCause};

/// The budget of one echoed value, in [`wire_cost`] units: 1 KiB of plain text, or 85
/// characters that need escaping. Valid names (at most 253 bytes) are never cut.
pub const MAX_ECHO_BYTES: usize = 1024;

/// What a character some layer escapes counts for in [`wire_cost`]: its longest escaped
/// form (`\u{10ffff}` JSON-encoded is 11 bytes), rounded up.
pub const ESCAPED_CHAR_COST: usize = 12;

/// The budget of one error Status's text (message, details.name and every cause's reason,
/// message and field, each cause with [`CAUSE_FRAMING`]), in [`wire_cost`] units: the
/// 256 KiB a 422 Invalid report may list (the endpoints' `MAX_INVALID_REPORT_BYTES`, which
/// counts the same way) and 8 KiB for its name and message prefix, so [`bound_status`]
/// never cuts a report; it cuts only what escaped every other bound.
pub const MAX_STATUS_TEXT_BYTES: usize = 264 * 1024;

/// What one cause costs beyond its text: its JSON keys and punctuation
/// (`{"reason":"","message":"","field":""},` is 38 bytes).
pub const CAUSE_FRAMING: usize = 48;

/// Whether some layer (Rust's `{:?}`, Go's `%q`, JSON) escapes `c`.
fn escaped(c: char) -> bool {
    c == '"' || c == '\\' || c.is_control() || c.escape_debug().len() > 1
}

/// What `c` costs in [`wire_cost`] units.
fn char_cost(c: char) -> usize {
    if escaped(c) {
        ESCAPED_CHAR_COST
    } else {
        c.len_utf8()
    }
}

/// The budget `s` takes: plain characters their UTF-8 length, escaped ones
/// [`ESCAPED_CHAR_COST`]. At least `s.len()`, at most `ESCAPED_CHAR_COST * s.len()`.
pub fn wire_cost(s: &str) -> usize {
    s.chars().map(char_cost).sum()
}

/// `s` within [`MAX_ECHO_BYTES`]: see [`echo_within`].
pub fn echo(s: &str) -> Cow<'_, str> {
    echo_within(s, MAX_ECHO_BYTES)
}

/// The longest marker ([`marker`] of `usize::MAX`).
const MAX_MARKER_BYTES: usize = 48;

/// The marker after a cut value.
fn marker(total_bytes: usize) -> String {
    format!("...<truncated from {total_bytes} bytes>")
}

/// `s` itself when its [`wire_cost`] is at most `budget`; otherwise its longest prefix of
/// whole characters costing at most `budget`, followed by `...<truncated from N bytes>`
/// (`N` is `s.len()`). Reads at most the prefix and one character past it.
///
/// ```
/// use listwatch_api::echo::echo_within;
/// assert_eq!(echo_within("abc", 3), "abc");
/// assert_eq!(echo_within("abcd", 3), "abc...<truncated from 4 bytes>");
/// assert_eq!(echo_within("aé", 2), "a...<truncated from 3 bytes>"); // never splits 'é'
/// ```
pub fn echo_within(s: &str, budget: usize) -> Cow<'_, str> {
    match cut_point(s, budget) {
        Some(end) => Cow::Owned(format!(
            "{}{}",
            s.get(..end).unwrap_or_default(),
            marker(s.len())
        )),
        None => Cow::Borrowed(s),
    }
}

/// Where [`echo_within`] cuts `s` (a character boundary), or `None` when it fits.
fn cut_point(s: &str, budget: usize) -> Option<usize> {
    let mut spent = 0usize;
    for (i, c) in s.char_indices() {
        spent = spent.saturating_add(char_cost(c));
        if spent > budget {
            return Some(i);
        }
    }
    None
}

/// A writer that keeps the first `keep` bytes and counts the rest.
struct Capped {
    kept: Vec<u8>,
    keep: usize,
    total: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.keep.saturating_sub(self.kept.len());
        self.kept
            .extend_from_slice(buf.get(..room.min(buf.len())).unwrap_or_default());
        self.total = self.total.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The JSON text of `v` within [`MAX_ECHO_BYTES`], as [`echo`] cuts a string (`N` in the
/// marker is the full text's length). Holds at most [`MAX_ECHO_BYTES`] bytes of it: the
/// rest is counted as it is written, never stored.
pub fn echo_json(v: &Value) -> String {
    let mut w = Capped {
        kept: Vec::new(),
        keep: MAX_ECHO_BYTES,
        total: 0,
    };
    // Writing a Value to a writer that never fails cannot fail.
    if serde_json::to_writer(&mut w, v).is_err() {
        return String::new();
    }
    let text = match std::str::from_utf8(&w.kept) {
        Ok(t) => t,
        // A cut inside a character: keep the whole ones before it.
        Err(e) => std::str::from_utf8(w.kept.get(..e.valid_up_to()).unwrap_or_default())
            .unwrap_or_default(),
    };
    match cut_point(text, MAX_ECHO_BYTES) {
        None if text.len() == w.total => text.to_owned(),
        cut => {
            let end = cut.unwrap_or(text.len());
            format!("{}{}", text.get(..end).unwrap_or_default(), marker(w.total))
        }
    }
}

/// Cuts `s` in place to what is left of `budget` (see [`echo_within`]) and charges it.
fn charge(s: &mut String, budget: &mut usize) {
    if let Cow::Owned(cut) = echo_within(s, *budget) {
        *s = cut;
    }
    *budget = budget.saturating_sub(wire_cost(s));
}

/// Bounds an error Status's text to [`MAX_STATUS_TEXT_BYTES`]: `details.name` to
/// [`MAX_ECHO_BYTES`] (and an echo marker), then the message, then each cause in order, each cut to what is left
/// (with the marker); causes past the budget are dropped and counted in one last cause
/// `... and N more`. A Status within the budget is left as it is.
pub fn bound_status(status: &mut Status) {
    let mut budget = MAX_STATUS_TEXT_BYTES;
    if let Some(d) = status.details.as_mut() {
        // A name already cut by `echo` (its marker included) is not cut again.
        if let Cow::Owned(cut) = echo_within(&d.name, MAX_ECHO_BYTES + MAX_MARKER_BYTES) {
            d.name = cut;
        }
        budget = budget.saturating_sub(wire_cost(&d.name));
    }
    charge(&mut status.message, &mut budget);
    let Some(d) = status.details.as_mut() else {
        return;
    };
    let mut kept = 0usize;
    for c in &mut d.causes {
        if budget <= CAUSE_FRAMING + ESCAPED_CHAR_COST {
            break;
        }
        budget -= CAUSE_FRAMING;
        charge(&mut c.reason, &mut budget);
        charge(&mut c.field, &mut budget);
        charge(&mut c.message, &mut budget);
        kept += 1;
    }
    let dropped = d.causes.len() - kept;
    if dropped > 0 {
        d.causes.truncate(kept);
        d.causes.push(StatusCause {
            reason: crate::status::reason::INVALID.to_owned(),
            message: format!("... and {dropped} more"),
            field: String::new(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_character_boundaries_with_a_marker() {
        // 'é' is 2 bytes, '😀' 4: a budget inside either keeps the characters before it.
        assert_eq!(echo_within("éé", 3), "é...<truncated from 4 bytes>");
        assert_eq!(echo_within("éé", 4), "éé");
        assert_eq!(echo_within("a😀", 4), "a...<truncated from 5 bytes>");
        assert_eq!(echo_within("a😀", 5), "a😀");
        assert_eq!(echo_within("😀", 0), "...<truncated from 4 bytes>");
        // Quotes, backslashes and control characters count ESCAPED_CHAR_COST each.
        assert_eq!(wire_cost("\"\\\n\u{1}\u{7f}"), 5 * ESCAPED_CHAR_COST);
        assert_eq!(wire_cost("\u{feff}"), ESCAPED_CHAR_COST);
        let quotes = "\"".repeat(MAX_ECHO_BYTES);
        let cut = echo(&quotes);
        let kept = MAX_ECHO_BYTES / ESCAPED_CHAR_COST;
        assert_eq!(
            cut,
            format!(
                "{}...<truncated from {MAX_ECHO_BYTES} bytes>",
                &quotes[..kept]
            )
        );
        // Escaped as JSON the cut value stays within its budget plus the marker.
        let json = serde_json::to_string(&format!("{cut:?}")).unwrap_or_default();
        assert!(json.len() <= MAX_ECHO_BYTES + 64, "{}", json.len());
        let mixed = "é😀\"\u{0}x".repeat(1000);
        let cut = echo(&mixed);
        assert!(cut.ends_with(&format!("...<truncated from {} bytes>", mixed.len())));
        assert!(wire_cost(&cut) <= MAX_ECHO_BYTES + 40);
        // Every budget on every string gives a valid string (no panic on any boundary).
        for s in ["é😀\"\u{0}x", "😀😀", "\u{10ffff}a"] {
            for b in 0..40 {
                let c = echo_within(s, b);
                assert!(c.len() <= s.len() || c.contains("truncated"), "{c}");
            }
        }
    }

    #[test]
    fn json_is_bounded_while_written() {
        let small = serde_json::json!({"a": "b"});
        assert_eq!(echo_json(&small), r#"{"a":"b"}"#);
        let big = serde_json::json!({"q": "\"".repeat(750_000)});
        let text = echo_json(&big);
        assert!(
            text.ends_with("...<truncated from 1500008 bytes>"),
            "{text}"
        );
        assert!(wire_cost(&text) <= MAX_ECHO_BYTES + 40);
        let multibyte = serde_json::json!(["é".repeat(5000)]);
        let text = echo_json(&multibyte);
        assert!(text.starts_with("[\"éé"));
        assert!(text.ends_with("...<truncated from 10004 bytes>"), "{text}");
    }

    #[test]
    fn a_status_is_bounded_whatever_its_text() {
        let huge = "\"".repeat(1_400_000);
        let mut s = Status::failure(422, "Invalid", format!("ConfigMap {huge:?} is invalid"))
            .with_target("", "configmaps", &huge);
        let long = "\"".repeat(20_000);
        for _ in 0..2_000 {
            s = s.with_cause("FieldValueInvalid", &long, &long);
        }
        bound_status(&mut s);
        let body = s.to_json();
        assert!(
            body.len() <= MAX_STATUS_TEXT_BYTES + 64 * 1024,
            "{}",
            body.len()
        );
        let causes = s
            .details
            .as_ref()
            .map(|d| d.causes.clone())
            .unwrap_or_default();
        assert!(causes.len() < 2_000);
        assert!(causes.last().is_some_and(|c| c.message.ends_with("more")));
        // Within the budget nothing changes.
        let mut small =
            Status::failure(404, "NotFound", "pods \"a\" not found").with_target("", "pods", "a");
        let before = small.clone();
        bound_status(&mut small);
        assert_eq!(small, before);
    }
}
