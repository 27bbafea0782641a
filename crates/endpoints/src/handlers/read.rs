//! The read verbs: get, list and watch (a watch holds its watch slot, taken by the router,
//! for as long as it streams).
//!
//! Invariants: reads never write; a list is answered whole or streamed by `stream_list`
//! (gzipped for clients that accept it); a watch whose version is too old or too new is an
//! ERROR event in a 200 stream, as upstream's cacher answers it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use listwatch_api::Object;
use listwatch_storage::{Error as StorageError, GetOptions, ObjectList, WatchEvent};

use super::{Request, Sub, object_response, scale_response};
use crate::error::{ApiError, ApiResult};
use crate::flowcontrol::WatchSlot;
use crate::negotiate::{Format, Offer, negotiate_dropping};
use crate::query::IncludeObject;
use crate::resource::KindSpec;
use crate::stream_list::{self, Items, ListExtras};
use crate::watch_server::{self, Encoder, WatchState};
use crate::{encoded_response, table};

fn table_response(
    info: &KindSpec,
    objects: &[Object],
    rv: u64,
    cont: Option<&str>,
    include: IncludeObject,
    beta: bool,
) -> ApiResult<Response> {
    let body = table::table(info, objects, Some(rv), cont, include, beta)
        .map_err(|e| ApiError::internal(format!("printing a table failed: {e}")))?;
    Ok(encoded_response(
        StatusCode::OK,
        Format::Table { beta }.content_type(),
        &body,
    ))
}

pub(super) async fn get(req: &Request) -> ApiResult<Response> {
    let (fmt, drop) = negotiate_dropping(&req.headers, Offer::JsonOrTable)?;
    let include = req.query.include_object()?;
    let opts = GetOptions {
        resource_version: req.query.get_resource_version()?,
        ignore_not_found: false,
    };
    let key = req.object_key()?;
    // A wait (storage, the cache catching up to `resourceVersion`): no place in the pool.
    let obj = crate::compute::waiting(req.res.storage.get(&key, &opts))
        .await
        .map_err(|e| req.storage_err(&e))?
        .ok_or_else(|| req.storage_err(&key.not_found()))?;
    if req.sub == Sub::Scale {
        return scale_response(req, &obj);
    }
    match fmt {
        Format::Table { beta } => table_response(
            req.info(),
            std::slice::from_ref(&obj),
            obj.resource_version(),
            None,
            include,
            beta,
        ),
        Format::Metadata => {
            let p = obj
                .partial_metadata_json()
                .map_err(|e| ApiError::internal(format!("stored object does not decode: {e}")))?;
            let body = match drop {
                true => listwatch_api::drop_fields::without_managed_fields(&p)
                    .map_or(p, bytes::Bytes::from),
                false => p,
            };
            Ok(encoded_response(
                StatusCode::OK,
                Format::Metadata.content_type(),
                &body,
            ))
        }
        Format::Cbor => crate::cbor::object_response(StatusCode::OK, &obj, drop),
        Format::Json if drop => Ok(encoded_response(
            StatusCode::OK,
            "application/json",
            &obj.to_json_bytes_without_managed_fields(),
        )),
        _ => Ok(object_response(StatusCode::OK, &obj)),
    }
}

pub(super) async fn list(req: &Request) -> ApiResult<Response> {
    let (fmt, drop) = negotiate_dropping(&req.headers, Offer::JsonOrTable)?;
    let include = req.query.include_object()?;
    let lr = req.query.list_options(req.info(), false, None)?;
    let key = req.collection_key()?;
    // A wait (storage, the cache catching up to `resourceVersion`): no place in the pool.
    let list = crate::compute::waiting(req.res.storage.list(&key, &lr.opts))
        .await
        .map_err(|e| req.storage_err(&e))?;
    let extras = ListExtras {
        // Upstream's echo of an honoured `shardSelector` (KEP-5866): the client learns that
        // the list is this shard's subset, not the whole collection.
        shard_info: (!lr.opts.predicate.shard.is_empty())
            .then(|| lr.opts.predicate.shard.canonical()),
        drop_managed_fields: drop,
    };
    if fmt == Format::Cbor {
        return crate::cbor::list(&req.res.info, list, extras, req.offloader());
    }
    list_response(req, Items::for_format(fmt, include), extras, list)
}

/// A list's response: whole, or streamed and (for clients that accept it) gzipped.
pub(super) fn list_response(
    req: &Request,
    items: Items,
    extras: ListExtras,
    list: ObjectList,
) -> ApiResult<Response> {
    if matches!(items, Items::Json) && crate::yaml::wanted(&req.headers, Offer::JsonOrTable) {
        return crate::yaml::list(&req.res.info, list, req.offloader());
    }
    let gzip = crate::compress::accepts_gzip(&req.headers)
        .then(|| req.shared.gzip.try_take())
        .flatten();
    let resp = stream_list::respond(
        Arc::clone(&req.res.info),
        items,
        extras,
        list,
        gzip,
        // Used for the pieces that compute: Table and metadata items, and gzip.
        req.offloader(),
        // The server's response deadline (the request timeout) comes first; this is a backstop.
        req.shared.config.request_timeout.saturating_mul(2),
    )?;
    if resp.headers().contains_key(header::CONTENT_ENCODING) {
        req.shared.metrics.gzipped("list");
    }
    Ok(resp)
}

pub(super) async fn watch_request(
    req: &Request,
    ws: Option<WebSocketUpgrade>,
    slot: WatchSlot,
) -> ApiResult<Response> {
    let (format, drop) = negotiate_dropping(&req.headers, Offer::JsonOrTable)?;
    if format == Format::Yaml {
        // Upstream has no YAML stream serializer.
        return Err(ApiError::not_acceptable("application/json"));
    }
    let include = req.query.include_object()?;
    let mut lr = req
        .query
        .list_options(req.info(), true, req.target.name.as_deref())?;
    let single = req.target.name.is_some() && (req.ns().is_some() || !req.info().namespaced);
    let key = if single {
        lr.opts.recursive = false;
        req.object_key()?
    } else {
        req.collection_key()?
    };
    let shared = &req.shared;
    // The storage learns when the watch will end, so that a cache can send a bookmark just
    // before (upstream: 2 s), and the client resumes from a recent resourceVersion.
    let timeout = watch_server::watch_timeout(lr.timeout, shared.config.min_request_timeout);
    let now = tokio::time::Instant::now();
    // `watch_timeout` caps the request; a clock that far along would still not overflow.
    let deadline = now
        .checked_add(timeout)
        .unwrap_or_else(|| now + std::time::Duration::from_secs(86_400));
    lr.opts.deadline = Some(deadline.into_std());
    // A watch-list costs seats while the storage takes its initial state (as a list from the
    // cache would, but only until the watch starts); a plain watch costs its slot alone.
    let initializing = match lr.opts.send_initial_events {
        Some(true) => Some(super::work::watch_list_seat(req, &lr.opts).await?),
        _ => None,
    };
    let stream = match req.res.storage.watch(&key, &lr.opts).await {
        Ok(s) => s,
        // Like upstream's cacher (an "error watcher"): a version too old or too new is an
        // ERROR event in a 200 stream, which is what clients' relist logic reacts to.
        Err(e @ (StorageError::Expired { .. } | StorageError::TooLargeResourceVersion { .. })) => {
            Box::pin(futures::stream::once(async move { WatchEvent::Error(e) }))
        }
        Err(e) => return Err(req.storage_err(&e)),
    };
    std::mem::drop(initializing);
    let state = WatchState {
        stream,
        encoder: Encoder::new(
            Arc::clone(&req.res.info),
            format,
            include,
            lr.opts.allow_watch_bookmarks,
        )
        .dropping_managed_fields(drop),
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        stop: shared.watch_stop.listen(),
        removed: req.res.removed.listen(),
        sent: shared.metrics.watch_events(&req.info().plural),
        offload: req.offloader(),
        _slot: slot,
        _gauge: shared.metrics.watch_started(),
    };
    if let Some(ws) = ws {
        // One message per event on the same route, as upstream's websocket watch does.
        return Ok(watch_server::bounded(ws)
            .on_upgrade(move |socket| watch_server::forward_to_websocket(socket, state)));
    }
    // A watch-list's initial events are as large as a list: gzipped for clients that
    // accept it (as upstream 1.37's `WatchListCompression`; see `compress`).
    let gzip = (lr.opts.send_initial_events == Some(true)
        && crate::compress::accepts_gzip(&req.headers))
    .then(|| shared.gzip.try_take())
    .flatten();
    let compressed = gzip.is_some();
    let mut resp = match gzip {
        Some(permit) => Body::from_stream(crate::compress::GzipWatch::new(
            watch_server::byte_stream(state),
            permit,
            req.offloader(),
        )),
        None => watch_server::body(state),
    }
    .into_response();
    resp.extensions_mut().insert(watch_server::LongRunning);
    let h = resp.headers_mut();
    if compressed {
        shared.metrics.gzipped("watch");
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    // A client that accepts `application/cbor` gets a CBOR sequence, as upstream answers.
    let content_type = match format {
        Format::Cbor => crate::cbor::SEQ_CONTENT_TYPE,
        other => other.content_type(),
    };
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}
