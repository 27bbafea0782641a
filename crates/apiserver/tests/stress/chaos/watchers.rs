//! The chaos test's watchers: listwatch-client's `watcher` over a selection, recording every
//! list (with what preceded it: a relist is accepted only after a 410) and every event, and
//! the check of what one received against the truth.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use listwatch_client::{Event, HttpClient, watcher};

use crate::chaos::model::{
    Ev, Key, Selection, Write, expected, listed_prefix, prefixes_at, state_after,
};

/// The most error messages kept per run of errors (their count and whether one was a 410
/// are kept whatever their number).
const KEPT_ERRORS: usize = 4;

/// One completed list: the first, or a relist.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    /// The list's resource version.
    pub(crate) rv: u64,
    /// What it returned.
    pub(crate) listing: BTreeMap<Key, u64>,
    /// How many events had arrived before it.
    pub(crate) start: usize,
    /// The errors the watcher received between its last event (or bookmark, or list) and
    /// this list: why it relisted. Empty for the first list.
    pub(crate) cause: Vec<String>,
    /// Whether one of them was 410 Expired (listwatch-client's only reason to relist in a
    /// healthy run: the version it resumes from is older than what the replica holds).
    pub(crate) expired: bool,
    /// The fault under way when the relist began.
    pub(crate) phase: String,
}

/// What one watcher received.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) synced: bool,
    /// Every ADDED/MODIFIED/DELETED received, in order.
    pub(crate) history: Vec<Ev>,
    /// The last list's state with the events since applied.
    pub(crate) state: BTreeMap<Key, u64>,
    /// Every completed list, the first one included.
    pub(crate) lists: Vec<Listed>,
    /// The list in progress.
    listing: BTreeMap<Key, u64>,
    /// Errors since the last event, bookmark or completed list.
    since_ok: Vec<String>,
    expired_since_ok: bool,
    /// The cause of the relist in progress (taken at its first `Init`).
    relisting: Option<(Vec<String>, bool, String)>,
    /// Errors received in all.
    pub(crate) errors: u64,
}

impl Seen {
    pub(crate) fn relisted(&self) -> bool {
        self.lists.len() > 1
    }

    fn ok(&mut self) {
        self.since_ok.clear();
        self.expired_since_ok = false;
    }
}

fn parse(o: &listwatch_api::Object) -> (Key, u64) {
    let ns = o
        .namespace()
        .and_then(|n| n.strip_prefix("ns-"))
        .and_then(|n| n.parse().ok())
        .expect("ns-N");
    let name = o
        .name()
        .strip_prefix("cm-")
        .and_then(|n| n.parse().ok())
        .expect("cm-N");
    let v = o.to_value().unwrap();
    let seq = v["data"]["seq"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap();
    ((ns, name), seq)
}

/// The key and seq of every object of a list.
pub(crate) fn parse_list(items: &[listwatch_api::Object]) -> BTreeMap<Key, u64> {
    items.iter().map(parse).collect()
}

/// Errors the watchers received, by test step and kind.
pub(crate) type ErrorTally = Arc<Mutex<BTreeMap<(String, String), u64>>>;

pub(crate) fn kind(e: &listwatch_client::Error) -> String {
    use listwatch_client::Error as E;
    match e {
        E::Api(s) => format!("{} {}", s.code, s.reason),
        E::Connect(_) => "connection failed".into(),
        E::Http(_) => "http".into(),
        E::Decode(_) => "decode".into(),
        E::VeryShortWatch(_) => "very short watch".into(),
        E::WatchIdle(_) => "watch idle".into(),
        other => format!("{other}"),
    }
}

pub(crate) fn spawn_watcher(
    client: HttpClient,
    sel: &Selection,
    seen: Arc<Mutex<Seen>>,
    phase: Arc<Mutex<String>>,
    tally: ErrorTally,
) {
    let lw = client.lister_watcher(&sel.path()).unwrap();
    tokio::spawn(watcher(lw, sel.config()).for_each(move |e| {
        let mut s = seen.lock().unwrap();
        match e {
            Ok(Event::Init) => {
                if s.synced && s.relisting.is_none() {
                    let phase = phase.lock().unwrap().clone();
                    s.relisting = Some((s.since_ok.clone(), s.expired_since_ok, phase));
                }
                s.listing.clear();
            }
            Ok(Event::InitApply(o)) => {
                let (k, seq) = parse(&o);
                s.listing.insert(k, seq);
            }
            Ok(Event::InitDone { resource_version }) => {
                let listing = std::mem::take(&mut s.listing);
                let (cause, expired, phase) = s.relisting.take().unwrap_or_default();
                let start = s.history.len();
                s.state = listing.clone();
                s.lists.push(Listed {
                    // This server's versions are revisions (opaque to the client).
                    rv: listwatch_api::rv::parse(&resource_version).unwrap_or(0),
                    listing,
                    start,
                    cause,
                    expired,
                    phase,
                });
                s.synced = true;
                s.ok();
            }
            Ok(Event::Apply(o)) => {
                let (key, seq) = parse(&o);
                s.state.insert(key, seq);
                s.history.push(Ev {
                    delete: false,
                    key,
                    seq,
                    rv: o.resource_version(),
                });
                s.ok();
            }
            Ok(Event::Delete(o)) => {
                let (key, seq) = parse(&o);
                s.state.remove(&key);
                s.history.push(Ev {
                    delete: true,
                    key,
                    seq,
                    rv: o.resource_version(),
                });
                s.ok();
            }
            Ok(Event::Bookmark { .. }) => s.ok(),
            Err(e) => {
                let step = phase.lock().unwrap().clone();
                *tally.lock().unwrap().entry((step, kind(&e))).or_default() += 1;
                s.errors += 1;
                s.expired_since_ok |= e.is_expired();
                if s.since_ok.len() < KEPT_ERRORS {
                    s.since_ok.push(e.to_string());
                }
            }
        }
        async {}
    }));
}

/// Where the watcher's last list puts it in the truth, and how many of the events owed for
/// `writes[..=k]` it has received since: whether it has caught up with write `k`.
pub(crate) fn caught_up(sel: &Selection, s: &Seen, writes: &[Write], k: usize) -> bool {
    let Some(last) = s.lists.last() else {
        return false;
    };
    let Some(p) = listed_prefix(sel, writes, last.rv, &last.listing) else {
        // Not placeable yet (a write it reflects not resolved yet): not caught up.
        return false;
    };
    if p > k {
        return true;
    }
    let owed = expected(sel, &writes[p..=k], state_after(&writes[..p]))
        .0
        .len();
    s.history.len() - last.start >= owed
}

/// Checks everything `s` received against the truth `writes`; returns the number of events
/// checked, or what is wrong.
///
/// - every relist followed a 410 Expired;
/// - every list (the first included) returned exactly the truth's selected state at its
///   resource version;
/// - the events after each list are exactly the truth's from that state on — all of them
///   after the last list, a prefix of them before a relist — with the resource version
///   each acknowledged write returned;
/// - resource versions never go back, lists included.
pub(crate) fn check(sel: &Selection, s: &Seen, writes: &[Write]) -> Result<usize, String> {
    if s.lists.is_empty() {
        return Err("never listed".into());
    }
    let mut checked = 0;
    let mut last_rv = 0;
    for (j, l) in s.lists.iter().enumerate() {
        if j > 0 && !l.expired {
            return Err(format!(
                "relisted (list {j}, during {}) without a 410 before it; errors since its \
                 last event: {:?}",
                l.phase, l.cause
            ));
        }
        if l.rv < last_rv {
            return Err(format!(
                "list {j} at rv {} is older than what it had received (rv {last_rv})",
                l.rv
            ));
        }
        let Some(p) = listed_prefix(sel, writes, l.rv, &l.listing) else {
            let candidates: Vec<_> = prefixes_at(writes, l.rv)
                .map(|p| sel.select(&state_after(&writes[..p])))
                .collect();
            return Err(format!(
                "list {j} at rv {} returned {:?}; the truth at that version is {candidates:?}",
                l.rv, l.listing
            ));
        };
        let end = s.lists.get(j + 1).map_or(s.history.len(), |n| n.start);
        let got = &s.history[l.start..end];
        let (want, fin) = expected(sel, &writes[p..], state_after(&writes[..p]));
        let at = got.iter().zip(&want).position(|(g, e)| {
            // A delete's version is not returned to the writer: compare where known.
            let g = Ev {
                rv: if e.rv == 0 { 0 } else { g.rv },
                ..g.clone()
            };
            g != *e
        });
        if let Some(at) = at {
            return Err(format!(
                "after list {j} (rv {}), event {at} is {:?}, the truth says {:?}\n\
                 received around it: {:?}",
                l.rv,
                got[at],
                want[at],
                &got[at.saturating_sub(3)..(at + 3).min(got.len())]
            ));
        }
        if got.len() > want.len() {
            return Err(format!(
                "after list {j}: extra events {:?}",
                &got[want.len()..]
            ));
        }
        if j + 1 == s.lists.len() {
            if got.len() < want.len() {
                return Err(format!(
                    "after list {j}: events missing from {:?}",
                    &want[got.len()..]
                ));
            }
            if s.state != fin {
                return Err(format!("final state {:?}, the truth's {fin:?}", s.state));
            }
        }
        for e in got {
            if e.rv <= last_rv.max(l.rv) {
                return Err(format!(
                    "event {e:?} after list {j} (rv {}) does not move past rv {}",
                    l.rv,
                    last_rv.max(l.rv)
                ));
            }
            last_rv = e.rv;
        }
        last_rv = last_rv.max(l.rv);
        checked += got.len();
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::model::Obj;

    fn sel_all() -> Selection {
        // A selection of everything: namespace, label and name left open.
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0);
        loop {
            let s = Selection::random(&mut rng);
            let all = (0..crate::chaos::model::NAMESPACES).all(|ns| {
                (0..crate::chaos::model::NAMES)
                    .all(|n| (0..crate::chaos::model::APPS).all(|a| s.matches((ns, n), a)))
            });
            if all {
                return s;
            }
        }
    }

    fn w(key: Key, after: Option<Obj>, rv: Option<u64>) -> Write {
        Write { key, after, rv }
    }

    fn ev(key: Key, seq: u64, rv: u64) -> Ev {
        Ev {
            delete: false,
            key,
            seq,
            rv,
        }
    }

    fn list(rv: u64, listing: &[(Key, u64)], start: usize, expired: bool) -> Listed {
        Listed {
            rv,
            listing: listing.iter().copied().collect(),
            start,
            cause: vec!["some error".into()],
            expired,
            phase: "test".into(),
        }
    }

    #[test]
    fn a_relist_passes_only_after_a_410_and_at_the_truth_of_its_version() {
        let sel = sel_all();
        let writes = [
            w((0, 0), Some((0, 1)), Some(10)),
            w((0, 1), Some((0, 2)), Some(11)),
            w((0, 0), Some((0, 3)), Some(12)),
        ];
        let mut s = Seen {
            history: vec![ev((0, 0), 1, 10)],
            state: [((0, 0), 3), ((0, 1), 2)].into_iter().collect(),
            lists: vec![
                list(5, &[], 0, false),
                list(11, &[((0, 0), 1), ((0, 1), 2)], 1, true),
            ],
            ..Seen::default()
        };
        s.history.push(ev((0, 0), 3, 12));
        assert_eq!(check(&sel, &s, &writes), Ok(2));

        // The same relist after something other than a 410.
        s.lists[1].expired = false;
        let e = check(&sel, &s, &writes).unwrap_err();
        assert!(e.contains("without a 410"), "{e}");
        s.lists[1].expired = true;

        // A relist whose listing is not the truth at its version.
        s.lists[1].listing = [((0, 0), 1)].into_iter().collect();
        let e = check(&sel, &s, &writes).unwrap_err();
        assert!(e.contains("the truth at that version"), "{e}");
        s.lists[1].listing = [((0, 0), 1), ((0, 1), 2)].into_iter().collect();

        // An event missing after the relist.
        s.history.pop();
        assert!(check(&sel, &s, &writes).unwrap_err().contains("missing"));
    }
}
