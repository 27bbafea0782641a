//! Batches: what the log thread writes with one `write` and makes durable with one
//! `fdatasync`, and how recovery reads them back.
//!
//! A segment holds batches back to back, each starting at a multiple of 8 bytes, then zeros
//! (segments are preallocated with zeros). A batch is a 40-byte header, a body of
//! [`crate::codec`] frames, and zero padding to the next multiple of 8:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `LWB2` |
//! | 4..8 | `hcrc`: CRC-32 of bytes 8..40 |
//! | 8..16 | body length (u64 LE) |
//! | 16..24 | the segment's index |
//! | 24..32 | the batch's offset in the segment |
//! | 32..36 | `prev`: the `hcrc` of the batch before it in the log (across segments) |
//! | 36..40 | CRC-32 of the body |
//!
//! Invariants: `prev` chains every batch to the one before it, and every start of the store
//! appends an `OPEN` record carrying a random epoch, so the chain after a restart can never
//! match bytes left behind by an earlier run (a stale batch never validates). A header names
//! its own segment and offset, so a header is recognisable anywhere in a segment without
//! reading what precedes it (recovery uses that to tell a torn last batch from damage with
//! acknowledged data after it). The body's end is given by the header, never guessed from
//! payload bytes.

/// The first four bytes of a batch.
pub(crate) const MAGIC: [u8; 4] = *b"LWB2";
/// Header bytes.
pub(crate) const HEADER: usize = 40;
/// Batches start at multiples of this.
pub(crate) const ALIGN: usize = 8;

/// `n` rounded up to [`ALIGN`].
pub(crate) fn padded(n: usize) -> usize {
    n.div_ceil(ALIGN).saturating_mul(ALIGN)
}

fn crc(data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(data);
    h.finalize()
}

/// Writes the batch of `body` at `offset` of segment `index`, after the batch whose `hcrc`
/// is `prev`, into `out` (cleared first); returns its `hcrc` (the next batch's `prev`).
pub(crate) fn encode(out: &mut Vec<u8>, body: &[u8], index: u64, offset: u64, prev: u32) -> u32 {
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&prev.to_le_bytes());
    out.extend_from_slice(&crc(body).to_le_bytes());
    let hcrc = crc(&out[8..HEADER]);
    out[4..8].copy_from_slice(&hcrc.to_le_bytes());
    out.extend_from_slice(body);
    out.resize(padded(out.len()), 0);
    hcrc
}

/// A header that holds together: right magic and checksum, naming this segment and offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub(crate) hcrc: u32,
    pub(crate) body_len: u64,
    pub(crate) prev: u32,
    pub(crate) body_crc: u32,
}

fn u64_at(h: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    if let Some(s) = h.get(at..at + 8) {
        b.copy_from_slice(s);
    }
    u64::from_le_bytes(b)
}

fn u32_at(h: &[u8], at: usize) -> u32 {
    let mut b = [0; 4];
    if let Some(s) = h.get(at..at + 4) {
        b.copy_from_slice(s);
    }
    u32::from_le_bytes(b)
}

/// The header at `at` of segment `index`, if it holds together.
pub(crate) fn header(data: &[u8], at: usize, index: u64) -> Option<Header> {
    let h = data.get(at..at.checked_add(HEADER)?)?;
    if h[..4] != MAGIC || u32_at(h, 4) != crc(&h[8..HEADER]) {
        return None;
    }
    if u64_at(h, 16) != index || u64_at(h, 24) != at as u64 {
        return None;
    }
    Some(Header {
        hcrc: u32_at(h, 4),
        body_len: u64_at(h, 8),
        prev: u32_at(h, 32),
        body_crc: u32_at(h, 36),
    })
}

/// The body of the batch at `at` with header `h`, if all of it is there and its checksum
/// holds.
pub(crate) fn body<'a>(data: &'a [u8], at: usize, h: &Header) -> Option<&'a [u8]> {
    let start = at.checked_add(HEADER)?;
    let end = start.checked_add(usize::try_from(h.body_len).ok()?)?;
    let body = data.get(start..end)?;
    (crc(body) == h.body_crc).then_some(body)
}

/// Where the batch at `at` with header `h` ends (padded), if representable.
pub(crate) fn end(at: usize, h: &Header) -> Option<usize> {
    let n = at
        .checked_add(HEADER)?
        .checked_add(usize::try_from(h.body_len).ok()?)?;
    n.checked_add(ALIGN - 1).map(|n| n / ALIGN * ALIGN)
}

/// The first offset after `from` (aligned) where a header of segment `index` holds together:
/// proof that a batch was written there.
pub(crate) fn next_header(data: &[u8], from: usize, index: u64) -> Option<usize> {
    let mut at = padded(from);
    while at.checked_add(HEADER)? <= data.len() {
        if data.get(at..at + 4) == Some(&MAGIC[..]) && header(data, at, index).is_some() {
            return Some(at);
        }
        at += ALIGN;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_round_trips_and_names_its_place() {
        let mut out = Vec::new();
        let hcrc = encode(&mut out, b"hello", 3, 64, 7);
        assert_eq!(out.len(), 48);
        let mut seg = vec![0u8; 64];
        seg.extend_from_slice(&out);
        let h = header(&seg, 64, 3).unwrap_or_else(|| panic!("header"));
        assert_eq!((h.hcrc, h.prev, h.body_len), (hcrc, 7, 5));
        assert_eq!(body(&seg, 64, &h), Some(&b"hello"[..]));
        assert_eq!(end(64, &h), Some(112));
        // Another segment, or another offset: not this batch.
        assert!(header(&seg, 64, 4).is_none());
        assert_eq!(next_header(&seg, 0, 3), Some(64));
        assert_eq!(next_header(&seg, 65, 3), None);
        seg[64 + HEADER] ^= 1;
        assert!(body(&seg, 64, &h).is_none());
    }
}
