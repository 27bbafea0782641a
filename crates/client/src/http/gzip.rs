//! Gzip `Content-Encoding` undone as the bytes arrive, for list and watch bodies, and whole
//! for small bodies.
//!
//! A gzip body is a *series of members* (RFC 1952 §2.2): every member is decoded, one after
//! another, as Go's `gzip.Reader` does for client-go. kube-apiserver 1.37 sends a watch-list
//! (`sendInitialEvents=true`) gzipped with one member per flush (`WatchListCompression`,
//! beta), so a decoder that stops after the first member loses every event after the first
//! flush, and one that refuses bytes after it fails the watch (the failure a Rust client met
//! against 1.37). Each member's CRC-32 and length are checked before the next begins; bytes
//! after a member that are not another member are an error.
//!
//! Bounds: [`Inflater::step`] inflates at most one internal buffer of flate2 (32 KiB) per
//! call, plus what its decoder still held for the input already taken, before its output is
//! handed on (and hands all of it on: nothing inflated waits for more input), so a small input that inflates hugely (a gzip bomb)
//! is never expanded in one allocation: the caller decides between steps whether to take
//! more (list bodies count the inflated bytes against their limit; watch bodies take the
//! next step only when no complete frame is left, so they hold one partial frame at most).
//! [`gunzip`] inflates a whole body within a limit.

use std::io::{Read as _, Write as _};

use bytes::Bytes;

use crate::{Error, Result};

/// Undoes a gzip `Content-Encoding` chunk by chunk, across members (see the module docs).
pub(crate) struct Inflater {
    /// Decodes member after member; its output vector is drained after every step, so it
    /// holds at most one step's output.
    decoder: flate2::write::MultiGzDecoder<Vec<u8>>,
    /// What the body is, for error messages (`list body`, `watch body`).
    what: &'static str,
}

impl Inflater {
    /// An inflater of a body named `what` in its errors.
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            decoder: flate2::write::MultiGzDecoder::new(Vec::new()),
            what,
        }
    }

    fn bad(&self, e: &std::io::Error) -> Error {
        Error::Decode(format!("{}: bad gzip: {e}", self.what))
    }

    /// One step: inflates a prefix of `input` (which must not be empty), hands what it
    /// produced to `out`, and returns how many bytes of `input` it consumed (at least one).
    pub(crate) fn step(
        &mut self,
        input: &[u8],
        out: &mut impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<usize> {
        let n = self.decoder.write(input).map_err(|e| self.bad(&e))?;
        // flate2's writer keeps what one write inflated in its own buffer until the next
        // write or a flush: without this, the last event of every burst of a gzipped watch
        // stayed there until more bytes came (a watch-list's initial-events-end bookmark
        // until the 30 s streaming-list idle deadline). A flush hands out only what the
        // input taken so far inflates to, so the step stays bounded.
        self.decoder.flush().map_err(|e| self.bad(&e))?;
        self.drain(out)?;
        if n == 0 && !input.is_empty() {
            return Err(Error::Decode(format!(
                "{}: the gzip decoder took no input",
                self.what
            )));
        }
        Ok(n)
    }

    /// Inflates all of `chunk`, handing the output to `out` one step at a time.
    pub(crate) fn push(
        &mut self,
        mut chunk: &[u8],
        out: &mut impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        while !chunk.is_empty() {
            let n = self.step(chunk, out)?;
            chunk = chunk.get(n..).unwrap_or_default();
        }
        Ok(())
    }

    /// The compressed stream ended: the rest of the output, and the last member's trailer
    /// checked (a stream cut inside a member is an error, never a shorter body).
    pub(crate) fn finish(&mut self, out: &mut impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        loop {
            // `flush` writes out what is buffered, one buffer at a time.
            let before = self.decoder.get_ref().len();
            self.decoder.flush().map_err(|e| self.bad(&e))?;
            let wrote = self.decoder.get_ref().len() > before;
            self.drain(out)?;
            if !wrote {
                break;
            }
        }
        self.decoder.try_finish().map_err(|e| self.bad(&e))?;
        self.drain(out)
    }

    fn drain(&mut self, out: &mut impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let buf = self.decoder.get_mut();
        // In pieces of at most one flate2 buffer, whatever a flush wrote out at once.
        for piece in buf.chunks(32 << 10) {
            out(piece)?;
        }
        buf.clear();
        Ok(())
    }
}

/// Inflates a whole gzip body (every member) to at most `limit` bytes.
pub(crate) fn gunzip(body: &[u8], limit: usize) -> std::result::Result<Bytes, String> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(body)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("bad gzip: {e}"))?;
    if out.len() > limit {
        return Err(format!("larger than {limit} bytes once decompressed"));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;

    fn member(data: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn inflate_all(wire: &[u8], split: usize) -> Result<Vec<u8>> {
        let mut inf = Inflater::new("test body");
        let mut got = Vec::new();
        let mut out = |b: &[u8]| {
            got.extend_from_slice(b);
            Ok(())
        };
        for chunk in wire.chunks(split.max(1)) {
            inf.push(chunk, &mut out)?;
        }
        inf.finish(&mut out)?;
        Ok(got)
    }

    /// A watch's gzip stream sync-flushed after an event, and nothing after it (an idle
    /// watch): the event comes out of the step that took its bytes.
    #[test]
    fn a_sync_flushed_event_is_handed_out_at_once() {
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"{\"type\":\"BOOKMARK\"}\n").unwrap();
        enc.flush().unwrap();
        let wire = enc.get_ref().clone();
        let mut inf = Inflater::new("test body");
        let mut got = Vec::new();
        inf.push(&wire, &mut |b: &[u8]| {
            got.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(got, b"{\"type\":\"BOOKMARK\"}\n");
    }

    #[test]
    fn concatenated_members_decode_to_their_concatenation_at_any_split() {
        let mut wire = member(b"{\"type\":\"ADDED\"}\n");
        wire.extend(member(b"{\"type\":\"MODIFIED\"}\n"));
        wire.extend(member(b""));
        wire.extend(member(b"{\"type\":\"DELETED\"}\n"));
        let want = b"{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n{\"type\":\"DELETED\"}\n";
        for split in [1, 2, 7, 10, 18, 19, wire.len()] {
            assert_eq!(inflate_all(&wire, split).unwrap(), want, "split {split}");
        }
        assert_eq!(&gunzip(&wire, 1 << 20).unwrap()[..], &want[..]);
    }

    #[test]
    fn a_corrupt_second_member_or_trailing_garbage_is_an_error() {
        let first = member(b"one\n");
        let mut bad_crc = first.clone();
        let mut second = member(b"two\n");
        let at = second.len() - 8;
        second[at] ^= 0xff;
        bad_crc.extend(&second);
        assert!(inflate_all(&bad_crc, 3).is_err());
        assert!(gunzip(&bad_crc, 1 << 20).is_err());
        let mut garbage = first.clone();
        garbage.extend_from_slice(b"not gzip");
        assert!(inflate_all(&garbage, 5).is_err());
        // Cut inside the second member: never a shorter body.
        let mut cut = first;
        cut.extend_from_slice(&member(b"two\n")[..12]);
        assert!(inflate_all(&cut, 4).is_err());
    }

    #[test]
    fn a_step_hands_out_a_bounded_piece_of_a_bomb() {
        let bomb = member(&vec![b' '; 8 << 20]);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        let mut inf = Inflater::new("test body");
        let mut largest = 0;
        let mut total = 0;
        let mut rest = &bomb[..];
        while !rest.is_empty() {
            let n = inf
                .step(rest, &mut |b| {
                    largest = largest.max(b.len());
                    total += b.len();
                    Ok(())
                })
                .unwrap();
            rest = &rest[n..];
        }
        assert!(largest <= 64 << 10, "one step handed out {largest} bytes");
        assert!(
            gunzip(&bomb, 1 << 20)
                .unwrap_err()
                .contains("once decompressed")
        );
    }
}
