//! Redis's RDB serialisation, as a `DUMP` payload carries a value: lengths, strings (plain,
//! integer-encoded or LZF-compressed), the listpacks and intsets of small collections
//! (`listpack`), a stream's listpacks and consumer groups (`stream`), and the trailer (RDB
//! version, CRC-64). `value` writes and reads whole values for `DUMP` and `RESTORE` on the
//! SQL backends; `FUNCTION DUMP` writes its libraries with the string pieces here.

mod listpack;
mod lzf;
mod stream;
mod value;

pub use stream::{DumpGroup, DumpStream, StreamId};
pub use value::{dump, restore, BadPayload, DumpValue};

/// The RDB version Redis 7.0 writes.
pub const VERSION: u16 = 10;

const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

/// Appends a length in RDB's encoding.
pub fn put_len(out: &mut Vec<u8>, len: usize) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if let Ok(len) = u32::try_from(len) {
        out.push(0x80);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

/// Appends a string as Redis's `rdbSaveRawString` does: a canonical integer of at most 11
/// characters that fits 32 bits as an integer, more than 20 bytes LZF-compressed when that
/// saves 4 bytes, anything else plain.
pub fn put_raw_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(v) = listpack::as_int(s) {
            if let Ok(v) = i8::try_from(v) {
                out.push(0xC0);
                out.push(v as u8);
                return;
            }
            if let Ok(v) = i16::try_from(v) {
                out.push(0xC1);
                out.extend_from_slice(&v.to_le_bytes());
                return;
            }
            if let Ok(v) = i32::try_from(v) {
                out.push(0xC2);
                out.extend_from_slice(&v.to_le_bytes());
                return;
            }
        }
    }
    if s.len() > 20 {
        if let Some(compressed) = lzf::compress(s, s.len() - 4) {
            out.push(0xC3);
            put_len(out, compressed.len());
            put_len(out, s.len());
            out.extend_from_slice(&compressed);
            return;
        }
    }
    put_len(out, s.len());
    out.extend_from_slice(s);
}

/// Appends a string, plain.
pub fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_len(out, s.len());
    out.extend_from_slice(s);
}

/// Appends the trailer: the RDB version and the CRC-64 of everything before it.
pub fn seal(out: &mut Vec<u8>) {
    out.extend_from_slice(&VERSION.to_le_bytes());
    let crc = CRC64.checksum(out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// The body of a payload whose trailer checks (version at most [`VERSION`], CRC-64 right,
/// or zero, which Redis writes when checksums are off); None otherwise.
pub fn unseal(payload: &[u8]) -> Option<&[u8]> {
    let at = payload.len().checked_sub(10)?;
    let version = u16::from_le_bytes([payload[at], payload[at + 1]]);
    let crc = u64::from_le_bytes(payload[at + 2..].try_into().ok()?);
    if version > VERSION || (crc != 0 && crc != CRC64.checksum(&payload[..at + 2])) {
        return None;
    }
    Some(&payload[..at])
}

/// A reader over a payload's body.
pub struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

/// A length, or a special encoding's code.
enum Len {
    Plain(usize),
    Encoded(u8),
}

impl<'a> Reader<'a> {
    /// A reader at the start of `data`.
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, at: 0 }
    }

    /// Whether everything was read.
    pub fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    /// One byte (a type).
    pub fn byte(&mut self) -> Option<u8> {
        let b = *self.data.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// The next `n` bytes as they are.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.data.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn len(&mut self) -> Option<Len> {
        let first = self.byte()?;
        Some(match first >> 6 {
            0 => Len::Plain(usize::from(first & 0x3f)),
            1 => Len::Plain(usize::from(first & 0x3f) << 8 | usize::from(self.byte()?)),
            3 => Len::Encoded(first & 0x3f),
            _ if first == 0x80 => {
                Len::Plain(u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize)
            }
            _ if first == 0x81 => Len::Plain(
                usize::try_from(u64::from_be_bytes(self.take(8)?.try_into().ok()?)).ok()?,
            ),
            _ => return None,
        })
    }

    /// A length.
    pub fn length(&mut self) -> Option<usize> {
        match self.len()? {
            Len::Plain(n) => Some(n),
            Len::Encoded(_) => None,
        }
    }

    /// A string, in any of the forms Redis writes.
    pub fn string(&mut self) -> Option<Vec<u8>> {
        match self.len()? {
            Len::Plain(n) => Some(self.take(n)?.to_vec()),
            Len::Encoded(0) => Some((self.byte()? as i8).to_string().into_bytes()),
            Len::Encoded(1) => Some(
                i16::from_le_bytes(self.take(2)?.try_into().ok()?)
                    .to_string()
                    .into_bytes(),
            ),
            Len::Encoded(2) => Some(
                i32::from_le_bytes(self.take(4)?.try_into().ok()?)
                    .to_string()
                    .into_bytes(),
            ),
            Len::Encoded(3) => {
                let compressed = self.length()?;
                let plain = self.length()?;
                let input = self.take(compressed)?;
                let out = lzf_decompress(input, plain)?;
                (out.len() == plain).then_some(out)
            }
            Len::Encoded(_) => None,
        }
    }
}

/// LZF decompression, as Redis compresses long strings: literal runs and back references.
/// None for input that does not decode to at most `limit` bytes.
pub fn lzf_decompress(input: &[u8], limit: usize) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(limit);
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let literal = input.get(i..i + run)?;
            if out.len() + run > limit {
                return None;
            }
            out.extend_from_slice(literal);
            i += run;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(i)?);
                i += 1;
            }
            len += 2;
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(i)?) + 1;
            i += 1;
            let from = out.len().checked_sub(back)?;
            if out.len() + len > limit {
                return None;
            }
            // Byte by byte: a reference may overlap what it copies.
            for k in 0..len {
                let b = out[from + k];
                out.push(b);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_strings_read_back() {
        for len in [0usize, 1, 63, 64, 16383, 16384, 70000] {
            let s = vec![b'x'; len];
            let mut out = Vec::new();
            put_string(&mut out, &s);
            let mut r = Reader::new(&out);
            assert_eq!(r.string(), Some(s), "{len}");
            assert!(r.done());
        }
        // Integer encodings, as Redis writes short numeric strings.
        let mut r = Reader::new(&[0xc0, 0xfb, 0xc1, 0x39, 0x30, 0xc2, 0x15, 0xcd, 0x5b, 0x07]);
        assert_eq!(r.string(), Some(b"-5".to_vec()));
        assert_eq!(r.string(), Some(b"12345".to_vec()));
        assert_eq!(r.string(), Some(b"123456789".to_vec()));
    }

    #[test]
    fn lzf_runs_and_back_references_decode() {
        // "abcabcabc": literal "abc", then a reference 3 back copying 6.
        let input = [2, b'a', b'b', b'c', (4 << 5), 2];
        assert_eq!(lzf_decompress(&input, 9), Some(b"abcabcabc".to_vec()));
        assert_eq!(lzf_decompress(&input, 5), None);
        assert_eq!(lzf_decompress(&[5, b'a'], 9), None);
    }

    #[test]
    fn a_sealed_payload_unseals_and_a_changed_one_does_not() {
        let mut out = vec![245];
        put_string(&mut out, b"#!lua name=x\n");
        seal(&mut out);
        assert_eq!(unseal(&out).map(<[u8]>::len), Some(out.len() - 10));
        let mut changed = out.clone();
        changed[3] ^= 1;
        assert_eq!(unseal(&changed), None);
        assert_eq!(unseal(b"short"), None);
    }
}
