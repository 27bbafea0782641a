//! A CRD schema's `pattern`: Go's `regexp` syntax read by the `regex` crate's engine
//! (`regex-automata`'s meta regex), compiled within a program size limit, matched in linear
//! time without caches that grow per thread and pattern (no lazy DFA, no backtracker).

use regex_automata::meta;

use super::MAX_REGEX_BYTES;

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
