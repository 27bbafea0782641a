//! A fake etcd for tests that need etcd to answer in ways a real one only does by chance (a
//! compaction landing between two pages of one list) or in versions Debian does not ship (a
//! member with the etcd 15220 fix): a gRPC server on a loopback port with the KV (Range
//! only), Watch (create and progress requests) and Maintenance (Status) services, over an
//! in-memory key space the test fills, plus a fault script for Range.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use listwatch_etcd::proto::etcdserverpb::kv_server::{Kv, KvServer};
use listwatch_etcd::proto::etcdserverpb::maintenance_server::{Maintenance, MaintenanceServer};
use listwatch_etcd::proto::etcdserverpb::watch_server::{Watch, WatchServer};
use listwatch_etcd::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, ResponseHeader, StatusRequest, StatusResponse,
    TxnRequest, TxnResponse, WatchRequest, WatchResponse, watch_request,
};
use listwatch_etcd::proto::mvccpb::event::EventType;
use listwatch_etcd::proto::mvccpb::{Event, KeyValue};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

/// Decides, for the n-th Range call (from 0), whether it fails and how.
pub(crate) type RangeFault = Box<dyn FnMut(usize, &RangeRequest) -> Option<Status> + Send>;

#[derive(Default)]
struct State {
    revision: i64,
    kvs: BTreeMap<Vec<u8>, KeyValue>,
    ranges: usize,
    range_fault: Option<RangeFault>,
    /// Open watch streams.
    watchers: Vec<mpsc::Sender<Result<WatchResponse, Status>>>,
    /// Progress requests answered so far.
    progress_answered: usize,
}

/// The fake's shared state; cheap to clone.
#[derive(Clone)]
pub(crate) struct Fake {
    version: Arc<str>,
    state: Arc<Mutex<State>>,
}

/// A running fake etcd; the server stops when dropped.
pub(crate) struct FakeEtcd {
    pub(crate) fake: Fake,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeEtcd {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeEtcd {
    /// Starts a fake that reports `version` (e.g. "3.5.13") in Status.
    pub(crate) async fn start(version: &str) -> Self {
        let fake = Fake {
            version: version.into(),
            state: Arc::new(Mutex::new(State {
                revision: 1,
                ..State::default()
            })),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = futures::stream::unfold(listener, |l| async move {
            let conn = l.accept().await.map(|(s, _)| s);
            Some((conn, l))
        });
        let server = tonic::transport::Server::builder()
            .add_service(KvServer::new(fake.clone()))
            .add_service(WatchServer::new(fake.clone()))
            .add_service(MaintenanceServer::new(fake.clone()))
            .serve_with_incoming(incoming);
        let task = tokio::spawn(async move {
            let _ = server.await;
        });
        Self { fake, addr, task }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Fake {
    /// Stores `value` at `key` at the next revision; returns the revision.
    pub(crate) fn put(&self, key: &str, value: &[u8]) -> i64 {
        let mut s = self.state.lock().unwrap();
        s.revision += 1;
        let rev = s.revision;
        let create = s
            .kvs
            .get(key.as_bytes())
            .map_or(rev, |kv| kv.create_revision);
        s.kvs.insert(
            key.as_bytes().to_vec(),
            KeyValue {
                key: Bytes::from(key.as_bytes().to_vec()),
                create_revision: create,
                mod_revision: rev,
                version: 1,
                value: Bytes::from(value.to_vec()),
                lease: 0,
            },
        );
        rev
    }

    pub(crate) fn revision(&self) -> i64 {
        self.state.lock().unwrap().revision
    }

    /// Scripts Range failures (see [`RangeFault`]); the call count restarts at 0.
    pub(crate) fn on_range(&self, fault: RangeFault) {
        let mut s = self.state.lock().unwrap();
        s.ranges = 0;
        s.range_fault = Some(fault);
    }

    /// Stores `value` at `key` and sends the PUT event to every open watch.
    pub(crate) fn put_and_notify(&self, key: &str, value: &[u8]) -> i64 {
        let rev = self.put(key, value);
        let kv = self.state.lock().unwrap().kvs.get(key.as_bytes()).cloned();
        let resp = WatchResponse {
            header: self.header(rev),
            watch_id: 0,
            events: vec![Event {
                r#type: EventType::Put as i32,
                kv,
                prev_kv: None,
            }],
            ..Default::default()
        };
        let watchers = self.state.lock().unwrap().watchers.clone();
        for w in watchers {
            let _ = w.try_send(Ok(resp.clone()));
        }
        rev
    }

    /// How many progress requests the fake has answered.
    pub(crate) fn progress_answered(&self) -> usize {
        self.state.lock().unwrap().progress_answered
    }

    fn header(&self, revision: i64) -> Option<ResponseHeader> {
        Some(ResponseHeader {
            cluster_id: 1,
            member_id: 1,
            revision,
            raft_term: 2,
        })
    }
}

fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    if end.is_empty() {
        return key == start;
    }
    key >= start && (end == [0] || key < end)
}

#[tonic::async_trait]
impl Kv for Fake {
    async fn range(&self, req: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        let req = req.into_inner();
        let mut s = self.state.lock().unwrap();
        let n = s.ranges;
        s.ranges += 1;
        if let Some(fault) = s.range_fault.as_mut()
            && let Some(status) = fault(n, &req)
        {
            return Err(status);
        }
        if req.revision > s.revision {
            return Err(Status::out_of_range(
                "etcdserver: mvcc: required revision is a future revision",
            ));
        }
        let matching: Vec<&KeyValue> = s
            .kvs
            .values()
            .filter(|kv| in_range(&kv.key, &req.key, &req.range_end))
            .collect();
        let count = matching.len() as i64;
        let limit = usize::try_from(req.limit).unwrap_or(0);
        let take = if limit == 0 { matching.len() } else { limit };
        let kvs: Vec<KeyValue> = if req.count_only {
            Vec::new()
        } else {
            matching.iter().take(take).map(|kv| (*kv).clone()).collect()
        };
        let more = !req.count_only && matching.len() > take;
        Ok(Response::new(RangeResponse {
            header: self.header(s.revision),
            kvs,
            more,
            count,
        }))
    }

    async fn put(&self, _: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        Err(Status::unimplemented("fake etcd: put"))
    }

    async fn delete_range(
        &self,
        _: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        Err(Status::unimplemented("fake etcd: delete_range"))
    }

    async fn txn(&self, _: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        Err(Status::unimplemented("fake etcd: txn"))
    }

    async fn compact(
        &self,
        _: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        Err(Status::unimplemented("fake etcd: compact"))
    }
}

type WatchOut = Pin<Box<dyn Stream<Item = Result<WatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Watch for Fake {
    type WatchStream = WatchOut;

    /// Answers a create with `created`, and every progress request at once with the current
    /// revision (watch id −1), as etcd 3.4 does whatever the watcher still owes.
    async fn watch(
        &self,
        req: Request<Streaming<WatchRequest>>,
    ) -> Result<Response<WatchOut>, Status> {
        let mut incoming = req.into_inner();
        let (tx, rx) = mpsc::channel(16);
        self.state.lock().unwrap().watchers.push(tx.clone());
        let fake = self.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = incoming.next().await {
                let resp = match msg.request_union {
                    Some(watch_request::RequestUnion::CreateRequest(_)) => WatchResponse {
                        header: fake.header(fake.revision()),
                        watch_id: 0,
                        created: true,
                        ..Default::default()
                    },
                    Some(watch_request::RequestUnion::ProgressRequest(_)) => WatchResponse {
                        header: fake.header(fake.revision()),
                        watch_id: -1,
                        ..Default::default()
                    },
                    _ => continue,
                };
                let progress = resp.watch_id == -1;
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
                if progress {
                    fake.state.lock().unwrap().progress_answered += 1;
                }
            }
        });
        let out = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(Response::new(Box::pin(out)))
    }
}

#[tonic::async_trait]
impl Maintenance for Fake {
    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        Ok(Response::new(StatusResponse {
            header: self.header(self.revision()),
            version: self.version.to_string(),
            leader: 1,
            raft_index: 1,
            raft_term: 2,
            raft_applied_index: 1,
            ..Default::default()
        }))
    }
}
