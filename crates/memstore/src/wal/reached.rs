//! `REACHED`: where the log reached at the last start, so that a later start can tell a
//! lost log tail from a clean end.
//!
//! Every start, once its open batch is synced, records the segment and offset just past
//! that batch, and the revision, in `REACHED` (written to a temporary name, synced,
//! renamed, directory synced); so does every segment roll, once the new segment's name is
//! durable (that segment, offset 0). Everything before that place was durable when it was
//! recorded, so a log that ends before it lost its tail (truncated, zeroed, its newest
//! segment removed) and the start is refused. Only batches written since the last start can
//! be dropped as a torn write.
//!
//! Invariants: the file only ever moves forward (each start's place is after the previous
//! start's); a crash loses at most its latest rename, leaving an earlier (smaller) place,
//! which is still true. A file that does not hold together is refused, never ignored.

use std::io;
use std::path::Path;

use super::vfs::Vfs;
use super::{OpenError, io_err, tmp_name};

/// The file's name in the data directory.
pub(super) const NAME: &str = "REACHED";

const MAGIC: &[u8; 8] = b"LWREACH1";
const LEN: usize = 8 + 8 * 3 + 4;

/// A place of the log: segment, offset just past a start's open batch, revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reached {
    pub(super) segment: u64,
    pub(super) offset: u64,
    pub(super) rev: u64,
}

fn encode(r: Reached) -> Vec<u8> {
    let mut out = Vec::with_capacity(LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&r.segment.to_le_bytes());
    out.extend_from_slice(&r.offset.to_le_bytes());
    out.extend_from_slice(&r.rev.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn decode(data: &[u8]) -> Option<Reached> {
    if data.len() != LEN || data.get(..8)? != MAGIC {
        return None;
    }
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
    };
    let crc = u32::from_le_bytes(data.get(LEN - 4..)?.try_into().ok()?);
    (crc32fast::hash(data.get(..LEN - 4)?) == crc).then_some(Reached {
        segment: u64_at(8)?,
        offset: u64_at(16)?,
        rev: u64_at(24)?,
    })
}

/// The place recorded in `dir`, if any; refuses a file that does not hold together.
pub(super) fn read(fs: &dyn Vfs, dir: &Path) -> Result<Option<Reached>, OpenError> {
    let path = dir.join(NAME);
    if fs.mode(&path).map_err(io_err(&path))?.is_none() {
        return Ok(None);
    }
    let mut buf = Vec::new();
    fs.read_prefix(&path, LEN + 1, &mut buf)
        .map_err(io_err(&path))?;
    decode(&buf).map(Some).ok_or_else(|| OpenError::Corrupt {
        path,
        offset: 0,
        message: "the record of where the log reached does not hold together".into(),
    })
}

/// Records `r` durably (temporary name, synced, renamed, directory synced).
pub(super) fn write(fs: &dyn Vfs, dir: &Path, r: Reached) -> io::Result<()> {
    let tmp = dir.join(tmp_name(NAME));
    let f = fs.create(&tmp)?;
    f.write_at(&encode(r), 0)?;
    f.sync_data()?;
    fs.rename(&tmp, &dir.join(NAME))?;
    fs.sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_round_trips_and_damage_is_seen() {
        let r = Reached {
            segment: 3,
            offset: 4096,
            rev: 77,
        };
        let mut d = encode(r);
        assert_eq!(decode(&d), Some(r));
        d[12] ^= 1;
        assert_eq!(decode(&d), None);
        assert_eq!(decode(&d[..10]), None);
    }
}
