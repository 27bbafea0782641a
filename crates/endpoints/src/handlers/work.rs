//! A read's work estimate: the inputs of flow control's list cost
//! (`listwatch_server::flowcontrol::estimate`), gathered from the request and from what the
//! resource's storage knows without I/O ([`listwatch_storage::Storage::list_cost`]: the
//! cache's object count and average size, and whether the list is served from it).
//!
//! Owns only the gathering; the formula is the server crate's and the seats its levels'.
//! Cheap by construction: the query is parsed once more (the handler parses it again after
//! the seat is taken, as upstream's estimator and handler each convert it) and the storage is
//! asked one synchronous question; nothing waits but a watch-list for its seats.

use listwatch_server::flowcontrol::estimate::{self, ListWork};
use listwatch_server::flowcontrol::{ClientKey, Exempt, Seat, queue_wait_limit};
use listwatch_storage::ListOptions;

use super::Request;
use crate::error::{ApiError, ApiResult};

/// The seats a LIST takes. A query that does not parse costs the most (upstream: it fails
/// validation after its seat anyway, and must not be cheaper for being malformed).
pub(super) fn list_seats(req: &Request) -> usize {
    match req.query.list_options(req.info(), false, None) {
        Ok(lr) => seats(req, &lr.opts, false),
        Err(_) => estimate::MAX_LIST_SEATS,
    }
}

/// The seats a watch-list (`sendInitialEvents=true`) takes while its initial state is taken:
/// what a list of it from the cache costs (upstream's estimate of such a watch).
pub(super) fn watch_list_seats(req: &Request, opts: &ListOptions) -> usize {
    seats(req, opts, true)
}

fn seats(req: &Request, opts: &ListOptions, watch_list: bool) -> usize {
    let cost = req.res.storage.list_cost(opts);
    let field = &opts.predicate.field;
    let work = ListWork {
        stats: cost.map(|c| (c.object_count, c.average_object_bytes)),
        limit: opts.page_limit(),
        single: field.exact_match("metadata.name").is_some(),
        selector: !opts.predicate.label.is_empty() || !field.is_empty(),
        from_cache: watch_list || cost.is_some_and(|c| c.from_cache),
    };
    estimate::list_seats(&work)
}

/// The seats of a watch-list while its initial state is taken: its flow's share of the
/// read-only level, waited for as any read waits (a quarter of the request timeout, at most
/// a minute), then held by the caller until the storage has started the watch — the cache
/// has its state and registered the watcher; the events themselves are sent on the watch's
/// own slot, as upstream releases a watch's seats once it is initialized. A refusal is a 429.
pub(super) async fn watch_list_seat(req: &Request, opts: &ListOptions) -> ApiResult<Seat> {
    let client = req
        .extensions
        .get::<ClientKey>()
        .cloned()
        .unwrap_or(ClientKey::Unidentified);
    let exempt = req.extensions.get::<Exempt>().is_some();
    let ticket = req
        .shared
        .flow
        .level(false, exempt)
        .admit(&client)
        .map_err(|_| ApiError::too_many_requests())?
        .width(watch_list_seats(req, opts));
    ticket
        .seat(queue_wait_limit(req.shared.config.request_timeout))
        .await
        .map_err(|_| ApiError::too_many_requests())
}
