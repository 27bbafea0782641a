//! The log backend (`--audit-log-path`, `--audit-log-maxsize`, `--audit-log-maxbackup`,
//! `--audit-log-mode`): events are encoded on the caller's task, queued, and written by one
//! thread, one line each; the file is rotated by size, keeping at most the configured number
//! of old files.
//!
//! The queue is bounded twice: by events ([`LogConfig::queue`], upstream's 10 000) and by
//! the bytes of their encoded lines ([`LogConfig::queue_bytes`]), since a `Request`-level
//! event carries a body of up to 3 MiB and 10 000 of them would be ~30 GB. What happens to
//! an event that does not fit is the [`Mode`]:
//! - [`Mode::Blocking`] (the default, as upstream's log backend, which writes in the
//!   request's goroutine): the request waits for room — at most [`LogConfig::block_wait`],
//!   after which the event is dropped, counted and logged (upstream waits without bound: a
//!   stuck disk would hold every request, and each holds a flow-control seat meanwhile);
//! - [`Mode::Batch`] (upstream's `batch` mode, whose buffer drops when full): dropped and
//!   counted at once, never waited for.
//!
//! An event larger than the byte bound can never fit and is dropped and counted at once in
//! both modes.
//!
//! Files: the log and a directory created for it are created `0600` and `0700` (upstream's
//! `ensureLogFile`); an existing log keeps its mode (upstream opens it as it is; a warning
//! at start says when others may read it); a file opened by rotation takes the mode of the
//! file it replaces (lumberjack), so `0600` unless the operator chose otherwise.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::Semaphore;

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

/// What the backend does with an event while its queue is full (`--audit-log-mode`,
/// upstream's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Wait for room, at most [`LogConfig::block_wait`] (upstream's default).
    #[default]
    Blocking,
    /// Drop and count at once.
    Batch,
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
    /// What to do while the queue is full.
    pub mode: Mode,
    /// In [`Mode::Blocking`], the longest a request waits for room before its event is
    /// dropped and counted.
    pub block_wait: Duration,
}

/// The default [`LogConfig::block_wait`]: 30 s, half a default request deadline.
pub const DEFAULT_BLOCK_WAIT: Duration = Duration::from_secs(30);

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
            mode: Mode::Blocking,
            block_wait: DEFAULT_BLOCK_WAIT,
        }
    }
}

/// Room in the queue: one permit per event and one per byte of encoded line, taken before a
/// line is queued and given back by the writer once the line is written.
#[derive(Debug)]
struct Room {
    events: Semaphore,
    bytes: Semaphore,
    max_bytes: usize,
}

impl Room {
    fn new(events: usize, bytes: usize) -> Self {
        let events = events.clamp(1, Semaphore::MAX_PERMITS);
        let bytes = bytes
            .clamp(1, Semaphore::MAX_PERMITS)
            .min(u32::MAX as usize);
        Self {
            events: Semaphore::new(events),
            bytes: Semaphore::new(bytes),
            max_bytes: bytes,
        }
    }

    /// Takes room for a line of `n` bytes if there is some now.
    fn try_take(&self, n: u32) -> bool {
        let Ok(e) = self.events.try_acquire() else {
            return false;
        };
        let Ok(b) = self.bytes.try_acquire_many(n) else {
            return false;
        };
        e.forget();
        b.forget();
        true
    }

    /// Takes room for a line of `n` bytes, waiting for it. Cancel safe: nothing is held
    /// when the future is dropped.
    async fn take(&self, n: u32) {
        let (Ok(e), Ok(b)) = (
            self.events.acquire().await,
            self.bytes.acquire_many(n).await,
        ) else {
            // The semaphores are never closed.
            return;
        };
        e.forget();
        b.forget();
    }

    fn give_back(&self, n: usize) {
        self.events.add_permits(1);
        self.bytes.add_permits(n);
    }
}

/// A running log backend. Dropping it writes what is queued and stops the writer.
pub struct LogBackend {
    tx: Option<Sender<Vec<u8>>>,
    room: Arc<Room>,
    mode: Mode,
    block_wait: Duration,
    metrics: AuditMetrics,
    writer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LogBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBackend")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl LogBackend {
    /// Opens the file (appending; created `0600`) and starts the writer thread.
    pub fn start(config: LogConfig, metrics: AuditMetrics) -> std::io::Result<Self> {
        let out = Output::open(&config.path, None)?;
        if let Output::File { mode: Some(m), .. } = &out
            && m & 0o077 != 0
        {
            tracing::warn!(
                file = %config.path.display(),
                mode = format!("{m:o}"),
                "the audit log is readable or writable by others; Request-level events hold request bodies (Secrets). \
                 Its mode is kept as it is (as upstream); chmod 600 it"
            );
        }
        Self::start_with(config, metrics, out)
    }

    fn start_with(config: LogConfig, metrics: AuditMetrics, out: Output) -> std::io::Result<Self> {
        let (tx, rx) = channel();
        let room = Arc::new(Room::new(config.queue, config.queue_bytes));
        let m = metrics.clone();
        let r = Arc::clone(&room);
        let (mode, block_wait) = (config.mode, config.block_wait);
        let writer = std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_loop(rx, out, &config, &m, &r))?;
        Ok(Self {
            tx: Some(tx),
            room,
            mode,
            block_wait,
            metrics,
            writer: Some(writer),
        })
    }

    /// The event's line, or `None` (counted) when it cannot be queued at all.
    fn line(&self, event: &Event) -> Option<(Vec<u8>, u32)> {
        self.metrics.events.inc();
        let Ok(mut line) = serde_json::to_vec(event) else {
            self.metrics.error();
            return None;
        };
        line.push(b'\n');
        match u32::try_from(line.len()) {
            Ok(n) if line.len() <= self.room.max_bytes => Some((line, n)),
            _ => {
                tracing::warn!(
                    bytes = line.len(),
                    "an audit event larger than the queue's byte bound was dropped"
                );
                self.metrics.error();
                None
            }
        }
    }

    fn send(&self, line: Vec<u8>) {
        let n = line.len();
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(line).is_ok());
        if !sent {
            self.room.give_back(n);
            self.metrics.error();
        }
    }

    /// Queues an event; in [`Mode::Blocking`] waits for room, at most the configured wait,
    /// then drops and counts it; in [`Mode::Batch`] drops and counts it at once when the
    /// queue is full.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future queued nothing and holds no room.
    pub async fn log(&self, event: &Event) {
        let Some((line, n)) = self.line(event) else {
            return;
        };
        if self.room.try_take(n) {
            return self.send(line);
        }
        if self.mode == Mode::Batch {
            self.metrics.error();
            return;
        }
        match tokio::time::timeout(self.block_wait, self.room.take(n)).await {
            Ok(()) => self.send(line),
            Err(_) => {
                tracing::warn!(
                    wait = ?self.block_wait,
                    "the audit log's queue stayed full: an event was dropped (apiserver_audit_error_total)"
                );
                self.metrics.error();
            }
        }
    }

    /// Queues an event without waiting: dropped and counted when the queue is full (for
    /// callers outside an async context).
    pub fn log_nowait(&self, event: &Event) {
        let Some((line, n)) = self.line(event) else {
            return;
        };
        if self.room.try_take(n) {
            self.send(line);
        } else {
            self.metrics.error();
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
    File {
        w: BufWriter<File>,
        size: u64,
        /// The file's permission bits when known (Unix).
        mode: Option<u32>,
    },
    /// A writer of the unit tests (e.g. one that blocks).
    #[cfg(test)]
    Custom(Box<dyn Write + Send>),
}

impl Output {
    /// Opens (appending) or creates the log. A new file is created `0600`, or with
    /// `replaced`'s mode when it replaces a rotated file (lumberjack); a new directory
    /// `0700`.
    fn open(path: &Path, replaced: Option<u32>) -> std::io::Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(Output::Stdout(std::io::stdout()));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let mut b = std::fs::DirBuilder::new();
            b.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
            b.create(dir)?;
        }
        let mut o = OpenOptions::new();
        o.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, replaced.unwrap_or(0o600) & 0o7777);
        #[cfg(not(unix))]
        let _ = replaced;
        let f = o.open(path)?;
        let meta = f.metadata()?;
        #[cfg(unix)]
        let mode = Some(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777);
        #[cfg(not(unix))]
        let mode = None;
        Ok(Output::File {
            w: BufWriter::new(f),
            size: meta.len(),
            mode,
        })
    }

    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Output::Stdout(s) => s.write_all(line),
            Output::File { w, size, .. } => {
                w.write_all(line)?;
                *size += line.len() as u64;
                Ok(())
            }
            #[cfg(test)]
            Output::Custom(w) => w.write_all(line),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(s) => s.flush(),
            Output::File { w, .. } => w.flush(),
            #[cfg(test)]
            Output::Custom(w) => w.flush(),
        }
    }

    fn size(&self) -> u64 {
        match self {
            Output::File { size, .. } => *size,
            _ => 0,
        }
    }

    fn mode(&self) -> Option<u32> {
        match self {
            Output::File { mode, .. } => *mode,
            _ => None,
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
    let mode = out.mode();
    std::fs::rename(&config.path, backup_name(&config.path))?;
    *out = Output::open(&config.path, mode)?;
    prune(&config.path, config.max_backups);
    Ok(())
}

fn write_loop(
    rx: Receiver<Vec<u8>>,
    mut out: Output,
    config: &LogConfig,
    m: &AuditMetrics,
    room: &Room,
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
            room.give_back(line.len());
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
            backend.log_nowait(&event(i));
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
            backend.log_nowait(&event(i));
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

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn batch_mode_drops_and_counts_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        // A path whose writer cannot keep up is hard to arrange; a queue of 1 with many
        // events sent at once drops some of them.
        let mut config = LogConfig::new(dir.path().join("a.log"));
        config.queue = 1;
        config.mode = Mode::Batch;
        let metrics = AuditMetrics::default();
        let backend = LogBackend::start(config, metrics.clone()).unwrap();
        runtime().block_on(async {
            for i in 0..10_000 {
                backend.log(&event(i)).await;
            }
        });
        drop(backend);
        let written = std::fs::read_to_string(dir.path().join("a.log"))
            .unwrap()
            .lines()
            .count() as u64;
        assert_eq!(written + dropped(&metrics), 10_000);
        assert!(dropped(&metrics) > 0, "nothing was dropped");
    }

    /// Issue 23 item 6: under pressure events were dropped where upstream's log backend
    /// blocks. The default mode waits for room: a queue of one event loses nothing.
    #[test]
    fn blocking_mode_waits_for_room_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = LogConfig::new(dir.path().join("a.log"));
        config.queue = 1;
        assert_eq!(config.mode, Mode::Blocking, "the default");
        let metrics = AuditMetrics::default();
        let backend = LogBackend::start(config, metrics.clone()).unwrap();
        runtime().block_on(async {
            for i in 0..10_000 {
                backend.log(&event(i)).await;
            }
        });
        drop(backend);
        let text = std::fs::read_to_string(dir.path().join("a.log")).unwrap();
        assert_eq!(text.lines().count(), 10_000);
        assert_eq!(dropped(&metrics), 0);
        assert!(text.lines().last().unwrap().contains("\"id-9999\""));
    }

    /// A writer whose first write waits until the test releases it (a stuck disk).
    struct Stuck {
        release: Option<std::sync::mpsc::Receiver<()>>,
        lines: Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl Write for Stuck {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if let Some(rx) = self.release.take() {
                let _ = rx.recv_timeout(std::time::Duration::from_secs(60));
            }
            self.lines.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn stuck_backend(
        wait: Duration,
    ) -> (
        LogBackend,
        AuditMetrics,
        std::sync::mpsc::Sender<()>,
        Arc<std::sync::Mutex<Vec<u8>>>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let out = Output::Custom(Box::new(Stuck {
            release: Some(rx),
            lines: Arc::clone(&lines),
        }));
        let mut config = LogConfig::new("unused");
        config.queue = 1;
        config.block_wait = wait;
        let metrics = AuditMetrics::default();
        let backend = LogBackend::start_with(config, metrics.clone(), out).unwrap();
        (backend, metrics, tx, lines)
    }

    #[test]
    fn blocking_mode_waits_while_the_writer_is_stuck_then_writes() {
        let (backend, metrics, release, lines) = stuck_backend(Duration::from_secs(60));
        let backend = Arc::new(backend);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            // The first event takes the queue's one place until the stuck write ends.
            backend.log(&event(1)).await;
            let b = Arc::clone(&backend);
            let waiting = tokio::spawn(async move { b.log(&event(2)).await });
            tokio::task::yield_now().await;
            assert!(
                !waiting.is_finished(),
                "the second event did not wait for room"
            );
            release.send(()).unwrap();
            waiting.await.unwrap();
        });
        drop(rt);
        let backend = Arc::into_inner(backend).unwrap();
        drop(backend);
        assert_eq!(dropped(&metrics), 0);
        let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
    }

    #[test]
    fn blocking_mode_waits_at_most_the_bound_then_drops_and_counts() {
        let (backend, metrics, release, lines) = stuck_backend(Duration::from_millis(50));
        runtime().block_on(async {
            backend.log(&event(1)).await;
            // The queue stays full past the bound: dropped and counted, the caller goes on.
            backend.log(&event(2)).await;
        });
        assert_eq!(dropped(&metrics), 1);
        release.send(()).unwrap();
        drop(backend);
        let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("\"id-1\""));
    }

    #[cfg(unix)]
    #[test]
    fn the_log_is_created_0600_and_rotated_files_keep_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs").join("audit.log");
        let mut config = LogConfig::new(&path);
        config.max_size_bytes = 1_000;
        let backend = LogBackend::start(config, AuditMetrics::default()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        for i in 0..60 {
            backend.log_nowait(&event(i));
        }
        drop(backend);
        for f in std::fs::read_dir(path.parent().unwrap()).unwrap() {
            let f = f.unwrap().path();
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
        // An existing file keeps its mode (upstream opens it as it is), and so do the files
        // rotation opens after it (lumberjack copies the mode).
        let other = dir.path().join("kept.log");
        std::fs::write(&other, "").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o640)).unwrap();
        let mut config = LogConfig::new(&other);
        config.max_size_bytes = 1_000;
        let backend = LogBackend::start(config, AuditMetrics::default()).unwrap();
        for i in 0..60 {
            backend.log_nowait(&event(i));
        }
        drop(backend);
        assert_eq!(mode(&other), 0o640);
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
        backend.log_nowait(&big);
        assert_eq!(
            dropped(&metrics),
            1,
            "the large event is dropped and counted"
        );
        // The budget is given back once a line is written: small events, one after the
        // other, all get through.
        for i in 0..5 {
            backend.log_nowait(&event(10 + i));
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
    fn room_counts_events_and_bytes_exactly() {
        let r = Room::new(2, 100);
        assert!(r.try_take(60));
        assert!(!r.try_take(41), "60 + 41 is over 100");
        assert!(r.try_take(40));
        assert!(
            !r.try_take(0),
            "no event place is left after a refused take"
        );
        r.give_back(60);
        assert!(r.try_take(60));
        assert!(
            !Room::new(0, 0).try_take(2),
            "at least one event and one byte"
        );
    }
}
