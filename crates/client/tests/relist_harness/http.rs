//! The default path of a relist, measured end to end: a reflector with `Config::default()`
//! over an `HttpListerWatcher`, against a loopback server that answers every list
//! unpaginated, as kube-apiserver's watch cache does (it ignores `limit` at RV "0" and is
//! asked for none at the last synced RV), so each list body is the whole collection and its
//! bytes count in the client's memory.
//!
//! The server streams its answers: it writes one object per HTTP chunk, generated when it is
//! written, so the server's own heap (counted by the same allocator) stays at one object.

use std::alloc::System;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cap::Cap;
use futures::StreamExt;
use listwatch_client::{Config, HttpConfig, HttpListerWatcher, Writer, reflector, watcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{Measured, OBJECTS, PAYLOAD};

struct Server {
    versions: Mutex<Vec<u64>>,
    /// Bumped to end every open watch with a 410 `ERROR` event.
    expire: watch::Sender<u64>,
    /// (list requests, of which with `limit`)
    lists: Mutex<(usize, usize)>,
}

impl Server {
    fn object(i: usize, rv: u64) -> String {
        let payload = "x".repeat(PAYLOAD);
        format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"pod-{i:05}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"payload":"{payload}","rv":{rv}}}}}"#
        )
    }

    fn list_rv(&self) -> u64 {
        self.versions
            .lock()
            .unwrap()
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
    }

    async fn serve(self: Arc<Self>, mut sock: TcpStream) {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let target = String::from_utf8_lossy(&head)
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_owned();
        let query = target.split_once('?').map(|(_, q)| q).unwrap_or_default();
        let param = |name: &str| {
            form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        };
        let headers = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
        if sock.write_all(headers.as_bytes()).await.is_err() {
            return;
        }
        if param("watch").is_some() {
            let mut expire = self.expire.subscribe();
            expire.mark_unchanged();
            let _ = expire.changed().await;
            let frame = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}
"#;
            let _ = chunk(&mut sock, frame).await;
            let _ = sock.write_all(b"0\r\n\r\n").await;
            return;
        }
        {
            let mut l = self.lists.lock().unwrap();
            l.0 += 1;
            l.1 += usize::from(param("limit").is_some());
        }
        // Unpaginated whatever the limit, as a watch cache: one snapshot of the versions.
        let versions = self.versions.lock().unwrap().clone();
        let rv = versions.iter().copied().max().unwrap_or(1);
        let open = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":["#
        );
        if chunk(&mut sock, &open).await.is_err() {
            return;
        }
        for (i, v) in versions.iter().enumerate() {
            let mut item = Self::object(i, *v);
            if i > 0 {
                item.insert(0, ',');
            }
            if chunk(&mut sock, &item).await.is_err() {
                return;
            }
        }
        let _ = chunk(&mut sock, "]}").await;
        let _ = sock.write_all(b"0\r\n\r\n").await;
    }
}

async fn chunk(sock: &mut TcpStream, data: &str) -> std::io::Result<()> {
    sock.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes())
        .await
}

/// Syncs a reflector with the default config over HTTP, changes every `change_every`-th
/// object (none with `None`) while the watch is down, expires the watch and waits for the
/// relist at the last version to complete; asserts the store's final state and that no list
/// asked for pages, and returns what it cost.
pub(crate) fn measure_default_relist(
    alloc: &'static Cap<System>,
    change_every: Option<usize>,
) -> Measured {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let (expire, _) = watch::channel(0);
        let server = Arc::new(Server {
            versions: Mutex::new((1..=OBJECTS as u64).collect()),
            expire,
            lists: Mutex::new((0, 0)),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn({
            let server = Arc::clone(&server);
            async move {
                while let Ok((sock, _)) = listener.accept().await {
                    tokio::spawn(Arc::clone(&server).serve(sock));
                }
            }
        });
        let baseline = alloc.allocated();

        let lw = HttpListerWatcher::new(HttpConfig::new(&url).unwrap(), "/api/v1/pods").unwrap();
        let writer = Writer::default();
        let store = writer.store();
        tokio::spawn(reflector(writer, watcher(lw, Config::default())).for_each(|_| async {}));
        store.wait_until_synced().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let store_bytes = alloc.allocated() - baseline;
        let initial_peak = alloc.max_allocated() - baseline;

        let next = OBJECTS as u64 + 1;
        if let Some(every) = change_every {
            let mut v = server.versions.lock().unwrap();
            for (n, i) in (0..OBJECTS).step_by(every).enumerate() {
                v[i] = next + n as u64;
            }
        }
        let want_rv = server.list_rv();
        let lists_before = server.lists.lock().unwrap().0;
        server.expire.send_modify(|e| *e += 1);
        for _ in 0..1000 {
            if server.lists.lock().unwrap().0 > lists_before
                && store.resource_version() == want_rv.to_string()
                && store.get_by_name(Some("ns"), "pod-00000").is_some_and(|p| {
                    p.resource_version() == if change_every.is_some() { next } else { 1 }
                })
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (lists, paged) = *server.lists.lock().unwrap();
        assert_eq!(lists, lists_before + 1, "one relist");
        assert_eq!(paged, 1, "only the first list (at RV 0) asks for pages");
        assert_eq!(
            store.resource_version(),
            want_rv.to_string(),
            "relist did not complete"
        );
        assert_eq!(store.len(), OBJECTS);
        let want_5 = match change_every {
            Some(every) if 5 % every == 0 => next + (5 / every) as u64,
            _ => 6,
        };
        assert_eq!(
            store
                .get_by_name(Some("ns"), "pod-00005")
                .unwrap()
                .resource_version(),
            want_5
        );

        let peak = alloc.max_allocated() - baseline;
        let m = Measured {
            store_bytes,
            initial_peak,
            peak,
        };
        eprintln!(
            "store {store_bytes} B, initial list peak {initial_peak} B, peak {peak} B, ratio {:.3}",
            m.ratio()
        );
        m
    })
}
