//! A CRD schema's `pattern`: Go's `regexp` syntax read by the `regex` crate's engine
//! (`regex-automata`'s meta regex), compiled within a program size limit, matched in linear
//! time without caches that grow per thread and pattern (no lazy DFA, no backtracker), and
//! admitted within the CRD's budget and, for a CRD's validation, the server's ([`admit`]).

use std::sync::Arc;

use regex_automata::meta;

use super::{MAX_REGEX_BYTES, MAX_REGEX_TOTAL_BYTES, Pattern, PatternBudget, pattern_cache};

/// `src` compiled (or shared) and charged to `budget`; else why not (`None`: refused
/// without a word, the server's limit having been named once for this CRD).
pub(super) fn admit(src: &str, budget: &mut PatternBudget) -> Result<Pattern, Option<String>> {
    if let Some(re) = budget.patterns.get(src) {
        return Ok(Pattern {
            source: src.to_owned(),
            weight: weight(re.regex()),
            re: Arc::clone(re),
        });
    }
    if budget.bytes > MAX_REGEX_TOTAL_BYTES {
        return Err(Some(format!(
            "the CRD's patterns take more than the limit of {MAX_REGEX_TOTAL_BYTES} bytes together"
        )));
    }
    if budget.server_full {
        // Refused once, with the limit named: the CRD is refused, so nothing more is
        // compiled for it (nor reported: one cause says it).
        return Err(None);
    }
    let built = pattern_cache::get(src);
    if built.as_ref().err().and_then(|e| e.size_limit()).is_some() {
        // A refused attempt cost its compilation: it counts as a full pattern, so a
        // schema of many oversized patterns stops compiling early.
        budget.bytes = budget.bytes.saturating_add(MAX_REGEX_BYTES);
    }
    match built {
        // A pattern the served schemas do not hold yet adds to the server's total: the
        // admission of a CRD refuses it past the server-wide limit (this CRD's earlier
        // patterns, held by the budget, count).
        Ok((_, true)) if budget.admission && !pattern_cache::within_limit() => {
            budget.server_full = true;
            Err(Some(format!(
                "the patterns of the server's CRDs would take more than the limit of {} bytes together ({} bytes in use)",
                pattern_cache::limit(),
                pattern_cache::live_bytes()
            )))
        }
        Ok((re, _)) => {
            budget.bytes = budget.bytes.saturating_add(re.bytes());
            if budget.bytes > MAX_REGEX_TOTAL_BYTES {
                return Err(Some(format!(
                    "the CRD's patterns take more than the limit of {MAX_REGEX_TOTAL_BYTES} bytes together"
                )));
            }
            budget.patterns.insert(src.to_owned(), Arc::clone(&re));
            Ok(Pattern {
                source: src.to_owned(),
                weight: weight(re.regex()),
                re,
            })
        }
        Err(e) => Err(Some(match (e.size_limit(), e.syntax_error()) {
            (Some(n), _) => format!("the compiled pattern is larger than the limit of {n} bytes"),
            (None, Some(syntax)) => {
                let text = syntax.to_string();
                let last = text.lines().last().unwrap_or_default().trim();
                format!(
                    "error parsing regexp: {}",
                    last.strip_prefix("error: ").unwrap_or(last)
                )
            }
            (None, None) => e.to_string(),
        })),
    }
}

/// The most a pattern's one-pass DFA may take (past it, the PikeVM alone matches).
const ONEPASS_BYTES: usize = 1 << 20;

/// Compiles a Go pattern (see [`go_syntax`]) within [`MAX_REGEX_BYTES`] of program.
pub(super) fn compile(src: &str) -> Result<meta::Regex, Box<meta::BuildError>> {
    meta::Regex::builder()
        .configure(
            meta::Regex::config()
                .nfa_size_limit(Some(MAX_REGEX_BYTES))
                .onepass_size_limit(Some(ONEPASS_BYTES))
                .hybrid(false)
                .backtrack(false)
                .dfa(false),
        )
        .build(&go_syntax(src))
        .map_err(Box::new)
}

/// The validation steps one byte matched by `re` costs.
pub(super) fn weight(re: &regex_automata::meta::Regex) -> u64 {
    1 + re.memory_usage() as u64 / 4096
}

/// A pattern in Go's `regexp` syntax (RE2's) as the `regex` engine reads it: Go's `\d`,
/// `\w` and `\s` (and their negations) are ASCII classes where the engine's are Unicode;
/// inside a class, `[` (outside `[:name:]`), `&`, `~` and a second `-` are literal in Go
/// but operators here, so they are escaped.
fn go_syntax(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + 16);
    let mut chars = src.chars().peekable();
    let mut in_class = false;
    // Characters since the class opened (`]` first is literal in Go).
    let mut class_len = 0usize;
    let mut prev_dash = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(n) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let ascii = match n {
                    'd' => Some("[0-9]"),
                    'D' => Some("[^0-9]"),
                    'w' => Some("[0-9A-Za-z_]"),
                    'W' => Some("[^0-9A-Za-z_]"),
                    's' => Some("[\\t\\n\\f\\r ]"),
                    'S' => Some("[^\\t\\n\\f\\r ]"),
                    _ => None,
                };
                match ascii {
                    Some(class) => out.push_str(class),
                    None => {
                        out.push('\\');
                        out.push(n);
                    }
                }
                class_len += 1;
                prev_dash = false;
                continue;
            }
            '[' if !in_class => {
                in_class = true;
                class_len = 0;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                prev_dash = false;
                continue;
            }
            '[' if chars.peek() == Some(&':') => {
                // A POSIX class `[:alpha:]`, as both read it.
                out.push('[');
                for d in chars.by_ref() {
                    out.push(d);
                    if d == ']' {
                        break;
                    }
                }
            }
            '[' => {
                out.push('\\');
                out.push(c);
            }
            '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            ']' if in_class && class_len == 0 => out.push_str("\\]"),
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '-' if in_class && prev_dash => out.push_str("\\-"),
            c => out.push(c),
        }
        if in_class {
            class_len += 1;
            prev_dash = c == '-';
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::go_syntax;

    #[test]
    fn go_patterns_read_as_go_reads_them() {
        for (go, rust) in [
            (r"^\w+$", r"^[0-9A-Za-z_]+$"),
            (r"[\d.-]", r"[[0-9].-]"),
            (r"[[]", r"[\[]"),
            (r"[]a]", r"[\]a]"),
            (r"[^]a]", r"[^\]a]"),
            (r"[a&&b]", r"[a\&\&b]"),
            (r"[a--b]", r"[a-\-b]"),
            (r"[[:alpha:]]", r"[[:alpha:]]"),
            (r"\\w", r"\\w"),
            (r"a&b", r"a&b"),
        ] {
            assert_eq!(go_syntax(go), rust, "{go}");
        }
    }
}
