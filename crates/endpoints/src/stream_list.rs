//! List responses encoded as a stream of items: a list's bytes are produced while they are
//! sent, a batch at a time, instead of in one buffer of the whole list.
//!
//! This module owns the wire shape of list responses — JSON (`<Kind>List`), metadata-only
//! (`PartialObjectMetadataList`) and server-side printed `Table`s — and when each goes out
//! whole, streamed, or streamed and gzipped (with [`crate::compress`]).
//!
//! How a list is answered ([`respond`]):
//! - the head and the items are encoded until more than [`GZIP_THRESHOLD`] bytes are
//!   ready. A list that ends before that goes out as one buffer with its length, exactly as
//!   a small list always did (and never compressed, as upstream);
//! - a longer list is streamed: its first bytes at once, then each poll of the body encodes
//!   the next [`BATCH_BYTES`] of items (and compresses them when the client accepts gzip and
//!   a compressor is free), so the memory a list holds beyond the objects themselves is one
//!   batch (plus a compressor), whatever its length. The objects are the list's handles on
//!   the storage's (or cache's) shared objects: 24 bytes each, no copy of their bytes;
//! - the pieces that compute run on the request compute pool, one task per piece behind
//!   its fair gate in the client's flow (`ListBody::offload`): every batch after the first
//!   of a Table or metadata list, and every piece of a gzipped list, the first included
//!   (deflate is the costly part of a large JSON list: 20 of them compressing on the
//!   I/O threads held another client's tiny list for seconds, red team rt10 finding 3).
//!   Only an uncompressed JSON list's batches, copies of stored bytes, are made on the
//!   thread polling the body. The seat is held throughout (below), so a list's
//!   compression counts against its flow's seats, as upstream's handler gzips on its seat;
//! - a streamed list keeps its request's seat, in-flight gauge and body-memory hold until its
//!   last byte has been handed on (or the client went away): the expensive part of a large
//!   list is its sending, and upstream holds the seat for it too ([`Streamed`] marks such a
//!   response for the request layer);
//! - the server's response deadline cuts a list that is not sent in time, as any response
//!   (listwatch-apiserver: the request timeout from the response's start). As a backstop
//!   for a server without one, the body itself ends with an error at twice the request
//!   timeout from its start; either way the client sees a broken response (no final chunk,
//!   no gzip trailer), never a shorter valid list. A client that disconnects drops the body,
//!   which frees everything the list held.
//!
//! Not streamed: protobuf list responses do not exist here (the API serves JSON only, a
//! protobuf `Accept` is a 406), and `deletecollection` answers with what it deleted, streamed
//! like any list.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use listwatch_api::Object;
use listwatch_storage::ObjectList;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::compress::{GZIP_THRESHOLD, Gzip};
use crate::compute::Offloader;
use crate::error::{ApiError, ApiResult};
use crate::negotiate::Format;
use crate::query::IncludeObject;
use crate::resource::KindSpec;
use crate::{clock, table};

/// Uncompressed bytes encoded per poll of a streamed list (upstream batches streamed lists
/// in 128 KiB buffers too).
pub(crate) const BATCH_BYTES: usize = 128 * 1024;

/// Stored bytes of the items read per batch, at most (past the first item): a Table of
/// `includeObject=None` rows is far smaller than its objects, and each row decodes its
/// whole object, so the output alone would let one batch (one task on the request compute
/// pool) decode a whole page of large objects while other clients' requests wait behind it.
pub(crate) const BATCH_INPUT_BYTES: usize = 1024 * 1024;

/// Response extension of a streamed list: the request layer keeps the request's seat until
/// the body is done ([`hold_until_sent`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Streamed;

/// How each item is written.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Items {
    /// The object's own wire JSON.
    Json,
    /// Its `PartialObjectMetadata`.
    Metadata,
    /// A Table row (cells and the object as `includeObject` says), printed at `now`.
    Table {
        include: IncludeObject,
        beta: bool,
        now: i64,
    },
}

impl Items {
    /// The items for a negotiated list format.
    pub(crate) fn for_format(format: Format, include: IncludeObject) -> Self {
        match format {
            Format::Table { beta } => Items::Table {
                include,
                beta,
                now: clock::now_unix(),
            },
            Format::Metadata => Items::Metadata,
            // YAML and CBOR lists are their own modules'; a collection delete's list is
            // built as JSON and converted.
            Format::Json | Format::DiscoveryV2 | Format::Yaml | Format::Cbor => Items::Json,
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Items::Json => "application/json",
            Items::Metadata => Format::Metadata.content_type(),
            Items::Table { beta, .. } => Format::Table { beta }.content_type(),
        }
    }
}

/// What a list response says beyond its items: the shard selector it honoured and whether
/// its objects go out without `metadata.managedFields`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListExtras {
    /// `metadata.shardInfo.selector` (upstream's KEP-5866 echo): the canonical text of the
    /// request's `shardSelector`, `None` without one.
    pub(crate) shard_info: Option<String>,
    /// The client's `Accept` asked `drop=metadata.managedFields` (KEP-5958).
    pub(crate) drop_managed_fields: bool,
}

/// A list being encoded.
struct Encoding {
    info: Arc<KindSpec>,
    items: Items,
    extras: ListExtras,
    objects: Vec<Object>,
    /// The next object to encode.
    next: usize,
}

impl Encoding {
    fn head(&self, list: &ObjectList) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"{\"kind\":\"");
        match self.items {
            Items::Json => {
                out.extend_from_slice(self.info.list_kind().as_bytes());
                out.extend_from_slice(b"\",\"apiVersion\":\"");
                out.extend_from_slice(self.info.api_version().as_bytes());
            }
            Items::Metadata => {
                out.extend_from_slice(
                    b"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1",
                );
            }
            Items::Table { beta, .. } => {
                out.extend_from_slice(b"Table\",\"apiVersion\":\"meta.k8s.io/");
                out.extend_from_slice(if beta { b"v1beta1" } else { b"v1" });
            }
        }
        out.extend_from_slice(b"\",\"metadata\":{\"resourceVersion\":\"");
        out.extend_from_slice(list.resource_version.to_string().as_bytes());
        out.push(b'"');
        if let Some(c) = &list.continue_token {
            out.extend_from_slice(b",\"continue\":");
            write_json(&mut out, &Value::String(c.clone()));
        }
        // A Table carries no remainingItemCount (ListMeta of a Table upstream has it, but
        // kubectl does not read it; kept as the whole-buffer Table had it).
        if let (Some(n), false) = (
            list.remaining_item_count,
            matches!(self.items, Items::Table { .. }),
        ) {
            out.extend_from_slice(b",\"remainingItemCount\":");
            out.extend_from_slice(n.to_string().as_bytes());
        }
        if let Some(sel) = &self.extras.shard_info {
            out.extend_from_slice(b",\"shardInfo\":{\"selector\":");
            write_json(&mut out, &Value::String(sel.clone()));
            out.push(b'}');
        }
        out.push(b'}');
        match self.items {
            Items::Table { .. } => {
                out.extend_from_slice(b",\"columnDefinitions\":");
                write_json(
                    &mut out,
                    &Value::Array(table::column_definitions(&self.info)),
                );
                out.extend_from_slice(b",\"rows\":[");
            }
            _ => out.extend_from_slice(b",\"items\":["),
        }
        out
    }

    /// The list's end, with the newline upstream's encoder ends every body with.
    const TAIL: &'static [u8] = b"]}\n";

    fn done(&self) -> bool {
        self.next >= self.objects.len()
    }

    /// Encodes items into `out` until it holds more than `until` bytes, the items read
    /// passed [`BATCH_INPUT_BYTES`], or none are left.
    fn fill(&mut self, out: &mut Vec<u8>, until: usize) -> ApiResult<()> {
        let mut input = 0usize;
        while out.len() <= until && input < BATCH_INPUT_BYTES {
            let Some(o) = self.objects.get(self.next) else {
                break;
            };
            if self.next > 0 {
                out.push(b',');
            }
            match self.items {
                Items::Json if self.extras.drop_managed_fields => {
                    out.extend_from_slice(&o.to_json_bytes_without_managed_fields());
                }
                Items::Json => o.write_json(out),
                Items::Metadata => {
                    // Cut from the stored bytes: the spec and status are not decoded.
                    let p = o.partial_metadata_json().map_err(|e| {
                        ApiError::internal(format!("stored object does not decode: {e}"))
                    })?;
                    match self.extras.drop_managed_fields {
                        true => match listwatch_api::drop_fields::without_managed_fields(&p) {
                            Some(cut) => out.extend_from_slice(&cut),
                            None => out.extend_from_slice(&p),
                        },
                        false => out.extend_from_slice(&p),
                    }
                }
                Items::Table { include, now, .. } => {
                    let row = table::row(&self.info, o, include, now)
                        .map_err(|e| ApiError::internal(format!("printing a table failed: {e}")))?;
                    write_json(out, &row);
                }
            }
            input = input.saturating_add(o.size());
            self.next += 1;
        }
        Ok(())
    }
}

/// Removes `metadata.managedFields` from a decoded object (`drop=metadata.managedFields`).
pub(crate) fn drop_managed_fields(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
}

fn write_json(out: &mut Vec<u8>, v: &Value) {
    // Writing a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(out, v);
}

/// The response to a list: whole when short, else streamed (gzipped when `gzip` holds a
/// compressor's permit: the client accepts gzip and one is free), cut if not sent within
/// `deadline` (see the module docs).
pub(crate) fn respond(
    info: Arc<KindSpec>,
    items: Items,
    extras: ListExtras,
    mut list: ObjectList,
    gzip: Option<OwnedSemaphorePermit>,
    offload: Option<Offloader>,
    deadline: Duration,
) -> ApiResult<Response> {
    let content_type = items.content_type();
    let mut enc = Encoding {
        info,
        items,
        extras,
        objects: std::mem::take(&mut list.items),
        next: 0,
    };
    let mut first = enc.head(&list);
    // Whether the list goes out whole (and uncompressed) depends on its output alone.
    while !enc.done() && first.len() <= GZIP_THRESHOLD {
        enc.fill(&mut first, GZIP_THRESHOLD)?;
    }
    if enc.done() {
        first.extend_from_slice(Encoding::TAIL);
        let mut resp = (StatusCode::OK, first).into_response();
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        return Ok(resp);
    }
    let gz = gzip.map(|permit| Gzip::new(Some(permit)));
    let compressed = gz.is_some();
    // Compression computes whatever the items are: a gzipped list's pieces, its first
    // included, are made on the pool like a Table's (red team rt10 finding 3: 20 gzipped
    // lists compressing on the I/O threads held another client's tiny list for seconds).
    let computes = compressed || !matches!(enc.items, Items::Json);
    let body = ListBody {
        enc,
        gz,
        first: Some(Bytes::from(first)),
        offload: offload.filter(|_| computes),
        deadline: Instant::now() + deadline,
        ended: false,
    };
    let mut resp = Body::from_stream(body.into_stream()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if compressed {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    resp.extensions_mut().insert(Streamed);
    Ok(resp)
}

impl From<crate::compress::GzipError> for ApiError {
    fn from(e: crate::compress::GzipError) -> Self {
        ApiError::internal(e.to_string())
    }
}

/// A streamed list's body: everything it holds is dropped with it.
struct ListBody {
    enc: Encoding,
    gz: Option<Gzip>,
    /// The bytes encoded before the body was made, not compressed yet.
    first: Option<Bytes>,
    /// Where the pieces are encoded and compressed: the request compute pool, in the
    /// client's flow, when they compute (Table rows, metadata, and every piece of a gzipped
    /// list, the first included); `None`: on the thread polling the body.
    offload: Option<Offloader>,
    deadline: Instant,
    ended: bool,
}

impl ListBody {
    /// The next piece of the body, or an error that cuts it.
    fn next_piece(&mut self) -> Result<Option<Bytes>, std::io::Error> {
        if self.gz.is_none()
            && let Some(first) = self.first.take()
        {
            return Ok(Some(first));
        }
        if self.ended {
            return Ok(None);
        }
        if Instant::now() >= self.deadline {
            tracing::debug!("a streamed list passed its deadline; cutting it");
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the list was not sent within the request timeout",
            ));
        }
        let mut input = 0usize;
        loop {
            let buf = match self.first.take() {
                // Only a gzipped list's first bytes are still here.
                Some(first) => first,
                None => {
                    let mut buf = Vec::with_capacity(BATCH_BYTES + 16 * 1024);
                    self.enc
                        .fill(&mut buf, BATCH_BYTES)
                        .map_err(|e| std::io::Error::other(e.0.message))?;
                    if self.enc.done() {
                        buf.extend_from_slice(Encoding::TAIL);
                        self.ended = true;
                    }
                    Bytes::from(buf)
                }
            };
            input += buf.len();
            let Some(gz) = &mut self.gz else {
                return Ok(Some(buf));
            };
            gz.write(&buf)?;
            if self.ended {
                gz.finish()?;
                return Ok(Some(gz.take()));
            }
            // Hand on what the compressor has produced once there is enough of it, or once
            // this poll has compressed its share.
            if gz.ready() >= BATCH_BYTES / 4 || input >= crate::compress::MAX_INPUT_PER_POLL {
                return Ok(Some(gz.take()));
            }
        }
    }

    fn into_stream(self) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send {
        futures::stream::unfold(Some(self), |state| async move {
            let mut body = state?;
            // A plain first piece is ready as it is; everything else is work.
            let ready = body.first.is_some() && body.gz.is_none();
            let (body, piece) = match body.offload.clone().filter(|_| !ready) {
                // One batch per task: the body moves to the pool and back (ordered: the
                // next poll waits for it); a client that goes away drops the wait, which
                // aborts the task (or leaves the gate's queue) and drops the body there.
                Some(pool) => match pool
                    .run(async move {
                        let piece = body.next_piece();
                        (body, piece)
                    })
                    .await
                {
                    Ok(done) => done,
                    Err(stopped) => return Some((Err(std::io::Error::other(stopped)), None)),
                },
                None => {
                    let piece = body.next_piece();
                    (body, piece)
                }
            };
            match piece {
                Ok(Some(b)) => Some((Ok(b), Some(body))),
                Ok(None) => None,
                Err(e) => Some((Err(e), None)),
            }
        })
    }
}

/// Keeps `guards` (the request's seat, gauges and holds) alive until a streamed response's
/// body is done; other responses are returned as they are (their guards drop as before).
pub(crate) fn hold_until_sent<G: Send + Sync + 'static>(resp: Response, guards: G) -> Response {
    if resp.extensions().get::<Streamed>().is_none() {
        return resp;
    }
    resp.map(|body| {
        use futures::StreamExt;
        Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _held = &guards;
            chunk
        }))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use listwatch_api::SelectableFields;

    fn objects(n: usize, pad: usize) -> Vec<Object> {
        (0..n)
            .map(|i| {
                let json = format!(
                    r#"{{"metadata":{{"name":"o{i}","labels":{{"a":"b"}}}},"data":{{"x":"{}"}}}}"#,
                    "y".repeat(pad)
                );
                Object::from_json(json.as_bytes(), &SelectableFields::none())
                    .unwrap()
                    .with_resource_version(i as u64 + 1)
            })
            .collect()
    }

    fn list(n: usize, pad: usize) -> ObjectList {
        ObjectList {
            items: objects(n, pad),
            resource_version: 77,
            continue_token: Some("tok\"en".into()),
            remaining_item_count: Some(3),
        }
    }

    fn info() -> Arc<KindSpec> {
        Arc::new(KindSpec::new("", "v1", "configmaps", "ConfigMap"))
    }

    async fn body_of(resp: Response) -> (Vec<u8>, bool) {
        let gz = resp.headers().get(header::CONTENT_ENCODING).is_some();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        if gz {
            use std::io::Read;
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut out)
                .unwrap();
            (out, true)
        } else {
            (bytes.to_vec(), false)
        }
    }

    #[tokio::test]
    async fn short_lists_go_out_whole_and_long_ones_streamed_with_the_same_json() {
        for (n, pad, streamed) in [(0, 0, false), (3, 10, false), (400, 1000, true)] {
            for gzip in [false, true] {
                let budget = crate::compress::GzipBudget::new(1);
                let permit = gzip.then(|| budget.try_take().unwrap());
                let resp = respond(
                    info(),
                    Items::Json,
                    ListExtras::default(),
                    list(n, pad),
                    permit,
                    None,
                    Duration::from_secs(60),
                )
                .unwrap();
                assert_eq!(resp.extensions().get::<Streamed>().is_some(), streamed);
                let (body, compressed) = body_of(resp).await;
                assert_eq!(compressed, streamed && gzip, "gzip only past the threshold");
                let v: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(v["kind"], "ConfigMapList");
                assert_eq!(v["metadata"]["resourceVersion"], "77");
                assert_eq!(v["metadata"]["continue"], "tok\"en");
                assert_eq!(v["metadata"]["remainingItemCount"], 3);
                let items = v["items"].as_array().unwrap();
                assert_eq!(items.len(), n);
                for (i, it) in items.iter().enumerate() {
                    assert_eq!(it["metadata"]["name"], format!("o{i}"));
                    assert_eq!(it["metadata"]["resourceVersion"], (i + 1).to_string());
                }
                drop(budget);
            }
        }
    }

    #[tokio::test]
    async fn tables_and_metadata_lists_stream_too() {
        for items in [
            Items::Metadata,
            Items::Table {
                include: IncludeObject::Metadata,
                beta: false,
                now: 0,
            },
        ] {
            let resp = respond(
                info(),
                items,
                ListExtras::default(),
                list(3000, 10),
                None,
                None,
                Duration::from_secs(60),
            )
            .unwrap();
            assert!(resp.extensions().get::<Streamed>().is_some());
            let (body, _) = body_of(resp).await;
            let v: Value = serde_json::from_slice(&body).unwrap();
            let rows = match items {
                Items::Metadata => {
                    assert_eq!(v["kind"], "PartialObjectMetadataList");
                    &v["items"]
                }
                _ => {
                    assert_eq!(v["kind"], "Table");
                    assert!(v["columnDefinitions"].as_array().is_some());
                    &v["rows"]
                }
            };
            assert_eq!(rows.as_array().unwrap().len(), 3000);
        }
    }

    /// A batch reads at most about `BATCH_INPUT_BYTES` of objects, however small its
    /// output: Table rows of `includeObject=None` are ~100 bytes for objects of any size,
    /// and each decodes its whole object (one batch is one task on the compute pool).
    #[tokio::test]
    async fn a_batch_reads_a_bounded_amount_of_objects() {
        let mut items = objects(10_000, 1);
        let big = objects(12, 300 * 1024);
        items.extend(big.into_iter().enumerate().map(|(i, o)| {
            let mut v = o.to_value().unwrap();
            v["metadata"]["name"] = format!("z{i}").into();
            Object::from_value(v, &SelectableFields::none())
                .unwrap()
                .with_resource_version(5000 + i as u64)
        }));
        let list = ObjectList {
            items,
            resource_version: 1,
            continue_token: None,
            remaining_item_count: None,
        };
        let items = Items::Table {
            include: IncludeObject::None,
            beta: false,
            now: 0,
        };
        let resp = respond(
            info(),
            items,
            ListExtras::default(),
            list,
            None,
            None,
            Duration::from_secs(60),
        )
        .unwrap();
        let mut body = resp.into_body().into_data_stream();
        let mut big_rows_per_piece = Vec::new();
        while let Some(piece) = body.next().await {
            let piece = piece.unwrap();
            let text = String::from_utf8_lossy(&piece);
            big_rows_per_piece.push(text.matches("\"z").count());
        }
        assert_eq!(big_rows_per_piece.iter().sum::<usize>(), 12);
        let most = big_rows_per_piece.iter().max().copied().unwrap_or(0);
        assert!(
            most <= 1024 * 1024 / (300 * 1024) + 1,
            "one batch read {most} objects of 300 KiB: {big_rows_per_piece:?}"
        );
    }

    /// A gzipped list is compressed on the request compute pool, in its client's flow, not
    /// on the thread polling its body (red team rt10 finding 3: 20 such lists compressing
    /// on the I/O threads held another user's tiny list for seconds): while every place in
    /// the pool is taken, not one byte of it is made — its first included — and once places
    /// free up the whole list comes. An uncompressed JSON list (copies of stored bytes)
    /// needs no place.
    #[tokio::test]
    async fn a_gzipped_list_compresses_on_the_compute_pool() {
        use futures::FutureExt;
        let (pool, release) = crate::compress::tests::full_pool().await;
        let alice = crate::flowcontrol::ClientKey::user("alice");
        let budget = crate::compress::GzipBudget::new(1);
        let gzipped = respond(
            info(),
            Items::Json,
            ListExtras::default(),
            list(400, 1000),
            budget.try_take(),
            Some(pool.offloader(alice.clone())),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(gzipped.headers().contains_key(header::CONTENT_ENCODING));
        let plain = respond(
            info(),
            Items::Json,
            ListExtras::default(),
            list(400, 1000),
            None,
            Some(pool.offloader(alice)),
            Duration::from_secs(60),
        )
        .unwrap();
        let mut body = gzipped.into_body().into_data_stream();
        assert!(
            body.next().now_or_never().is_none(),
            "nothing is compressed while the pool is full"
        );
        let (plain, _) = body_of(plain).await;
        drop(release);
        let mut wire = Vec::new();
        while let Some(piece) = body.next().await {
            wire.extend_from_slice(&piece.unwrap());
        }
        let mut json = Vec::new();
        use std::io::Read;
        flate2::read::GzDecoder::new(&wire[..])
            .read_to_end(&mut json)
            .unwrap();
        assert_eq!(json, plain, "the same list, gzipped");
        let v: Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["items"].as_array().unwrap().len(), 400);
    }

    #[tokio::test]
    async fn a_stream_past_its_deadline_ends_with_an_error_not_a_short_list() {
        let resp = respond(
            info(),
            Items::Json,
            ListExtras::default(),
            list(2000, 1000),
            None,
            None,
            Duration::from_millis(50),
        )
        .unwrap();
        let mut body = resp.into_body().into_data_stream();
        let first = body.next().await.unwrap();
        assert!(first.is_ok());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut saw_error = false;
        while let Some(piece) = body.next().await {
            if piece.is_err() {
                saw_error = true;
                break;
            }
        }
        assert!(saw_error, "the body is cut, not ended");
    }

    #[tokio::test]
    async fn streamed_lists_hold_their_guards_until_the_body_is_gone() {
        let guard = Arc::new(());
        let resp = respond(
            info(),
            Items::Json,
            ListExtras::default(),
            list(400, 1000),
            None,
            None,
            Duration::from_secs(60),
        )
        .unwrap();
        let resp = hold_until_sent(resp, Arc::clone(&guard));
        assert_eq!(Arc::strong_count(&guard), 2);
        let mut body = resp.into_body().into_data_stream();
        let _ = body.next().await;
        assert_eq!(Arc::strong_count(&guard), 2, "held while streaming");
        drop(body);
        assert_eq!(
            Arc::strong_count(&guard),
            1,
            "released when the client goes away"
        );
        let small = respond(
            info(),
            Items::Json,
            ListExtras::default(),
            list(1, 1),
            None,
            None,
            Duration::from_secs(60),
        )
        .unwrap();
        let _small = hold_until_sent(small, Arc::clone(&guard));
        assert_eq!(
            Arc::strong_count(&guard),
            1,
            "a whole response holds nothing"
        );
    }
}
