//! The log backend (`--audit-log-path`, `--audit-log-maxsize`, `--audit-log-maxbackup`):
//! events are encoded on the caller's thread, queued, and written by one thread, one line
//! each; the file is rotated by size, keeping at most the configured number of old files.
//!
//! The queue is bounded twice: by events ([`LogConfig::queue`], upstream's 10 000) and by
//! the bytes of their encoded lines ([`LogConfig::queue_bytes`]), since a `Request`-level
//! event carries a body of up to 3 MiB and 10 000 of them would be ~30 GB. An event that
//! does not fit either bound is dropped and counted, never waited for.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::event::Event;

/// Counters of the audit backend (upstream's names).
#[derive(Debug, Clone, Default)]
pub struct AuditMetrics {
    /// `apiserver_audit_event_total`: events handed to the backend.
    pub events: Counter,
    /// `apiserver_audit_error_total{plugin="log"}`: events lost (queue full by count or by
    /// bytes, write failed).
    pub errors: Family<Vec<(String, String)>, Counter>,
}

impl AuditMetrics {
    /// Registers the counters.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "apiserver_audit_event",
            "Counter of audit events generated and sent to the audit backend",
            m.events.clone(),
        );
        registry.register(
            "apiserver_audit_error",
            "Counter of audit events that failed to be audited properly (dropped when the queue was full of events or bytes, or not written)",
            m.errors.clone(),
        );
        m
    }

    fn error(&self) {
        self.errors
            .get_or_create(&vec![("plugin".to_owned(), "log".to_owned())])
            .inc();
    }
}

/// Where and how to write.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// The file; `-` writes to standard output.
    pub path: PathBuf,
    /// Rotate when the file would grow past this many bytes (0: never).
    pub max_size_bytes: u64,
    /// Old files kept after rotation (0: all).
    pub max_backups: usize,
    /// Events queued before new ones are dropped.
    pub queue: usize,
    /// Bytes of encoded events queued before new ones are dropped: an event whose line
    /// would take the queue past it is dropped (at least 1; an event larger than this is
    /// never written).
    pub queue_bytes: usize,
}

/// The default [`LogConfig::queue_bytes`]: 64 MiB, room for about 20 events carrying
/// the largest recorded body (3 MiB) or tens of thousands of `Metadata` events.
pub const DEFAULT_QUEUE_BYTES: usize = 64 * 1024 * 1024;

impl LogConfig {
    /// Upstream's defaults (no rotation, a queue of 10 000 events) and a byte bound of
    /// [`DEFAULT_QUEUE_BYTES`].
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max_size_bytes: 0,
            max_backups: 0,
            queue: 10_000,
            queue_bytes: DEFAULT_QUEUE_BYTES,
        }
    }
}

/// The bytes of the queued lines, against their bound; taken by [`LogBackend::log`] before
/// a line is queued, given back by the writer once the line is written (or the queue
/// refused it).
#[derive(Debug)]
struct ByteBudget {
    queued: AtomicUsize,
    max: usize,
}

impl ByteBudget {
    fn new(max: usize) -> Self {
        Self {
            queued: AtomicUsize::new(0),
            max: max.max(1),
        }
    }

    /// Takes `n` bytes if they fit; `false` (nothing taken) when they would exceed the bound.
    fn take(&self, n: usize) -> bool {
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                q.checked_add(n).filter(|&t| t <= self.max)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        let _ = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                Some(q.saturating_sub(n))
            });
    }
}

/// A running log backend. Dropping it writes what is queued and stops the writer.
pub struct LogBackend {
    tx: Option<SyncSender<Vec<u8>>>,
    budget: Arc<ByteBudget>,
    metrics: AuditMetrics,
    writer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LogBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBackend").finish_non_exhaustive()
    }
}

impl LogBackend {
    /// Opens the file (appending) and starts the writer thread.
    pub fn start(config: LogConfig, metrics: AuditMetrics) -> std::io::Result<Self> {
        let out = Output::open(&config.path)?;
        let (tx, rx) = sync_channel(config.queue.max(1));
        let budget = Arc::new(ByteBudget::new(config.queue_bytes));
        let m = metrics.clone();
        let b = Arc::clone(&budget);
        let writer = std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_loop(rx, out, &config, &m, &b))?;
        Ok(Self {
            tx: Some(tx),
            budget,
            metrics,
            writer: Some(writer),
        })
    }

    /// Queues an event; never blocks (a queue full of events or of bytes drops it and
    /// counts the drop).
    pub fn log(&self, event: &Event) {
        self.metrics.events.inc();
        let Ok(mut line) = serde_json::to_vec(event) else {
            self.metrics.error();
            return;
        };
        line.push(b'\n');
        let size = line.len();
        if !self.budget.take(size) {
            self.metrics.error();
            return;
        }
        match self.tx.as_ref().map(|tx| tx.try_send(line)) {
            Some(Ok(())) => {}
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => {
                self.budget.give_back(size);
                self.metrics.error();
            }
        }
    }
}

impl Drop for LogBackend {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

enum Output {
    Stdout(std::io::Stdout),
    File { w: BufWriter<File>, size: u64 },
}

impl Output {
    fn open(path: &Path) -> std::io::Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(Output::Stdout(std::io::stdout()));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        let size = f.metadata()?.len();
        Ok(Output::File {
            w: BufWriter::new(f),
            size,
        })
    }

    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Output::Stdout(s) => s.write_all(line),
            Output::File { w, size } => {
                w.write_all(line)?;
                *size += line.len() as u64;
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(s) => s.flush(),
            Output::File { w, .. } => w.flush(),
        }
    }

    fn size(&self) -> u64 {
        match self {
            Output::Stdout(_) => 0,
            Output::File { size, .. } => *size,
        }
    }
}

/// `audit.log` → `audit-2026-12-01T00-49-12.123.log` (lumberjack's naming).
fn backup_name(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let ts = crate::event::timestamp(std::time::SystemTime::now());
    // 2026-12-01T00:49:12.123456Z → 2026-12-01T00-49-12.123456
    let ts = ts.trim_end_matches('Z').replace(':', "-");
    path.with_file_name(format!("{stem}-{ts}{ext}"))
}

/// Whether `name` is one of [`backup_name`]'s names for a log of this stem and extension:
/// `STEM-YYYY-MM-DDTHH-MM-SS.ffffffEXT`, nothing else (a neighbour such as
/// `audit-policy.yaml` next to `audit.log` is not a backup, and is never pruned).
fn is_backup_name(name: &str, stem: &str, ext: &str) -> bool {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd-dd-dd.dddddd";
    let Some(ts) = name
        .strip_prefix(stem)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|r| r.strip_suffix(ext))
    else {
        return false;
    };
    ts.len() == SHAPE.len()
        && ts.bytes().zip(SHAPE).all(|(c, &want)| match want {
            b'd' => c.is_ascii_digit(),
            other => c == other,
        })
}

fn prune(path: &Path, keep: usize) {
    if keep == 0 {
        return;
    }
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem()) else {
        return;
    };
    let stem = stem.to_string_lossy();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut backups: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| is_backup_name(&n.to_string_lossy(), &stem, &ext))
        })
        .collect();
    backups.sort();
    let excess = backups.len().saturating_sub(keep);
    for old in backups.into_iter().take(excess) {
        if let Err(e) = std::fs::remove_file(&old) {
            tracing::warn!(file = %old.display(), error = %e, "removing an old audit log failed");
        }
    }
}

fn rotate(out: &mut Output, config: &LogConfig) -> std::io::Result<()> {
    out.flush()?;
    std::fs::rename(&config.path, backup_name(&config.path))?;
    *out = Output::open(&config.path)?;
    prune(&config.path, config.max_backups);
    Ok(())
}

fn write_loop(
    rx: Receiver<Vec<u8>>,
    mut out: Output,
    config: &LogConfig,
    m: &AuditMetrics,
    budget: &ByteBudget,
) {
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(line) = next.take() {
            let full = config.max_size_bytes > 0
                && out.size() > 0
                && out.size() + line.len() as u64 > config.max_size_bytes;
            if full {
                if let Err(e) = rotate(&mut out, config) {
                    tracing::warn!(error = %e, "rotating the audit log failed");
                }
            }
            if let Err(e) = out.write(&line) {
                tracing::warn!(error = %e, "writing the audit log failed");
                m.error();
            }
            // Out of the queue (possibly still in the file's buffer, which is bounded).
            budget.give_back(line.len());
            drop(line);
            next = rx.try_recv().ok();
        }
        if let Err(e) = out.flush() {
            tracing::warn!(error = %e, "flushing the audit log failed");
        }
    }
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Stage;
    use crate::policy::Level;

    fn event(i: usize) -> Event {
        let mut e = Event::new(
            Level::Metadata,
            &format!("id-{i}"),
            Stage::ResponseComplete,
            std::time::SystemTime::now(),
        );
        e.verb = "get".into();
        e
    }

    #[test]
    fn writes_one_json_line_per_event_and_rotates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut config = LogConfig::new(&path);
        config.max_size_bytes = 2_000;
        config.max_backups = 2;
        let metrics = AuditMetrics::default();
        let backend = LogBackend::start(config, metrics.clone()).unwrap();
        for i in 0..60 {
            backend.log(&event(i));
        }
        drop(backend);
        assert_eq!(metrics.events.get(), 60);
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert_eq!(files.len(), 3, "current file and two backups: {files:?}");
        let current = std::fs::read_to_string(&path).unwrap();
        assert!(current.len() <= 2_000);
        let last: Vec<serde_json::Value> = current
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(last.last().unwrap()["auditID"], "id-59");
        for f in &files {
            for l in std::fs::read_to_string(f).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(v["kind"], "Event");
            }
        }
    }

    #[test]
    fn rotation_prunes_only_its_own_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        // Neighbours sharing the log's stem, which a prefix match would have deleted.
        let neighbours = ["audit-policy.yaml", "audit-notes.log", "audit-2026.log"];
        for n in neighbours {
            std::fs::write(dir.path().join(n), "keep me").unwrap();
        }
        let mut config = LogConfig::new(&path);
        config.max_size_bytes = 1_000;
        config.max_backups = 1;
        let backend = LogBackend::start(config, AuditMetrics::default()).unwrap();
        for i in 0..60 {
            backend.log(&event(i));
        }
        drop(backend);
        for n in neighbours {
            assert_eq!(
                std::fs::read_to_string(dir.path().join(n)).unwrap(),
                "keep me",
                "{n}"
            );
        }
        let backups: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| is_backup_name(n, "audit", ".log"))
            .collect();
        assert_eq!(backups.len(), 1, "{backups:?}");
        assert!(backup_name(&path).to_string_lossy().ends_with(".log"));
        assert!(is_backup_name(
            &backup_name(&path).file_name().unwrap().to_string_lossy(),
            "audit",
            ".log"
        ));
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        // A path whose writer cannot keep up is hard to arrange; a queue of 1 with many
        // events sent at once drops some of them.
        let mut config = LogConfig::new(dir.path().join("a.log"));
        config.queue = 1;
        let metrics = AuditMetrics::default();
        let backend = LogBackend::start(config, metrics.clone()).unwrap();
        for i in 0..10_000 {
            backend.log(&event(i));
        }
        drop(backend);
        let written = std::fs::read_to_string(dir.path().join("a.log"))
            .unwrap()
            .lines()
            .count() as u64;
        let dropped = metrics
            .errors
            .get_or_create(&vec![("plugin".to_owned(), "log".to_owned())])
            .get();
        assert_eq!(written + dropped, 10_000);
        assert!(dropped > 0, "nothing was dropped");
    }

    fn dropped(metrics: &AuditMetrics) -> u64 {
        metrics
            .errors
            .get_or_create(&vec![("plugin".to_owned(), "log".to_owned())])
            .get()
    }

    /// The lines of `path` once it holds `n` of them (the writer is a thread).
    fn lines_once(path: &Path, n: usize) -> Vec<serde_json::Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if text.lines().count() >= n {
                return text
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never wrote {n} lines"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn events_beyond_the_byte_budget_are_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let small = serde_json::to_vec(&event(0)).unwrap().len() + 1;
        let mut config = LogConfig::new(&path);
        // Room for one small event at a time, whatever the event count allows.
        config.queue_bytes = small + 16;
        let metrics = AuditMetrics::default();
        let backend = LogBackend::start(config, metrics.clone()).unwrap();
        // A Request-level event with a large body never fits, even in an empty queue.
        let mut big = event(1);
        big.request_object = Some(serde_json::json!({"data": "x".repeat(64 * 1024)}));
        backend.log(&big);
        assert_eq!(
            dropped(&metrics),
            1,
            "the large event is dropped and counted"
        );
        // The budget is given back once a line is written: small events, one after the
        // other, all get through.
        for i in 0..5 {
            backend.log(&event(10 + i));
            let lines = lines_once(&path, i + 1);
            assert_eq!(lines[i]["auditID"], format!("id-{}", 10 + i));
        }
        drop(backend);
        assert_eq!(dropped(&metrics), 1);
        assert_eq!(metrics.events.get(), 6);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 5);
        assert!(!text.contains("xxxx"), "the large event was written");
    }

    #[test]
    fn the_byte_budget_counts_exactly() {
        let b = ByteBudget::new(100);
        assert!(b.take(60));
        assert!(!b.take(41), "60 + 41 is over 100");
        assert!(b.take(40));
        assert!(!b.take(1));
        b.give_back(60);
        assert!(b.take(60));
        assert!(!b.take(usize::MAX), "no overflow");
        b.give_back(usize::MAX);
        assert!(b.take(100));
        assert!(!ByteBudget::new(0).take(2), "a budget is at least 1 byte");
    }
}
