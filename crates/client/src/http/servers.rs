//! [`Servers`]: the replicas of one cluster a client may talk to, and which one it talks to
//! now (client failover).
//!
//! An [`HttpClient`](super::HttpClient) has one or more base URLs (its config's `base_url`
//! followed by `failover_urls`). Every request goes to the current one; a connection failure
//! there (refused, reset, TLS handshake, no response headers within the request timeout, a
//! watch body cut mid-stream, a watch idle past the reflector's deadline) moves the client to
//! the next, round the list, and so does a refusal with `Retry-After` (see below). Resource
//! versions are etcd revisions shared by every replica, so a watch resumes on the next
//! server from the last version it saw, like a re-watch on the same one.
//!
//! Invariants:
//! - the list is never empty and is fixed when the client is built;
//! - a failure moves on only from the server it happened on (compare-and-swap), so many
//!   requests failing together on one server move the client once, not once each;
//! - failover never waits: a request that finds every server down returns
//!   [`Error::Connect`](crate::Error::Connect) and its caller (the reflector) backs off before
//!   the next round;
//! - a refusal with `Retry-After` (429 or 5xx: a draining replica's 503, a replica whose
//!   cache is not ready) also moves the client on, since what it reports is that replica's
//!   own state while the others share its data; the request waits the server's `Retry-After`
//!   first, as client-go would before its retry (`retry.rs`), so a refusal from every replica
//!   (an overloaded etcd behind them all) costs them no more requests than client-go's.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The base URLs of one cluster's servers and the index of the current one.
#[derive(Debug)]
pub(crate) struct Servers {
    urls: Vec<String>,
    current: AtomicUsize,
}

impl Servers {
    /// `urls` in failover order; `None` when empty.
    pub(crate) fn new(urls: Vec<String>) -> Option<Self> {
        if urls.is_empty() {
            return None;
        }
        Some(Self {
            urls,
            current: AtomicUsize::new(0),
        })
    }

    /// How many servers there are.
    pub(crate) fn len(&self) -> usize {
        self.urls.len()
    }

    /// The current server: its index (to report a failure on it) and base URL.
    pub(crate) fn current(&self) -> (usize, &str) {
        let i = self.current.load(Ordering::Acquire) % self.urls.len();
        (i, self.urls.get(i).map_or("", String::as_str))
    }

    /// All base URLs, in failover order.
    pub(crate) fn all(&self) -> &[String] {
        &self.urls
    }

    /// Reports a connection failure on server `i`: the client moves to the next one unless it
    /// already moved away from `i`. Returns whether this call moved it.
    pub(crate) fn failed(&self, i: usize) -> bool {
        self.move_from(i, "connection failure, moving to the next server")
    }

    /// Reports that server `i` refused a request with a `Retry-After` (draining, its cache
    /// not ready, overloaded): like [`failed`](Self::failed), the client moves to the next
    /// one, where the request is sent again after the wait.
    pub(crate) fn refused(&self, i: usize) -> bool {
        self.move_from(i, "refused with Retry-After, moving to the next server")
    }

    fn move_from(&self, i: usize, why: &'static str) -> bool {
        if self.urls.len() < 2 {
            return false;
        }
        let next = (i + 1) % self.urls.len();
        let moved = self
            .current
            .compare_exchange(i, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if moved {
            tracing::warn!(
                from = self.urls.get(i).map_or("", String::as_str),
                to = self.urls.get(next).map_or("", String::as_str),
                "{why}"
            );
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Servers {
        Servers::new(vec![
            "http://a".into(),
            "http://b".into(),
            "http://c".into(),
        ])
        .unwrap()
    }

    #[test]
    fn a_failure_moves_to_the_next_server_round_the_list() {
        let s = three();
        assert_eq!(s.current(), (0, "http://a"));
        assert!(s.failed(0));
        assert_eq!(s.current(), (1, "http://b"));
        assert!(s.failed(1));
        assert!(s.failed(2));
        assert_eq!(s.current(), (0, "http://a"));
    }

    #[test]
    fn failures_reported_together_on_one_server_move_once() {
        let s = three();
        let (i, _) = s.current();
        assert!(s.failed(i));
        // A second request that failed on the same server, reported late.
        assert!(!s.failed(i));
        assert_eq!(s.current(), (1, "http://b"));
    }

    #[test]
    fn one_server_never_moves_and_none_is_refused() {
        let s = Servers::new(vec!["http://a".into()]).unwrap();
        assert!(!s.failed(0));
        assert_eq!(s.current(), (0, "http://a"));
        assert!(Servers::new(Vec::new()).is_none());
    }
}
