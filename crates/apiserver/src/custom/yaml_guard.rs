//! A bounded first pass over a resources file or CRD manifest text, before serde_yaml reads it.
//!
//! What it owns: refusing YAML whose cost is out of proportion to its length — nesting deeper
//! than [`MAX_NESTING`] (libyaml, under serde_yaml, scans nested flow collections in time
//! quadratic in their depth before its own recursion limit applies: 40 KB of `[` took 14 s,
//! 200 KB more than two minutes) and alias replays beyond the registry's budget for request
//! bodies of the same length (serde_yaml limits alias jumps to a hundred per event, not what
//! each jump replays: 10 KB of one anchor and its aliases built 690 MB).
//!
//! Invariants: the pass runs serde-saphyr with budgets (events, nodes, depth, flow nesting,
//! replayed events) proportional to the text, so it costs time and memory linear in it; it
//! refuses only for a budget — a document serde-saphyr cannot read for another reason is left
//! to serde_yaml, whose reading (and messages) the files have always had. It runs on a thread
//! of its own with a large stack, so the deepest nesting it allows fits whatever thread
//! called it.

/// The deepest block or flow nesting read (serde_yaml refuses past 128 levels anyway; the
/// margin keeps its own message for those).
pub const MAX_NESTING: usize = 160;

/// The stack of the checking thread: serde-saphyr's frames take tens of KiB a level in debug
/// builds.
const STACK: usize = 64 << 20;

/// `Err(why)` when `text` exceeds a budget (nesting, alias replays, events); `Ok` otherwise,
/// including for YAML serde-saphyr cannot read for other reasons.
pub fn check(text: &str) -> Result<(), String> {
    let owned = text.to_owned();
    let checked = std::thread::Builder::new()
        .name("yaml-guard".into())
        .stack_size(STACK)
        .spawn(move || check_here(&owned));
    match checked {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| Err("the YAML check failed".into())),
        Err(e) => Err(format!("cannot start the YAML check: {e}")),
    }
}

fn check_here(text: &str) -> Result<(), String> {
    let len = text.len();
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_NESTING;
    budget.flow_nesting_limit = MAX_NESTING;
    budget.max_nodes = len.saturating_mul(2).saturating_add(1024);
    budget.max_events = len.saturating_mul(4).saturating_add(1024);
    let mut aliases = serde_saphyr::options::AliasLimits::default();
    aliases.max_total_replayed_events = listwatch_registry::decode::max_replayed_events(len);
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.alias_limits = aliases;
    options.duplicate_keys = serde_saphyr::options::DuplicateKeyPolicy::LastWins;
    options.legacy_octal_numbers = true;
    match serde_saphyr::from_multiple_with_options::<serde::de::IgnoredAny>(text, options) {
        Ok(_) => Ok(()),
        Err(e) => {
            let message = e.to_string();
            let over_budget = ["budget breached", "recursion limit", "nesting", "lias"]
                .iter()
                .any(|m| message.contains(m));
            if over_budget {
                Err(format!(
                    "too costly to read (nesting deeper than {MAX_NESTING} levels, or aliases \
                     replaying more than {} events): {}",
                    listwatch_registry::decode::max_replayed_events(len),
                    message.lines().next().unwrap_or("")
                ))
            } else {
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn deep_nesting_and_alias_bombs_are_refused_and_manifests_pass() {
        let deep = format!("x: {}", "[".repeat(200_000));
        assert!(check(&deep).unwrap_err().contains("too costly"));
        let n = 2000;
        let bomb = format!(
            "x: &a [{}]\ny: [{}]\n",
            vec!["x"; n].join(","),
            vec!["*a"; n].join(",")
        );
        assert!(check(&bomb).unwrap_err().contains("too costly"));
        let fine = "a: &a {b: 1}\nc: *a\n---\nd: [[[[1]]]]\n---\n";
        check(fine).unwrap();
        // Not serde-saphyr's to judge: serde_yaml reports it.
        check("a: [\n").unwrap_or_else(|e| panic!("{e}"));
    }
}
