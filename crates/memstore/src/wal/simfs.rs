//! An in-memory [`Vfs`] that records every operation, can fail chosen ones (`EIO`, `ENOSPC`
//! …), and builds the states a power cut or a `kill -9` can leave behind (the crash-state
//! harness of `crate::crashtest` and the recovery fuzz target use it).
//!
//! The crash model (what a power cut at operation `k` leaves, as ALICE/CrashMonkey model a
//! POSIX file system):
//! - file data: every write followed (before `k`) by an `fdatasync` of its file is on disk;
//!   of the writes after a file's last sync, any subset of their 512-byte sectors is, applied
//!   in order, and a sector may be torn (only a prefix of its new bytes);
//! - names (create, rename, unlink, mkdir): an operation followed (before `k`) by an `fsync`
//!   of its directory is on disk; of the later ones, any subset (an operation whose source is
//!   missing is a no-op);
//! - a `kill -9` keeps everything (the page cache survives).
//!
//! Invariants: operations are recorded in the order they take effect in the page cache (one
//! lock); a failed operation changes nothing and is not recorded (a failed `fdatasync` leaves
//! its writes unsynced: they may or may not be on disk, and the page cache still has them).
// The fuzz target (feature `fuzzing`) uses only the image and the file layer, not the crash
// model.
#![cfg_attr(not(test), allow(dead_code))]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::vfs::{DirLock, VFile, Vfs};

/// Operations a fault can hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Write,
    Sync,
    Rename,
    Open,
    Remove,
    SyncDir,
}

/// Fail the `nth` (1-based) operation of `kind` from now on — and every later one if
/// `sticky` — with `errno`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fault {
    pub(crate) kind: Kind,
    pub(crate) nth: u64,
    pub(crate) errno: i32,
    pub(crate) sticky: bool,
}

/// Files and names (a file system's state).
#[derive(Debug, Clone, Default)]
pub(crate) struct Image {
    names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    data: HashMap<u64, Vec<u8>>,
    next_ino: u64,
}

impl Image {
    /// An image holding `files` (name → bytes) in `dir`.
    pub(crate) fn with_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Self {
        let mut im = Self::default();
        let mut d = Some(dir);
        while let Some(p) = d.filter(|p| !p.as_os_str().is_empty()) {
            im.dirs.insert(p.to_owned());
            d = p.parent();
        }
        for (name, bytes) in files {
            im.next_ino += 1;
            im.names.insert(dir.join(name), im.next_ino);
            im.data.insert(im.next_ino, bytes.clone());
        }
        im
    }

    /// The bytes of `path`.
    pub(crate) fn file(&self, path: &Path) -> Option<&Vec<u8>> {
        self.names.get(path).and_then(|i| self.data.get(i))
    }

    /// The names of files.
    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        self.names.keys().cloned().collect()
    }

    /// Adds (or replaces) the file `path` (tests putting back what a crash could).
    pub(crate) fn put_file(&mut self, path: &Path, bytes: Vec<u8>) {
        self.next_ino += 1;
        self.names.insert(path.to_owned(), self.next_ino);
        self.data.insert(self.next_ino, bytes);
    }

    fn apply(&mut self, op: &NsOp) {
        match op {
            NsOp::Create { path, ino } => {
                if path.parent().is_none_or(|p| self.dirs.contains(p)) {
                    self.names.insert(path.clone(), *ino);
                    self.data.entry(*ino).or_default();
                }
            }
            NsOp::Rename { from, to } => {
                if let Some(i) = self.names.remove(from) {
                    self.names.insert(to.clone(), i);
                }
            }
            NsOp::Remove { path } => {
                self.names.remove(path);
            }
            NsOp::Mkdir { path } => {
                if path.parent().is_none_or(|p| self.dirs.contains(p)) {
                    self.dirs.insert(path.clone());
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
enum NsOp {
    Create { path: PathBuf, ino: u64 },
    Rename { from: PathBuf, to: PathBuf },
    Remove { path: PathBuf },
    Mkdir { path: PathBuf },
}

impl NsOp {
    /// The directory whose `fsync` makes it durable.
    fn dir(&self) -> Option<&Path> {
        match self {
            NsOp::Create { path, .. } | NsOp::Remove { path } | NsOp::Mkdir { path } => {
                path.parent()
            }
            NsOp::Rename { to, .. } => to.parent(),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write { ino: u64, off: u64, data: Vec<u8> },
    Sync { ino: u64 },
    Ns(NsOp),
    SyncDir { dir: PathBuf },
}

#[derive(Default)]
struct State {
    /// What was on disk when this file system was made.
    base: Image,
    /// The page cache.
    now: Image,
    ops: Vec<Op>,
    faults: Vec<Fault>,
    counts: HashMap<Kind, u64>,
}

impl State {
    fn check(&mut self, kind: Kind) -> io::Result<()> {
        let n = self.counts.entry(kind).or_insert(0);
        *n += 1;
        let n = *n;
        for f in &self.faults {
            if f.kind == kind && (n == f.nth || (f.sticky && n > f.nth)) {
                return Err(io::Error::from_raw_os_error(f.errno));
            }
        }
        Ok(())
    }

    fn ns(&mut self, op: NsOp) {
        self.now.apply(&op);
        self.ops.push(Op::Ns(op));
    }
}

/// The recording file system.
#[derive(Clone)]
pub(crate) struct SimFs {
    st: Arc<Mutex<State>>,
}

impl Default for SimFs {
    /// An empty file system (its root only).
    fn default() -> Self {
        Self::from_image(Image::with_files(Path::new("/"), &[]))
    }
}

/// A small deterministic random source (xorshift64*).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// In `0..n` (0 if `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    pub(crate) fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// How much of the unsynced state a crash keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Nothing that was not synced.
    Synced,
    /// Each unsynced sector and name operation with probability 1/2, sometimes torn.
    Random,
    /// Everything (a `kill -9`: the page cache survives).
    All,
}

const SECTOR: u64 = 512;

impl SimFs {
    /// A file system holding `image` (on disk and in the page cache).
    pub(crate) fn from_image(image: Image) -> Self {
        let st = State {
            base: image.clone(),
            now: image,
            ..State::default()
        };
        Self {
            st: Arc::new(Mutex::new(st)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Operations recorded so far.
    pub(crate) fn ops(&self) -> usize {
        self.lock().ops.len()
    }

    /// Adds a fault.
    pub(crate) fn fail(&self, fault: Fault) {
        let mut st = self.lock();
        let done = st.counts.get(&fault.kind).copied().unwrap_or(0);
        st.faults.push(Fault {
            nth: done + fault.nth,
            ..fault
        });
    }

    /// A `kill -9` right before operation `k`: a file system whose page cache holds
    /// everything done before `k`, of which only what was synced is on disk (the rest stays
    /// unsynced, for later crashes to lose). Faults are not carried over.
    pub(crate) fn fork(&self, k: usize) -> SimFs {
        let st = self.lock();
        let ops: Vec<Op> = st.ops[..k.min(st.ops.len())].to_vec();
        let mut now = st.base.clone();
        for op in &ops {
            match op {
                Op::Ns(n) => now.apply(n),
                Op::Write { ino, off, data } => write(&mut now, *ino, *off, data),
                _ => {}
            }
        }
        now.next_ino = st.now.next_ino;
        let fork = State {
            base: st.base.clone(),
            now,
            ops,
            ..State::default()
        };
        SimFs {
            st: Arc::new(Mutex::new(fork)),
        }
    }

    /// The page cache as it is now (what a restart after `kill -9` reads).
    pub(crate) fn volatile(&self) -> Image {
        self.lock().now.clone()
    }

    /// What a crash right before operation `k` leaves on disk.
    pub(crate) fn crash(&self, k: usize, keep: Keep, rng: &mut Rng) -> Image {
        let st = self.lock();
        let ops = &st.ops[..k.min(st.ops.len())];
        let mut im = st.base.clone();
        if keep == Keep::All {
            for op in ops {
                match op {
                    Op::Ns(n) => im.apply(n),
                    Op::Write { ino, off, data } => write(&mut im, *ino, *off, data),
                    _ => {}
                }
            }
            im.next_ino = st.now.next_ino;
            return im;
        }
        // Names: durable up to each directory's last fsync; later ones maybe.
        let mut last_sync: HashMap<&Path, usize> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            if let Op::SyncDir { dir } = op {
                last_sync.insert(dir, i);
            }
        }
        for (i, op) in ops.iter().enumerate() {
            if let Op::Ns(n) = op {
                let durable = n
                    .dir()
                    .and_then(|d| last_sync.get(d))
                    .is_some_and(|s| *s > i);
                if durable || (keep == Keep::Random && rng.chance(2)) {
                    im.apply(n);
                }
            }
        }
        // Data: durable up to each file's last sync; of later writes, some sectors.
        let mut synced_upto: HashMap<u64, usize> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            if let Op::Sync { ino } = op {
                synced_upto.insert(*ino, i);
            }
        }
        // Per crash, one style for the unsynced sectors, so that "all but the first" and
        // "only the first" states both come up often.
        let style = rng.below(4);
        for op in ops.iter().enumerate() {
            let (i, Op::Write { ino, off, data }) = op else {
                continue;
            };
            if synced_upto.get(ino).is_some_and(|s| *s > i) {
                write(&mut im, *ino, *off, data);
                continue;
            }
            if keep == Keep::Synced {
                continue;
            }
            let mut at = 0usize;
            while at < data.len() {
                let pos = *off + at as u64;
                let n = ((SECTOR - pos % SECTOR) as usize).min(data.len() - at);
                let piece = &data[at..at + n];
                let first = at == 0;
                let keep_it = match style {
                    0 => rng.chance(2),
                    1 => !first,
                    2 => first,
                    _ => !rng.chance(4),
                };
                if keep_it {
                    let cut = if rng.chance(8) {
                        rng.below(n as u64) as usize
                    } else {
                        n
                    };
                    write(&mut im, *ino, pos, &piece[..cut]);
                }
                at += n;
            }
        }
        im.next_ino = st.now.next_ino;
        im
    }
}

fn write(im: &mut Image, ino: u64, off: u64, data: &[u8]) {
    let f = im.data.entry(ino).or_default();
    let Ok(start) = usize::try_from(off) else {
        return;
    };
    let end = start + data.len();
    if f.len() < end {
        f.resize(end, 0);
    }
    f[start..end].copy_from_slice(data);
}

struct SimFile {
    st: Arc<Mutex<State>>,
    ino: u64,
}

impl VFile for SimFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        st.check(Kind::Write)?;
        write(&mut st.now, self.ino, offset, buf);
        st.ops.push(Op::Write {
            ino: self.ino,
            off: offset,
            data: buf.to_vec(),
        });
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        st.check(Kind::Sync)?;
        st.ops.push(Op::Sync { ino: self.ino });
        Ok(())
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, path.display().to_string())
}

impl Vfs for SimFs {
    fn mode(&self, path: &Path) -> io::Result<Option<u32>> {
        let st = self.lock();
        Ok(if st.now.dirs.contains(path) {
            Some(0o700)
        } else if st.now.names.contains_key(path) {
            Some(0o600)
        } else {
            None
        })
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let mut missing = Vec::new();
        let mut d = Some(path);
        while let Some(p) = d.filter(|p| !p.as_os_str().is_empty() && !st.now.dirs.contains(*p)) {
            missing.push(p.to_owned());
            d = p.parent();
        }
        for p in missing.into_iter().rev() {
            st.check(Kind::Open)?;
            st.ns(NsOp::Mkdir { path: p });
        }
        Ok(())
    }

    fn lock(&self, _dir: &Path) -> io::Result<Option<DirLock>> {
        Ok(Some(Box::new(())))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.lock();
        if !st.now.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(st
            .now
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn read(&self, path: &Path, buf: &mut Vec<u8>) -> io::Result<()> {
        let st = self.lock();
        let data = st.now.file(path).ok_or_else(|| not_found(path))?;
        buf.clear();
        buf.extend_from_slice(data);
        Ok(())
    }

    fn read_prefix(&self, path: &Path, max: usize, buf: &mut Vec<u8>) -> io::Result<()> {
        let st = self.lock();
        let data = st.now.file(path).ok_or_else(|| not_found(path))?;
        buf.clear();
        buf.extend_from_slice(&data[..data.len().min(max)]);
        Ok(())
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn VFile>> {
        let mut st = self.lock();
        st.check(Kind::Open)?;
        if !path.parent().is_some_and(|p| st.now.dirs.contains(p)) {
            return Err(not_found(path));
        }
        st.now.next_ino += 1;
        let ino = st.now.next_ino;
        st.ns(NsOp::Create {
            path: path.to_owned(),
            ino,
        });
        Ok(Box::new(SimFile {
            st: Arc::clone(&self.st),
            ino,
        }))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn VFile>> {
        let mut st = self.lock();
        st.check(Kind::Open)?;
        let ino = *st.now.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(Box::new(SimFile {
            st: Arc::clone(&self.st),
            ino,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.check(Kind::Rename)?;
        if !st.now.names.contains_key(from) {
            return Err(not_found(from));
        }
        st.ns(NsOp::Rename {
            from: from.to_owned(),
            to: to.to_owned(),
        });
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.check(Kind::Remove)?;
        if !st.now.names.contains_key(path) {
            return Err(not_found(path));
        }
        st.ns(NsOp::Remove {
            path: path.to_owned(),
        });
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.check(Kind::SyncDir)?;
        st.ops.push(Op::SyncDir {
            dir: dir.to_owned(),
        });
        Ok(())
    }
}
