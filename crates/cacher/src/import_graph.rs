//! The module graph of this crate, read from its sources: apart from the crate root (which
//! declares every module and owns the shared state), no module may reach itself through
//! `use crate::…` / `self::…` paths. This pins the claim of the `event` and `watcher` module
//! docs: the event types are a leaf, and the watcher's buffer, spec and state sit below both
//! the dispatcher and the watcher's stream.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, as its module path (`["watcher", "queue"]`).
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        panic!("cannot read {}", dir.display())
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut p = prefix.to_vec();
            p.push(name);
            modules(&path, &p, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut p = prefix.to_vec();
            if stem != "mod" && stem != "lib" {
                p.push(stem.to_owned());
            }
            out.insert(p, path);
        }
    }
}

/// The module paths `src` names through `crate::` or `self::` (relative to `me`), each cut
/// to the longest prefix that is a module of the crate.
fn edges(
    src: &str,
    me: &[String],
    known: &BTreeMap<Vec<String>, PathBuf>,
) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for line in src.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        for (marker, base) in [("crate::", &[][..]), ("self::", me)] {
            let mut rest = code;
            while let Some(i) = rest.find(marker) {
                // `self::` inside a longer word (`myself::`) is not a path.
                let before = rest[..i].chars().next_back();
                rest = &rest[i + marker.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let path: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let mut segs: Vec<String> = base.to_vec();
                segs.extend(
                    path.split("::")
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned),
                );
                while !segs.is_empty() && !known.contains_key(&segs) {
                    segs.pop();
                }
                if segs != me {
                    out.insert(segs);
                }
            }
        }
    }
    out
}

#[test]
fn no_module_but_the_root_reaches_itself() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut known = BTreeMap::new();
    modules(&root, &[], &mut known);
    assert!(known.contains_key(&vec!["event".to_owned()]), "{known:?}");
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, path) in &known {
        let Ok(src) = std::fs::read_to_string(path) else {
            panic!("cannot read {}", path.display())
        };
        let mut e = edges(&src, module, &known);
        // The root and this test are outside the rule.
        e.retain(|m| !m.is_empty());
        graph.insert(module.clone(), e);
    }
    graph.remove(&Vec::new());
    graph.remove(&vec!["import_graph".to_owned()]);
    // The leaf really is one.
    assert!(
        graph[&vec!["event".to_owned()]].is_empty(),
        "event imports {:?}",
        graph[&vec!["event".to_owned()]]
    );
    // Depth-first search for a cycle.
    fn visit(
        m: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = stack.iter().position(|s| s == m) {
            let cycle: Vec<String> = stack[at..].iter().map(|s| s.join("::")).collect();
            panic!("module cycle: {} -> {}", cycle.join(" -> "), m.join("::"));
        }
        stack.push(m.clone());
        for next in graph.get(m).into_iter().flatten() {
            visit(next, graph, stack, done);
        }
        stack.pop();
        done.insert(m.clone());
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done);
    }
    assert!(
        done.len() >= 12,
        "only {} modules seen: {done:?}",
        done.len()
    );
}
