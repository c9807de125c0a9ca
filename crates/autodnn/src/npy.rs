//! NumPy's `.npy` array format for float32 arrays: a strict reader whose header parser is a
//! single forward pass, and a writer of the header NumPy itself writes.
//!
//! A file is the magic `\x93NUMPY`, a version (1.0, 2.0 or 3.0), the header's length (2 bytes
//! little-endian in 1.0, 4 in 2.0 and 3.0), the header, and the data. The header is a Python
//! dict literal padded with spaces and a `\n`, e.g.
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
//!
//! # What is accepted
//! - A header of at most [`MAX_HEADER_LEN`] bytes (NumPy's own default limit).
//! - Exactly the keys `descr`, `fortran_order` and `shape`, each once, in any order, quoted
//!   with `'` or `"` (no escapes, no string prefixes); whitespace between tokens; a trailing
//!   comma after the last entry and after the last dimension.
//! - `descr` `'<f4'` only: little-endian float32. `'>f4'` (big-endian) is refused, and so are
//!   `'|f4'`, `'=f4'` and `'f4'`, whose byte order is that of whichever machine wrote them.
//! - `fortran_order` `True` or `False`; `True` only when at most one dimension exceeds 1 (then
//!   both orders lay the data out alike).
//! - `shape` a tuple of non-negative decimal integers: `()`, `(5,)`, `(2, 3)`. `(5)` is the
//!   number 5 in Python, not a tuple, and is refused as NumPy refuses it.
//! - Data of exactly the shape's size: `elements × 4` bytes, computed with overflow checks,
//!   compared with the bytes present before anything is allocated for them.
//!
//! Anything else is an [`Error::BadParam`] naming the part of the file (`npy.magic`,
//! `npy.version`, `npy.header_len`, `npy.header`, `npy.descr`, `npy.fortran_order`,
//! `npy.shape`, `npy.data`); no input panics.
//!
//! # Why a parser of its own
//! The `npyz` crate parses the header with `py_literal`'s pest (PEG) grammar, whose ordered
//! choices re-parse the rest of the input after every failed alternative, without
//! memoisation: `{` opens either a dict or a set, and the value after it is tried by the
//! dict's repeated entry, its optional last entry and then the set rule, so each unclosed
//! `{` triples the work (4.5 s for 10 of them, 40 s for 12). This parser reads each byte once
//! and stops at the first byte that cannot continue a valid header.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use crate::error::{Error, Result};

/// The first six bytes of every `.npy` file.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// The longest header read, in bytes (the length field's value): NumPy's default
/// `max_header_size`. Longer headers are refused before they are read.
pub const MAX_HEADER_LEN: usize = 10_000;

/// The data's alignment NumPy pads the header to.
const ALIGN: usize = 64;

/// An empty vector with room for `n` elements, or [`Error::OutOfMemory`].
fn try_vec<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| Error::OutOfMemory {
        bytes: n.saturating_mul(std::mem::size_of::<T>()),
        what: format!("{what}: {e}"),
    })?;
    Ok(v)
}

/// A float32 array read from a `.npy` file, in C order.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// The dimensions (empty for a 0-d array, which holds one element).
    pub shape: Vec<usize>,
    /// The elements, in C (row-major) order.
    pub data: Vec<f32>,
}

/// What the header says about the data.
#[derive(Debug)]
struct Header {
    shape: Vec<usize>,
    /// Where the data starts.
    data_offset: usize,
    elements: usize,
    data_bytes: usize,
}

/// Decodes a float32 `.npy` file held in memory.
///
/// # Errors
/// [`Error::BadParam`] naming the part of the file at fault (see the [module](self) docs),
/// [`Error::Overflow`] for a shape whose size does not fit in `usize`,
/// [`Error::OutOfMemory`] when the elements cannot be allocated.
pub fn decode_f32(bytes: &[u8]) -> Result<NpyArray> {
    let h = decode_header(bytes)?;
    let data = bytes.get(h.data_offset..).unwrap_or_default();
    check_data_len(&h, data.len() as u64)?;
    let mut v = try_vec::<f32>(h.elements, "npy data")?;
    v.extend(
        data.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    Ok(NpyArray {
        shape: h.shape,
        data: v,
    })
}

/// Reads a float32 `.npy` file. The header is read first (at most [`MAX_HEADER_LEN`] bytes of
/// it), and the data only when the file's length matches the shape.
///
/// # Errors
/// [`Error::Io`] naming the file when it cannot be opened or read; otherwise as
/// [`decode_f32`] (those errors name the part of the file, not the file).
pub fn read_f32(path: &Path) -> Result<NpyArray> {
    let io = |e: std::io::Error| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let mut f = File::open(path).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    let mut head = Vec::new();
    (&mut f)
        .take((12 + MAX_HEADER_LEN) as u64)
        .read_to_end(&mut head)
        .map_err(io)?;
    let h = decode_header(&head)?;
    check_data_len(&h, file_len.saturating_sub(h.data_offset as u64))?;
    let mut v = try_vec::<f32>(h.elements, "npy data")?;
    let mut rest = head.get(h.data_offset..).unwrap_or_default().chain(f);
    let mut buf = vec![0u8; 1 << 16];
    let mut left = h.data_bytes;
    while left > 0 {
        let n = left.min(buf.len());
        rest.read_exact(&mut buf[..n]).map_err(io)?;
        v.extend(
            buf[..n]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        left -= n;
    }
    // The file may have grown since its length was taken.
    if rest.read(&mut buf[..1]).map_err(io)? != 0 {
        return Err(Error::bad(
            "npy.data",
            "more bytes",
            format!("the file grew while read; the shape needs {}", h.data_bytes),
        ));
    }
    Ok(NpyArray {
        shape: h.shape,
        data: v,
    })
}

/// Encodes `data` as a C-order little-endian float32 `.npy` file of `shape` (version 1.0,
/// with the header NumPy writes, padded so that the data starts at a multiple of 64 bytes).
///
/// # Errors
/// [`Error::BadParam`] (`npy.data`) when `data` does not hold the shape's elements;
/// [`Error::Overflow`] for a shape whose size does not fit in `usize`;
/// [`Error::OutOfMemory`] when the file's bytes cannot be allocated.
pub fn encode_f32(shape: &[usize], data: &[f32]) -> Result<Vec<u8>> {
    let header = encode_header(shape, data.len())?;
    let total = data
        .len()
        .checked_mul(4)
        .and_then(|b| b.checked_add(header.len()))
        .ok_or_else(|| Error::overflow("npy.data", "bytes of the file"))?;
    let mut out = try_vec::<u8>(total, "npy file")?;
    out.extend_from_slice(&header);
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    Ok(out)
}

/// Writes `data` as a C-order little-endian float32 `.npy` file of `shape` to `path` (as
/// [`encode_f32`], streamed).
///
/// # Errors
/// As [`encode_f32`], and [`Error::Io`] naming the file when it cannot be written.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> Result<()> {
    let header = encode_header(shape, data.len())?;
    let io = |e: std::io::Error| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let mut w = BufWriter::new(File::create(path).map_err(io)?);
    w.write_all(&header).map_err(io)?;
    for v in data {
        w.write_all(&v.to_le_bytes()).map_err(io)?;
    }
    w.flush().map_err(io)
}

fn fmt_shape(shape: &[usize]) -> String {
    match shape {
        [d] => format!("({d},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

fn elements_of(shape: &[usize]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d).ok_or_else(|| {
            Error::overflow(
                "npy.shape",
                format!("the elements of {} do not fit in usize", fmt_shape(shape)),
            )
        })
    })
}

/// The magic, version, length and padded header of a C-order `<f4` array of `shape`.
fn encode_header(shape: &[usize], len: usize) -> Result<Vec<u8>> {
    let elements = elements_of(shape)?;
    if elements != len {
        return Err(Error::bad(
            "npy.data",
            format!("{len} elements"),
            format!("shape {} holds {elements}", fmt_shape(shape)),
        ));
    }
    let dict = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}",
        fmt_shape(shape)
    );
    // magic (6) + version (2) + length (2) + dict + padding + '\n', a multiple of ALIGN.
    let unpadded = 10 + dict.len() + 1;
    let pad = (ALIGN - unpadded % ALIGN) % ALIGN;
    let hlen = dict.len() + pad + 1;
    if hlen > MAX_HEADER_LEN {
        return Err(Error::bad(
            "npy.shape",
            format!("{} dimensions", shape.len()),
            format!("the header would exceed {MAX_HEADER_LEN} bytes"),
        ));
    }
    let mut out = Vec::with_capacity(10 + hlen);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    // hlen <= MAX_HEADER_LEN < 2^16.
    out.extend_from_slice(&(hlen as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + pad, b' ');
    out.push(b'\n');
    Ok(out)
}

fn check_data_len(h: &Header, got: u64) -> Result<()> {
    if got != h.data_bytes as u64 {
        return Err(Error::bad(
            "npy.data",
            format!("{got} bytes"),
            format!(
                "shape {} of '<f4' needs exactly {} bytes of data",
                fmt_shape(&h.shape),
                h.data_bytes
            ),
        ));
    }
    Ok(())
}

/// Reads the magic, version and header from the start of a file (`bytes` holds at least the
/// whole header, or the whole file).
fn decode_header(bytes: &[u8]) -> Result<Header> {
    if bytes.len() < 8 || &bytes[..6] != MAGIC {
        let start = &bytes[..bytes.len().min(8)];
        return Err(Error::bad(
            "npy.magic",
            format!("'{}'", start.escape_ascii()),
            "not a .npy file (it starts with \\x93NUMPY)",
        ));
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let len_bytes = match (major, minor) {
        (1, 0) => 2,
        (2, 0) | (3, 0) => 4,
        _ => {
            return Err(Error::bad(
                "npy.version",
                format!("{major}.{minor}"),
                "this reader knows versions 1.0, 2.0 and 3.0",
            ))
        }
    };
    let start = 8 + len_bytes;
    let Some(len_field) = bytes.get(8..start) else {
        return Err(Error::bad(
            "npy.header_len",
            format!("{} bytes", bytes.len()),
            "the file ends inside the header length",
        ));
    };
    let hlen = len_field
        .iter()
        .rev()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
    if hlen > MAX_HEADER_LEN as u64 {
        return Err(Error::bad(
            "npy.header_len",
            hlen,
            format!("headers longer than {MAX_HEADER_LEN} bytes are refused"),
        ));
    }
    // hlen <= MAX_HEADER_LEN: no overflow.
    let end = start + hlen as usize;
    let Some(text) = bytes.get(start..end) else {
        return Err(Error::bad(
            "npy.header_len",
            hlen,
            format!(
                "the file ends {} bytes into the header",
                bytes.len() - start
            ),
        ));
    };
    let (shape, fortran) = parse_header(text)?;
    if fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
        return Err(Error::bad(
            "npy.fortran_order",
            "True",
            format!(
                "Fortran-order arrays of shape {} are not supported; save a C-order array \
                 (numpy.ascontiguousarray)",
                fmt_shape(&shape)
            ),
        ));
    }
    let elements = elements_of(&shape)?;
    let data_bytes = elements.checked_mul(4).ok_or_else(|| {
        Error::overflow(
            "npy.shape",
            format!("the bytes of {} do not fit in usize", fmt_shape(&shape)),
        )
    })?;
    Ok(Header {
        shape,
        data_offset: end,
        elements,
        data_bytes,
    })
}

/// A cursor over the header text that only moves forward.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.i += usize::from(hit);
        hit
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r' | 0x0c)) {
            self.i += 1;
        }
    }

    /// An error at the cursor: the value is the text from there.
    fn err(&self, field: &str, reason: &str) -> Error {
        self.err_at(self.i, field, reason)
    }

    fn err_at(&self, at: usize, field: &str, reason: &str) -> Error {
        let rest = self.s.get(at..).unwrap_or_default();
        let value = if rest.is_empty() {
            "end of header".to_string()
        } else {
            let cut = rest.len().min(20);
            let more = if cut < rest.len() { "..." } else { "" };
            format!("'{}'{more}", rest[..cut].escape_ascii())
        };
        Error::bad(field, value, format!("{reason} (header byte {at})"))
    }

    /// A quoted string without escapes; the cursor is on the quote.
    fn string(&mut self, field: &str, what: &str) -> Result<&'a [u8]> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.err(field, &format!("expected {what}"))),
        };
        let open = self.i;
        self.i += 1;
        let body = self.i;
        loop {
            match self.peek() {
                None => return Err(self.err_at(open, field, "unclosed string")),
                Some(c) if c == q => break,
                Some(b'\\') => {
                    return Err(self.err(field, "escape sequences are not supported"));
                }
                Some(c) if !(0x20..0x7f).contains(&c) => {
                    return Err(self.err(field, "control or non-ASCII byte in a string"));
                }
                Some(_) => self.i += 1,
            }
        }
        let s = &self.s[body..self.i];
        self.i += 1;
        Ok(s)
    }

    /// A non-negative decimal integer.
    fn uint(&mut self) -> Result<usize> {
        let start = self.i;
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return Err(self.err("npy.shape", "expected a non-negative integer"));
        }
        let mut v = 0usize;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            if v == 0 && self.i > start {
                return Err(self.err_at(start, "npy.shape", "leading zeros are not Python"));
            }
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(usize::from(c - b'0')))
                .ok_or_else(|| {
                    Error::overflow(
                        "npy.shape",
                        format!("a dimension at header byte {start} does not fit in usize"),
                    )
                })?;
            self.i += 1;
        }
        Ok(v)
    }

    /// `()`, `(d,)` or `(d, d, ...)` with an optional trailing comma.
    fn shape(&mut self) -> Result<Vec<usize>> {
        if !self.eat(b'(') {
            return Err(self.err("npy.shape", "expected a tuple such as (2, 3)"));
        }
        let mut dims = Vec::new();
        self.ws();
        if self.eat(b')') {
            return Ok(dims);
        }
        loop {
            dims.push(self.uint()?);
            self.ws();
            if self.eat(b',') {
                self.ws();
                if self.eat(b')') {
                    return Ok(dims);
                }
            } else if self.eat(b')') {
                if dims.len() == 1 {
                    return Err(self.err_at(
                        self.i - 1,
                        "npy.shape",
                        "(d) is a number in Python, not a tuple: write (d,)",
                    ));
                }
                return Ok(dims);
            } else {
                return Err(self.err("npy.shape", "expected ',' or ')'"));
            }
        }
    }

    fn boolean(&mut self) -> Result<bool> {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        {
            self.i += 1;
        }
        match &self.s[start..self.i] {
            b"True" => Ok(true),
            b"False" => Ok(false),
            _ => Err(self.err_at(start, "npy.fortran_order", "expected True or False")),
        }
    }

    fn descr(&mut self) -> Result<()> {
        let start = self.i;
        let d = self.string(
            "npy.descr",
            "a type string such as '<f4' (structured types are not supported)",
        )?;
        let reason = match d {
            b"<f4" => return Ok(()),
            b">f4" => "big-endian float32 is not supported; save little-endian ('<f4')",
            b"|f4" | b"=f4" | b"f4" => {
                "the byte order is the writing machine's; save little-endian ('<f4')"
            }
            _ => "expected float32 ('<f4'); convert with numpy.asarray(a, '<f4')",
        };
        Err(self.err_at(start, "npy.descr", reason))
    }
}

/// Parses the header dict: the shape and the Fortran-order flag.
fn parse_header(text: &[u8]) -> Result<(Vec<usize>, bool)> {
    let mut p = Parser { s: text, i: 0 };
    let (mut descr, mut fortran, mut shape) = (false, None, None);
    p.ws();
    if !p.eat(b'{') {
        return Err(p.err("npy.header", "expected '{' opening the header dict"));
    }
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key_at = p.i;
        let key = p.string("npy.header", "a quoted key or '}'")?;
        let field = match key {
            b"descr" => "npy.descr",
            b"fortran_order" => "npy.fortran_order",
            b"shape" => "npy.shape",
            _ => {
                return Err(p.err_at(
                    key_at,
                    "npy.header",
                    "unknown key (a header holds 'descr', 'fortran_order' and 'shape')",
                ))
            }
        };
        let seen = match key {
            b"descr" => descr,
            b"fortran_order" => fortran.is_some(),
            _ => shape.is_some(),
        };
        if seen {
            return Err(p.err_at(key_at, field, "key given twice"));
        }
        p.ws();
        if !p.eat(b':') {
            return Err(p.err("npy.header", "expected ':' after a key"));
        }
        p.ws();
        match key {
            b"descr" => {
                p.descr()?;
                descr = true;
            }
            b"fortran_order" => fortran = Some(p.boolean()?),
            _ => shape = Some(p.shape()?),
        }
        p.ws();
        if !p.eat(b',') && p.peek() != Some(b'}') {
            return Err(p.err("npy.header", "expected ',' or '}'"));
        }
    }
    p.ws();
    if p.i < text.len() {
        return Err(p.err("npy.header", "unexpected text after the header dict"));
    }
    let missing = |field: &str, what: &str| {
        Error::bad(field, "missing", format!("the header has no '{what}' key"))
    };
    if !descr {
        return Err(missing("npy.descr", "descr"));
    }
    let fortran = fortran.ok_or_else(|| missing("npy.fortran_order", "fortran_order"))?;
    let shape = shape.ok_or_else(|| missing("npy.shape", "shape"))?;
    Ok((shape, fortran))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file with `header` as NumPy frames it: padded with spaces and `\n` so that the data
    /// starts at a multiple of 64, version `ver`.
    fn framed(ver: u8, dict: &str, data: &[u8]) -> Vec<u8> {
        let len_bytes = if ver == 1 { 2 } else { 4 };
        let unpadded = 8 + len_bytes + dict.len() + 1;
        let pad = (64 - unpadded % 64) % 64;
        let hlen = dict.len() + pad + 1;
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[ver, 0]);
        out.extend_from_slice(&(hlen as u32).to_le_bytes()[..len_bytes]);
        out.extend_from_slice(dict.as_bytes());
        out.resize(out.len() + pad, b' ');
        out.push(b'\n');
        assert_eq!(out.len() % 64, 0);
        out.extend_from_slice(data);
        out
    }

    fn le(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn field_of(e: &Error) -> String {
        match e {
            Error::BadParam { field, .. } | Error::Overflow { field, .. } => field.clone(),
            other => panic!("unexpected error {other:?}"),
        }
    }

    /// The error a header dict gives, with 24 bytes of data (a (2, 3) array).
    fn header_err(dict: &str) -> Error {
        let bytes = framed(1, dict, &[0u8; 24]);
        match decode_f32(&bytes) {
            Err(e) => e,
            Ok(a) => panic!("{dict:?} was accepted as {:?}", a.shape),
        }
    }

    #[test]
    fn round_trip() {
        for shape in [&[][..], &[5], &[2, 3], &[1, 3, 4, 2], &[0, 7], &[3, 0]] {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.25).collect();
            let bytes = encode_f32(shape, &data).unwrap();
            // The data starts at a multiple of 64 and the header ends with '\n'.
            let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + hlen) % 64, 0, "{shape:?}");
            assert_eq!(bytes[10 + hlen - 1], b'\n');
            assert_eq!(bytes.len(), 10 + hlen + 4 * n);
            let a = decode_f32(&bytes).unwrap();
            assert_eq!(a.shape, shape);
            assert_eq!(a.data, data);
        }
        // Special values survive bit for bit.
        let data = [f32::NAN, -0.0, f32::INFINITY, f32::MIN_POSITIVE / 2.0];
        let a = decode_f32(&encode_f32(&[4], &data).unwrap()).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.data), bits(&data));
    }

    #[test]
    fn writes_the_header_numpy_writes() {
        let bytes = encode_f32(&[2, 3], &[0.0; 6]).unwrap();
        let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let text = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
        assert_eq!(
            text.trim_end(),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
        );
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let one = encode_f32(&[5], &[0.0; 5]).unwrap();
        assert!(String::from_utf8_lossy(&one).contains("'shape': (5,), }"));
        let zero = encode_f32(&[], &[1.0]).unwrap();
        assert!(String::from_utf8_lossy(&zero).contains("'shape': (), }"));
    }

    #[test]
    fn reads_headers_numpy_writes() {
        let d6 = le(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        // NumPy 1.x and 2.x: sorted keys, ", " after each, then 21 - len(repr(shape[0]))
        // spaces of growth room before the alignment padding (NumPy >= 1.24).
        let cases: [(u8, String, &[usize], Vec<u8>); 6] = [
            (
                1,
                format!(
                    "{{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }}{}",
                    " ".repeat(20)
                ),
                &[2, 3],
                d6.clone(),
            ),
            // Before NumPy 1.24: no growth room.
            (
                1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".into(),
                &[2, 3],
                d6.clone(),
            ),
            (
                1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (), }".into(),
                &[],
                le(&[7.5]),
            ),
            (
                1,
                format!(
                    "{{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }}{}",
                    " ".repeat(20)
                ),
                &[5],
                le(&[1.0, 2.0, 3.0, 4.0, 5.0]),
            ),
            // Version 2.0 and 3.0 frame the same dict with a 4-byte length.
            (
                2,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".into(),
                &[2, 3],
                d6.clone(),
            ),
            (
                3,
                "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 6), }".into(),
                &[1, 6],
                d6.clone(),
            ),
        ];
        for (ver, dict, shape, data) in cases {
            let a = decode_f32(&framed(ver, &dict, &data)).unwrap();
            assert_eq!(a.shape, shape, "{dict}");
            assert_eq!(le(&a.data), data, "{dict}");
        }
        // Other spellings Python reads alike: double quotes, any order, no trailing commas,
        // tabs and newlines, an old 16-byte alignment.
        for dict in [
            "{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<f4\"}",
            "{'shape':(2,3,),'descr':'<f4','fortran_order':False}",
            "\t{ 'descr' :\t'<f4' ,\n 'fortran_order' : False ,\r\n 'shape' : ( 2 , 3 ) , }\n",
        ] {
            let a = decode_f32(&framed(1, dict, &d6)).unwrap();
            assert_eq!(a.shape, [2, 3], "{dict:?}");
        }
        let mut old = MAGIC.to_vec();
        let mut dict = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".to_vec();
        while !(10 + dict.len() + 1).is_multiple_of(16) {
            dict.push(b' ');
        }
        dict.push(b'\n');
        old.extend_from_slice(&[1, 0, dict.len() as u8, 0]);
        old.extend_from_slice(&dict);
        old.extend_from_slice(&d6);
        assert_eq!(decode_f32(&old).unwrap().shape, [2, 3]);
    }

    #[test]
    fn bad_headers_name_the_field() {
        let ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        assert_eq!(decode_f32(&framed(1, ok, &[0; 24])).unwrap().shape, [2, 3]);
        let cases: &[(&str, &str)] = &[
            // The dict itself.
            ("", "npy.header"),
            ("   ", "npy.header"),
            ("[]", "npy.header"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }}", "npy.header"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", "npy.header"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3),, }", "npy.header"),
            ("{, 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.header"),
            ("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", "npy.header"),
            ("{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.header"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "npy.header"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", "npy.header"),
            ("{descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.header"),
            ("{'descr: '<f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.header"),
            ("{'de\\x73cr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.header"),
            ("{b'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.header"),
            ("{'descr\": '<f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.header"),
            ("{'d\u{e9}scr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.header"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}\0", "npy.header"),
            // Missing and repeated keys.
            ("{'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': '<f4', 'shape': (2, 3)}", "npy.fortran_order"),
            ("{'descr': '<f4', 'fortran_order': False}", "npy.shape"),
            ("{}", "npy.descr"),
            ("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': '<f4', 'fortran_order': False, 'fortran_order': False, 'shape': (2, 3)}", "npy.fortran_order"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (2, 3)}", "npy.shape"),
            // descr.
            ("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': '|f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': 'f4', 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': '<f4 ', 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': <f4, 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            ("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}", "npy.descr"),
            // fortran_order.
            ("{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3)}", "npy.fortran_order"),
            ("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", "npy.fortran_order"),
            ("{'descr': '<f4', 'fortran_order': 'False', 'shape': (2, 3)}", "npy.fortran_order"),
            ("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3)}", "npy.fortran_order"),
            ("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3)}", "npy.fortran_order"),
            // shape.
            ("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': 6}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3.0)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0x3)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 03)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3_0)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,, 3)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (,)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': ((2, 3))}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 'a')}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, 1)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}", "npy.shape"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,)}", "npy.shape"),
            // Valid headers whose data is not 24 bytes.
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)}", "npy.data"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4)}", "npy.data"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': ()}", "npy.data"),
        ];
        for (dict, field) in cases {
            let e = header_err(dict);
            assert_eq!(field_of(&e), *field, "{dict:?}: {e}");
            // One printable line.
            let msg = e.to_string();
            assert!(
                msg.chars().all(|c| c == ' ' || c.is_ascii_graphic()),
                "{dict:?}: {msg:?}"
            );
        }
    }

    #[test]
    fn bad_framing_names_the_field() {
        let good = framed(
            1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            &le(&[1.0, 2.0]),
        );
        assert_eq!(decode_f32(&good).unwrap().data, [1.0, 2.0]);
        let mut cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "npy.magic"),
            (b"\x93NUMP".to_vec(), "npy.magic"),
            (b"PK\x03\x04 a zip file".to_vec(), "npy.magic"),
            (good[..8].to_vec(), "npy.header_len"),
            (good[..9].to_vec(), "npy.header_len"),
            (good[..40].to_vec(), "npy.header_len"),
            (good[..good.len() - 1].to_vec(), "npy.data"),
            ([&good[..], &[0]].concat(), "npy.data"),
        ];
        for (major, minor) in [(0, 0), (1, 1), (2, 1), (4, 0), (255, 255)] {
            let mut b = good.clone();
            b[6] = major;
            b[7] = minor;
            cases.push((b, "npy.version"));
        }
        // A header length over the limit, in each version's field width.
        let mut long1 = good.clone();
        long1[8..10].copy_from_slice(&(MAX_HEADER_LEN as u16 + 1).to_le_bytes());
        cases.push((long1, "npy.header_len"));
        let mut long2 = good[..8].to_vec();
        long2[6] = 2;
        long2.extend_from_slice(&u32::MAX.to_le_bytes());
        cases.push((long2, "npy.header_len"));
        for (bytes, field) in &cases {
            let e = decode_f32(bytes).unwrap_err();
            assert_eq!(
                field_of(&e),
                *field,
                "{:?}: {e}",
                bytes.escape_ascii().to_string()
            );
        }
        // A header of exactly the limit is read.
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&(MAX_HEADER_LEN as u16).to_le_bytes());
        b.extend_from_slice(dict.as_bytes());
        b.resize(10 + MAX_HEADER_LEN - 1, b' ');
        b.push(b'\n');
        b.extend_from_slice(&le(&[1.0, 2.0]));
        assert_eq!(decode_f32(&b).unwrap().data, [1.0, 2.0]);
    }

    #[test]
    fn a_huge_shape_in_a_tiny_file_fails_before_allocating() {
        // 2^62 elements: the bytes overflow...
        let e =
            header_err("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,)}");
        assert!(matches!(e, Error::Overflow { .. }), "{e}");
        // ... and 2^40 elements (4 TiB) fit, but the file holds 24 bytes: refused by length,
        // not by a failed allocation.
        let e = header_err("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576)}");
        assert_eq!(field_of(&e), "npy.data", "{e}");
        assert!(e.to_string().contains("4398046511104 bytes"), "{e}");
    }

    #[test]
    fn fortran_order_only_where_it_changes_nothing() {
        for (shape, ok) in [
            ("()", true),
            ("(6,)", true),
            ("(1, 6)", true),
            ("(6, 1, 1)", true),
            ("(2, 3)", false),
            ("(1, 2, 3)", false),
        ] {
            let n: usize = if shape == "()" { 1 } else { 6 };
            let dict = format!("{{'descr': '<f4', 'fortran_order': True, 'shape': {shape}, }}");
            let r = decode_f32(&framed(1, &dict, &le(&vec![1.0; n])));
            assert_eq!(r.is_ok(), ok, "{shape}: {r:?}");
            if let Err(e) = r {
                assert_eq!(field_of(&e), "npy.fortran_order");
            }
        }
    }

    #[test]
    fn pathological_headers_are_refused_in_one_pass() {
        // The inputs that make a backtracking Python-literal parser take exponential time:
        // unclosed braces, nested brackets, open strings, each filling the largest header.
        let fill = |prefix: &str, unit: &str| {
            let mut s = prefix.to_string();
            // Room for the alignment padding and '\n' framed() adds.
            while s.len() + unit.len() < MAX_HEADER_LEN - 64 {
                s.push_str(unit);
            }
            s
        };
        let cases = [
            (fill("", "{"), "npy.header"),
            (fill("", "{'a': "), "npy.header"),
            (fill("{'descr': ", "{"), "npy.descr"),
            (
                fill("{'descr': '<f4', 'fortran_order': False, 'shape': ", "("),
                "npy.shape",
            ),
            (
                fill("{'descr': '<f4', 'fortran_order': False, 'shape': (", "1, "),
                "npy.shape",
            ),
            (
                fill("{'descr': '<f4', 'fortran_order': False, 'shape': ", "[{("),
                "npy.shape",
            ),
            (fill("{'descr': '", "a"), "npy.descr"),
            (fill("{", " "), "npy.header"),
        ];
        for (dict, field) in cases {
            assert!(dict.len() < MAX_HEADER_LEN);
            let e = decode_f32(&framed(1, &dict, &[])).unwrap_err();
            assert_eq!(field_of(&e), field, "{}...: {e}", &dict[..60]);
            assert!(e.to_string().len() < 300, "{e}");
        }
        // Every prefix of a good file is refused, never a panic.
        let good = encode_f32(&[2, 3], &[1.0; 6]).unwrap();
        for n in 0..good.len() {
            assert!(decode_f32(&good[..n]).is_err(), "prefix of {n} bytes");
        }
        // Every byte of the header replaced by each byte value: no panic.
        for i in 0..64 {
            for b in 0..=255u8 {
                let mut g = good.clone();
                g[i] = b;
                let _ = decode_f32(&g);
            }
        }
    }

    #[test]
    fn encode_checks_the_data_against_the_shape() {
        let e = encode_f32(&[2, 3], &[0.0; 5]).unwrap_err();
        assert_eq!(field_of(&e), "npy.data");
        let e = encode_f32(&[usize::MAX, 2], &[]).unwrap_err();
        assert!(matches!(e, Error::Overflow { .. }), "{e}");
        let e = encode_f32(&[1; 5000], &[0.0]).unwrap_err();
        assert_eq!(field_of(&e), "npy.shape");
    }

    #[test]
    fn files_round_trip_and_name_the_file() {
        let dir = std::env::temp_dir().join(format!("autodnn-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npy");
        let data: Vec<f32> = (0..100_000).map(|i| i as f32).collect();
        write_f32(&path, &[100, 1000], &data).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes, encode_f32(&[100, 1000], &data).unwrap());
        let a = read_f32(&path).unwrap();
        assert_eq!(
            (a.shape.as_slice(), a.data.len()),
            (&[100, 1000][..], 100_000)
        );
        assert_eq!(a.data, data);
        // Truncated and extended files.
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        assert_eq!(field_of(&read_f32(&path).unwrap_err()), "npy.data");
        std::fs::write(&path, [&bytes[..], &[0; 4]].concat()).unwrap();
        assert_eq!(field_of(&read_f32(&path).unwrap_err()), "npy.data");
        // A tiny file with a small header.
        std::fs::write(&path, &bytes[..20]).unwrap();
        assert!(read_f32(&path).is_err());
        let missing = dir.join("missing.npy");
        match read_f32(&missing).unwrap_err() {
            Error::Io { path, .. } => assert!(path.contains("missing.npy")),
            e => panic!("{e:?}"),
        }
        assert!(matches!(
            write_f32(&dir.join("no/such/dir.npy"), &[1], &[0.0]),
            Err(Error::Io { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
