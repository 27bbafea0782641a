//! Failed-sync markers (`FAILED-<segment>-<offset>`): reading their names, telling a stale
//! one (already honoured by an earlier start) from a live one, checking that a live one is
//! consistent with the log, and removing them once honoured.
//!
//! Invariants: a live marker names a batch boundary the log reached, followed by at most the
//! failed batch (the log thread stops at its first failure); any other is refused, never
//! honoured. A marker is removed only after the start honouring it is durable.

use std::path::{Path, PathBuf};

use super::super::vfs::Vfs;
use super::super::{FAILED, OpenError, batch, io_err, segment_name};
use super::{Step, step};
use crate::codec;

/// A failed-sync marker's name: the segment and offset from which the log was never
/// acknowledged.
pub(super) fn parse_marker(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix(FAILED)?.strip_prefix('-')?;
    let (index, offset) = rest.split_once('-')?;
    Some((index.parse().ok()?, offset.parse().ok()?))
}

/// Whether a marker naming offset `x` of segment `s` was already honoured: the segment is
/// gone (a snapshot removed it since), or the first batch at or after that place is an open
/// batch (a start's: the log thread never writes one).
pub(super) fn honoured(fs: &dyn Vfs, dir: &Path, s: u64, x: u64) -> bool {
    let first_is_open = |index: u64, at: usize| {
        // Only the batch's start: an open batch is small (and the file may be anything).
        let mut buf = Vec::new();
        let max = at.saturating_add(batch::HEADER + 64);
        if fs
            .read_prefix(&dir.join(segment_name(index)), max, &mut buf)
            .is_err()
        {
            return false;
        }
        batch::header(&buf, at, index)
            .and_then(|h| batch::body(&buf, at, &h))
            .and_then(|body| body.get(codec::HEADER))
            == Some(&codec::OPEN)
    };
    // A segment a snapshot removed since: a start honoured the marker long ago.
    if fs.mode(&dir.join(segment_name(s))).ok().flatten().is_none() {
        return true;
    }
    match usize::try_from(x) {
        Ok(at) => first_is_open(s, at) || first_is_open(s + 1, 0),
        Err(_) => false,
    }
}

/// Checks a live failed-sync marker at byte `at` of segment `index` (a batch boundary; the
/// log's chain there is `chain`): the log thread stops at its first failure, so at most the
/// failed batch can follow the place a marker names. More intact batches continuing the log
/// from there (in this segment or the next ones, `later`) were written after it: the marker
/// does not belong to this log and is refused rather than honoured.
pub(super) fn check_marker(
    fs: &dyn Vfs,
    marker: &Path,
    data: &[u8],
    at: usize,
    index: u64,
    chain: Option<u32>,
    later: &[(u64, PathBuf)],
) -> Result<(), OpenError> {
    let mut chain = chain;
    let mut found = 0usize;
    // Counts the intact batches continuing the chain from `at` (up to two in all); whether
    // it found any.
    let walk = |data: &[u8], mut at: usize, index: u64, found: &mut usize, chain: &mut _| {
        let start = *found;
        while let Step::Batch { hcrc, next, .. } = step(data, at, index, *chain) {
            *found += 1;
            *chain = Some(hcrc);
            at = next;
            if *found > 1 {
                break;
            }
        }
        *found > start
    };
    let mut more = walk(data, at, index, &mut found, &mut chain);
    let mut later: Vec<_> = later.iter().filter(|(i, _)| *i > index).collect();
    later.sort();
    let mut buf = Vec::new();
    for (i, (n, path)) in later.into_iter().enumerate() {
        if !more || found > 1 || *n != index + 1 + i as u64 {
            break;
        }
        fs.read(path, &mut buf).map_err(io_err(path))?;
        more = walk(&buf, 0, *n, &mut found, &mut chain);
    }
    if found > 1 {
        return Err(OpenError::Corrupt {
            path: marker.to_owned(),
            offset: at as u64,
            message: format!(
                "the failed-sync marker names byte {at} of segment {index}, but intact batches \
                 continue the log from there (written after it: a failed write stops the \
                 store): the marker is inconsistent with the log, refusing to drop them"
            ),
        });
    }
    Ok(())
}

/// Removes the failed-sync markers once what they name is dropped and the start is durable.
pub(super) fn remove_markers(
    fs: &dyn Vfs,
    markers: &[((u64, u64), PathBuf)],
) -> Result<(), OpenError> {
    if markers.is_empty() {
        return Ok(());
    }
    // No directory sync: a marker whose removal a crash loses is recognised as honoured
    // (see `honoured`) and removed again.
    for (_, m) in markers {
        fs.remove(m).map_err(io_err(m))?;
    }
    Ok(())
}
