//! The bytes of a snapshot pickle, read as a stream: the reader never holds the file, only
//! the opcode it is at (a string is checked in 8 KiB pieces and kept only when it is short
//! enough to be a name the replay reads).

use super::values::Name;
use std::io::BufRead;

/// Strings longer than this are checked and passed over: no name a replay reads is longer.
const LONGEST_NAME: usize = 32;

/// A pickle's bytes, with the offset of the next one.
pub(super) struct Source<R> {
    inner: R,
    at: u64,
    /// The most bytes read; one more is an error.
    limit: u64,
}

fn cannot_read(e: &std::io::Error) -> String {
    format!("the file cannot be read: {e}")
}

impl<R: BufRead> Source<R> {
    pub(super) fn new(inner: R, limit: u64) -> Self {
        Source {
            inner,
            at: 0,
            limit,
        }
    }

    /// The offset of the next byte.
    pub(super) fn at(&self) -> u64 {
        self.at
    }

    /// The bytes available now, at least one unless the file has ended.
    fn fill(&mut self) -> Result<&[u8], String> {
        loop {
            match self.inner.fill_buf() {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(cannot_read(&e)),
            }
        }
        // Filled: this call hands out the buffer without reading.
        self.inner.fill_buf().map_err(|e| cannot_read(&e))
    }

    fn consume(&mut self, n: usize) -> Result<(), String> {
        self.inner.consume(n);
        self.at += n as u64;
        if self.at > self.limit {
            return Err(format!(
                "more than the {} bytes a snapshot may have",
                self.limit
            ));
        }
        Ok(())
    }

    /// The next byte, or `None` at the end of the file.
    pub(super) fn byte(&mut self) -> Result<Option<u8>, String> {
        // One `fill_buf` per opcode: this is the reader's inner loop.
        let b = match self.inner.fill_buf() {
            Ok(buf) => buf.first().copied(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => self.fill()?.first().copied(),
            Err(e) => return Err(cannot_read(&e)),
        };
        let Some(b) = b else { return Ok(None) };
        self.consume(1)?;
        Ok(Some(b))
    }

    /// Fills `out` from the file; `wanted` is the argument's whole length, for the message.
    fn exact(&mut self, out: &mut [u8], wanted: u64, got_before: u64) -> Result<(), String> {
        let mut done = 0;
        while done < out.len() {
            let buf = self.fill()?;
            if buf.is_empty() {
                return Err(format!(
                    "the file ends inside the opcode's argument ({wanted} bytes wanted, {} \
                     there); is it cut short?",
                    got_before + done as u64
                ));
            }
            let n = buf.len().min(out.len() - done);
            out[done..done + n].copy_from_slice(&buf[..n]);
            self.consume(n)?;
            done += n;
        }
        Ok(())
    }

    /// The next `N` bytes.
    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut b = [0u8; N];
        self.exact(&mut b, N as u64, 0)?;
        Ok(b)
    }

    /// The next `n` bytes (at most 8) as a little-endian unsigned number.
    pub(super) fn le(&mut self, n: usize) -> Result<u64, String> {
        let mut b = [0u8; 8];
        self.exact(&mut b[..n], n as u64, 0)?;
        Ok(u64::from_le_bytes(b))
    }

    /// The next `n` bytes (at most 8) as a little-endian two's-complement integer.
    pub(super) fn signed(&mut self, n: usize) -> Result<i64, String> {
        let v = self.le(n)?;
        Ok(match n {
            0 => 0,
            8 => v as i64,
            // Sign-extends the top bit of the n-byte value.
            _ => ((v << (64 - 8 * n)) as i64) >> (64 - 8 * n),
        })
    }

    /// A UTF-8 string of `n` bytes: the name it is, if it is one a replay reads.
    pub(super) fn string(&mut self, n: u64) -> Result<Name, String> {
        const NOT_UTF8: &str = "a string that is not UTF-8";
        if n <= LONGEST_NAME as u64 {
            let mut b = [0u8; LONGEST_NAME];
            let b = &mut b[..n as usize];
            self.exact(b, n, 0)?;
            let s = std::str::from_utf8(b).map_err(|_| NOT_UTF8.to_string())?;
            return Ok(Name::of(s));
        }
        // Checked piece by piece; a character cut by a piece's end is carried to the next.
        const PIECE: usize = 8192;
        let mut buf = [0u8; PIECE + 3];
        let (mut left, mut carried) = (n, 0usize);
        while left > 0 {
            let m = left.min(PIECE as u64) as usize;
            self.exact(&mut buf[carried..carried + m], n, n - left)?;
            left -= m as u64;
            let data = &buf[..carried + m];
            carried = match std::str::from_utf8(data) {
                Ok(_) => 0,
                Err(e) if e.error_len().is_none() && left > 0 => {
                    let valid = e.valid_up_to();
                    let c = data.len() - valid;
                    buf.copy_within(valid..valid + c, 0);
                    c
                }
                Err(_) => return Err(NOT_UTF8.into()),
            };
        }
        Ok(Name::Other)
    }

    /// How many bytes are left in the file (read to its end, at most to the limit).
    pub(super) fn rest(&mut self) -> Result<u64, String> {
        let start = self.at;
        loop {
            let n = self.fill()?.len();
            if n == 0 {
                return Ok(self.at - start);
            }
            self.consume(n)?;
        }
    }
}
