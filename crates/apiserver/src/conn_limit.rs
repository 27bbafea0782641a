//! What one client and the whole process may hold in connections: the per-address
//! connection count ([`PerClient`], `--max-connections-per-client`) and the process's
//! open-file limit, raised to its hard limit at start ([`raise_open_file_limit`]) as Go's
//! runtime does for every Go server (upstream's included).
//!
//! Invariants:
//! - an address's count exists only while it has a connection open, so the map is bounded
//!   by the open connections (themselves bounded by `--max-connections`), never by the
//!   number of addresses ever seen;
//! - a slot is released exactly once, by [`ClientSlot`]'s `Drop`, whatever ends the
//!   connection (its end, a deadline, a failed TLS handshake, shutdown);
//! - the lock is taken when a connection is accepted and when it ends, never per request.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Open connections by address.
type Counts = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// Connections open per remote IP address, and their cap (0: no cap).
#[derive(Debug, Clone)]
pub(crate) struct PerClient {
    cap: usize,
    open: Counts,
}

impl PerClient {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            open: Arc::default(),
        }
    }

    /// A slot for a new connection from `ip`, or `None` when the address has its cap open.
    pub(crate) fn open(&self, ip: IpAddr) -> Option<ClientSlot> {
        if self.cap == 0 {
            return Some(ClientSlot(None));
        }
        let ip = ip.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= self.cap {
            if *n == 0 {
                open.remove(&ip);
            }
            return None;
        }
        *n += 1;
        Some(ClientSlot(Some((Arc::clone(&self.open), ip))))
    }
}

/// One open connection of an address; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct ClientSlot(Option<(Counts, IpAddr)>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let Some((open, ip)) = self.0.take() else {
            return;
        };
        let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&ip);
            }
        }
    }
}

/// The open-file limits of the process after [`raise_open_file_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileLimits {
    /// The soft limit before.
    pub(crate) before: Option<u64>,
    /// The soft limit now.
    pub(crate) soft: Option<u64>,
    /// The hard limit.
    pub(crate) hard: Option<u64>,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (Go's runtime does this at start for
/// every Go program since Go 1.19, so upstream's server runs with the hard limit), logging
/// both values. Every connection and every HTTP/1.1 watch is a file descriptor: with the
/// usual soft limit of 1 024 a thousand watches would stop the server accepting. `None`
/// means unlimited. Unix only; elsewhere nothing changes.
pub(crate) fn raise_open_file_limit() -> FileLimits {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let before = getrlimit(Resource::Nofile);
        let mut after = before;
        if before.current != before.maximum {
            after.current = before.maximum;
            if let Err(e) = setrlimit(Resource::Nofile, after) {
                tracing::warn!(error = %e, soft = ?before.current, hard = ?before.maximum,
                    "cannot raise the open-file limit to its hard limit");
                after = before;
            }
        }
        let limits = FileLimits {
            before: before.current,
            soft: after.current,
            hard: after.maximum,
        };
        let show = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
        tracing::info!(
            soft_before = %show(limits.before),
            soft = %show(limits.soft),
            hard = %show(limits.hard),
            "open-file limit (RLIMIT_NOFILE): soft raised to the hard limit"
        );
        limits
    }
    #[cfg(not(unix))]
    {
        FileLimits {
            before: None,
            soft: None,
            hard: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn each_address_gets_its_cap_and_slots_come_back() {
        let p = PerClient::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = p.open(a).unwrap();
        let s2 = p.open(mapped).unwrap();
        assert!(p.open(a).is_none(), "a third from the same address");
        let _s3 = p.open(b).unwrap();
        drop(s1);
        let _s4 = p.open(a).unwrap();
        drop(s2);
        drop(_s4);
        // Nothing is kept for an address without connections.
        assert_eq!(p.open.lock().unwrap().len(), 1);
        // No cap: always a slot, nothing counted.
        let none = PerClient::new(0);
        let _all: Vec<_> = (0..10).map(|_| none.open(a).unwrap()).collect();
        assert!(none.open.lock().unwrap().is_empty());
    }
}
