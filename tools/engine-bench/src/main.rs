//! redb under durable_bench's workload (see Cargo.toml): 25 writers, each write acknowledged
//! only once durable (`Durability::Immediate`), records the size of durable_bench's pod log
//! record; then a restart with 150 000 of them.
//!
//! - naive: each writer commits its own write transaction (redb serializes write
//!   transactions; every commit syncs);
//! - grouped: the writers hand their writes to one thread that commits each batch in one
//!   transaction, with the same coalescing as listwatch-memstore's log thread (after a commit,
//!   wait at most half its duration, 2 ms cap, for the writers just acknowledged) — redb used
//!   as the engine under listwatch's own group commit;
//! - restart: `Database::open` alone, and open + reading every record (what rebuilding
//!   listwatch's in-memory MVCC state from the engine would take).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadableTable, TableDefinition};

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
const WRITERS: usize = 25;
/// durable_bench's pod log record (1 608 bytes of JSON plus the key and parsed view).
const RECORD: usize = 1758;

fn key(tag: &str, w: usize, i: usize) -> String {
    format!("/pods/ns-{}/{tag}-{w}-{i}", i % 100)
}

fn record(w: usize, i: usize) -> Vec<u8> {
    let mut v = vec![b'x'; RECORD];
    v[..16].copy_from_slice(&((w as u128) << 64 | i as u128).to_le_bytes());
    v
}

fn db(path: &Path) -> Database {
    Database::create(path).unwrap()
}

/// Each writer commits its own transaction. Returns writes/s.
fn naive(db: &Arc<Database>, tag: &str, per_writer: usize) -> f64 {
    let start = Instant::now();
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (db, tag) = (Arc::clone(db), tag.to_owned());
            std::thread::spawn(move || {
                for i in 0..per_writer {
                    let mut tx = db.begin_write().unwrap();
                    tx.set_durability(Durability::Immediate);
                    {
                        let mut t = tx.open_table(TABLE).unwrap();
                        t.insert(key(&tag, w, i).as_str(), record(w, i).as_slice())
                            .unwrap();
                    }
                    tx.commit().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    (WRITERS * per_writer) as f64 / start.elapsed().as_secs_f64()
}

struct Q {
    items: Vec<(String, Vec<u8>)>,
    queued: u64,
    synced: u64,
    commits: u64,
    done: bool,
}

/// One committer thread, one transaction per batch. Returns (writes/s, writes per commit).
fn grouped(db: &Arc<Database>, tag: &str, per_writer: usize) -> (f64, f64) {
    let q = Arc::new((
        Mutex::new(Q {
            items: Vec::new(),
            queued: 0,
            synced: 0,
            commits: 0,
            done: false,
        }),
        Condvar::new(),
        Condvar::new(),
    ));
    let committer = {
        let (q, db) = (Arc::clone(&q), Arc::clone(db));
        std::thread::spawn(move || {
            let (mut target, mut bound) = (0u64, Duration::ZERO);
            loop {
                let (items, upto, from) = {
                    let mut g = q.0.lock().unwrap();
                    while g.items.is_empty() && !g.done {
                        g = q.1.wait(g).unwrap();
                    }
                    let deadline = Instant::now() + bound;
                    while g.queued - g.synced < target && !g.done {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        g = q.1.wait_timeout(g, left).unwrap().0;
                    }
                    if g.items.is_empty() {
                        return;
                    }
                    (std::mem::take(&mut g.items), g.queued, g.synced)
                };
                let t = Instant::now();
                let mut tx = db.begin_write().unwrap();
                tx.set_durability(Durability::Immediate);
                {
                    let mut table = tx.open_table(TABLE).unwrap();
                    for (k, v) in &items {
                        table.insert(k.as_str(), v.as_slice()).unwrap();
                    }
                }
                tx.commit().unwrap();
                let took = t.elapsed();
                let mut g = q.0.lock().unwrap();
                target = (g.queued - upto) + (upto - from);
                bound = (took / 2).min(Duration::from_millis(2));
                g.synced = upto;
                g.commits += 1;
                q.2.notify_all();
            }
        })
    };
    let start = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (q, tag) = (Arc::clone(&q), tag.to_owned());
            std::thread::spawn(move || {
                for i in 0..per_writer {
                    let item = (key(&tag, w, i), record(w, i));
                    let mut g = q.0.lock().unwrap();
                    g.items.push(item);
                    g.queued += 1;
                    let mine = g.queued;
                    q.1.notify_one();
                    while g.synced < mine {
                        g = q.2.wait(g).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let rate = (WRITERS * per_writer) as f64 / start.elapsed().as_secs_f64();
    let commits = {
        let mut g = q.0.lock().unwrap();
        g.done = true;
        g.commits
    };
    q.1.notify_all();
    committer.join().unwrap();
    (rate, (WRITERS * per_writer) as f64 / commits.max(1) as f64)
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!(
        "median {:.0}  [min {:.0}  max {:.0}]  ({} rounds)",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1],
        v.len()
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(3);
    let only = args.next().unwrap_or_default();
    let dir = base.join(format!("redb-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "redb; {WRITERS} writers; {RECORD}-byte records; data under {}",
        dir.display()
    );

    if only != "restart" {
        let (mut nv, mut gr, mut gb) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds {
            let path = dir.join(format!("w{r}.redb"));
            let d = Arc::new(db(&path));
            // Naive commits are one sync each: fewer writes keep the round short.
            nv.push(naive(&d, &format!("n{r}"), 40));
            let (rate, batch) = grouped(&d, &format!("g{r}"), 2000);
            gr.push(rate);
            gb.push(batch);
            println!(
                "round {r}: naive {:.0}/s, grouped {:.0}/s ({:.1} writes/commit)",
                nv[r], gr[r], gb[r]
            );
            drop(d);
            std::fs::remove_file(&path).unwrap();
        }
        println!(
            "acknowledged writes/s, redb, a transaction per write: {}",
            stats(nv)
        );
        println!(
            "acknowledged writes/s, redb, group commit:            {}",
            stats(gr)
        );
        println!(
            "  writes per commit:                                  {}",
            stats(gb)
        );
    }

    if only != "writes" {
        let path = dir.join("restart.redb");
        {
            let d = db(&path);
            let start = Instant::now();
            for b in 0..150 {
                let mut tx = d.begin_write().unwrap();
                tx.set_durability(Durability::Immediate);
                {
                    let mut t = tx.open_table(TABLE).unwrap();
                    for i in 0..1000 {
                        let n = b * 1000 + i;
                        t.insert(key("p", n % WRITERS, n).as_str(), record(0, n).as_slice())
                            .unwrap();
                    }
                }
                tx.commit().unwrap();
            }
            println!(
                "filled 150000 records in {:.1} s (transactions of 1000)",
                start.elapsed().as_secs_f64()
            );
        }
        let (mut opens, mut scans) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let start = Instant::now();
            let d = Database::open(&path).unwrap();
            opens.push(start.elapsed().as_secs_f64() * 1000.0);
            let tx = d.begin_read().unwrap();
            let t = tx.open_table(TABLE).unwrap();
            let mut all = Vec::with_capacity(150_000);
            for e in t.iter().unwrap() {
                let (k, v) = e.unwrap();
                all.push((k.value().to_owned(), v.value().to_vec()));
            }
            assert_eq!(all.len(), 150_000);
            scans.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        println!(
            "restart, redb open (ms):                       {}",
            stats(opens)
        );
        println!(
            "restart, redb open + read all 150000 (ms):     {}",
            stats(scans)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
