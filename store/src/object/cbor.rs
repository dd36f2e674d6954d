// Over 600 lines on purpose: the encoder and the strict decoder define canonical CBOR together.
//! Deterministic CBOR (RFC 8949 §4.2, core deterministic encoding) restricted
//! to the JSON data model.
//!
//! This module is the only place in sessctl where bytes of CBOR are produced or
//! parsed. Object ids are the blake3 hash of these bytes, so the encoding must
//! be a bijection: every JSON value has exactly one encoding, and the decoder
//! accepts exactly the bytes the encoder produces. It must never accept a
//! non-canonical encoding (non-shortest heads or floats, unsorted or duplicate
//! map keys, indefinite lengths, tags, trailing bytes, ...), because that would
//! let two different ids name the same value.
//!
//! The decoder is also hardened against hostile input: every malformed input is
//! an error, never a panic, nesting is bounded by [`MAX_DEPTH`], and no
//! allocation is sized from a declared length before the bytes backing it are
//! known to be present.

// This is a codec toolkit: each caller uses the subset of readers and writers
// its format needs, so some of them may be unused at any given time.
#![allow(dead_code)]

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Number, Value};

/// Maximum nesting of arrays and maps, on both encode and decode. Bounds the
/// recursion depth (stack use) of both directions.
pub(crate) const MAX_DEPTH: usize = 256;

/// Upper bound on how many array items or map entries are reserved up front
/// from a declared length. The declared length is already checked against the
/// remaining input, but nested containers all claim the same remaining bytes,
/// so without a cap a small hostile input could make every nesting level
/// reserve room for its whole size in `Value`s at once.
const PREALLOC_CAP: usize = 1024;

const MAJOR_UINT: u8 = 0;
const MAJOR_NINT: u8 = 1;
const MAJOR_BYTES: u8 = 2;
const MAJOR_TEXT: u8 = 3;
const MAJOR_ARRAY: u8 = 4;
const MAJOR_MAP: u8 = 5;
const MAJOR_TAG: u8 = 6;

const FALSE: u8 = 0xf4;
const TRUE: u8 = 0xf5;
const NULL: u8 = 0xf6;
const UNDEFINED: u8 = 0xf7;
const SIMPLE_1BYTE: u8 = 0xf8;
const HALF: u8 = 0xf9;
const SINGLE: u8 = 0xfa;
const DOUBLE: u8 = 0xfb;
const BREAK: u8 = 0xff;

/// What went wrong decoding or encoding; `offset` is the byte offset in the
/// input (or, when encoding, in the output so far) where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} at byte {offset}")]
pub struct CborError {
    pub offset: usize,
    pub reason: CborErrorReason,
}

/// Why an encoding was refused. `Display` gives a short lowercase phrase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CborErrorReason {
    /// The input ended inside an item.
    Truncated,
    /// A string, array or map declares more content than bytes remain.
    LengthExceedsInput,
    IntegerNotShortest,
    LengthNotShortest,
    FloatNotShortest,
    SimpleNotShortest,
    IndefiniteLength,
    /// Additional information 28..=30, reserved by RFC 8949.
    ReservedInfo(u8),
    UnexpectedBreak,
    Tag,
    Undefined,
    /// A simple value other than false/true/null.
    SimpleValue(u8),
    ByteString,
    NaN,
    Infinity,
    /// Major type 1 with an argument above `i64::MAX`.
    NegativeOutOfRange,
    /// Major type 0 above `i64::MAX` where an `i64` was asked for.
    IntegerOutOfRange,
    InvalidUtf8,
    NonTextKey,
    DuplicateKey(String),
    KeyOrder,
    TooDeep,
    TrailingBytes,
    /// A typed read found a different kind of item.
    UnexpectedType {
        expected: &'static str,
        found: &'static str,
    },
    /// A `serde_json::Number` with no integer or float view (only possible
    /// with serde_json's `arbitrary_precision`).
    UnrepresentableNumber,
    /// A reason supplied by a caller through [`Decoder::error`].
    Custom(String),
}

impl fmt::Display for CborErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use CborErrorReason as R;
        match self {
            R::Truncated => f.write_str("truncated input"),
            R::LengthExceedsInput => f.write_str("declared length exceeds remaining input"),
            R::IntegerNotShortest => f.write_str("integer not in shortest form"),
            R::LengthNotShortest => f.write_str("length not in shortest form"),
            R::FloatNotShortest => f.write_str("float not in shortest form"),
            R::SimpleNotShortest => f.write_str("simple value not in shortest form"),
            R::IndefiniteLength => f.write_str("indefinite length not allowed"),
            R::ReservedInfo(info) => write!(f, "reserved additional information {info}"),
            R::UnexpectedBreak => f.write_str("unexpected break stop code"),
            R::Tag => f.write_str("tags are not allowed"),
            R::Undefined => f.write_str("undefined is not a JSON value"),
            R::SimpleValue(v) => write!(f, "simple value {v} is not allowed"),
            R::ByteString => f.write_str("byte string is not a JSON value"),
            R::NaN => f.write_str("NaN is not a JSON number"),
            R::Infinity => f.write_str("infinity is not a JSON number"),
            R::NegativeOutOfRange => f.write_str("negative integer below i64::MIN"),
            R::IntegerOutOfRange => f.write_str("integer above i64::MAX"),
            R::InvalidUtf8 => f.write_str("invalid UTF-8 in text string"),
            R::NonTextKey => f.write_str("map key is not a text string"),
            R::DuplicateKey(key) => write!(f, "duplicate map key {key:?}"),
            R::KeyOrder => f.write_str("map keys out of canonical order"),
            R::TooDeep => write!(f, "nesting deeper than {MAX_DEPTH}"),
            R::TrailingBytes => f.write_str("trailing bytes after the value"),
            R::UnexpectedType { expected, found } => {
                write!(f, "expected {expected}, found {found}")
            }
            R::UnrepresentableNumber => f.write_str("number has no CBOR representation"),
            R::Custom(reason) => f.write_str(reason),
        }
    }
}

/// Canonical order of text map keys (RFC 8949 §4.2.1): bytewise order of the
/// encoded keys. Shortest-form heads grow monotonically with the length, so
/// that is shorter key first, then bytewise on the UTF-8.
pub(crate) fn canonical_key_cmp(a: &str, b: &str) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

/// The binary16 bit pattern of `v` if it is exactly representable as a
/// (possibly subnormal) half, else `None`. Working on the bit fields directly,
/// rather than rounding and comparing, keeps this exact for every input,
/// including -0.0 and values just beyond half range.
fn f64_to_f16_exact(v: f64) -> Option<u16> {
    let bits = v.to_bits();
    let sign = ((bits >> 48) & 0x8000) as u16;
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1 << 52) - 1);
    if biased == 0 {
        // Zero keeps its sign; f64 subnormals are far below half range.
        return (frac == 0).then_some(sign);
    }
    if biased == 0x7ff {
        return None;
    }
    let exp = biased - 1023;
    if exp > 15 {
        return None;
    }
    if exp >= -14 {
        // Normal half: the 10 fraction bits must hold all of f64's 52.
        if frac & ((1 << 42) - 1) != 0 {
            return None;
        }
        return Some(sign | (((exp + 15) as u16) << 10) | (frac >> 42) as u16);
    }
    // Subnormal half: value = k * 2^-24 with 1 <= k < 1024.
    if exp < -24 {
        return None;
    }
    let significand = frac | (1 << 52);
    let shift = (28 - exp) as u32; // 43..=52
    if significand & ((1u64 << shift) - 1) != 0 {
        return None;
    }
    Some(sign | (significand >> shift) as u16)
}

/// Widens binary16 bits to f64 (always exact). NaN and infinities come out as
/// f64 NaN and infinities so the caller can reject them.
fn f16_to_f64(h: u16) -> f64 {
    let sign = u64::from(h & 0x8000) << 48;
    let exp = u64::from((h >> 10) & 0x1f);
    let frac = u64::from(h & 0x3ff);
    let magnitude = match exp {
        0 => f64::from(h & 0x3ff) * (1.0 / 16_777_216.0), // frac * 2^-24
        0x1f if frac == 0 => f64::INFINITY,
        0x1f => f64::NAN,
        _ => f64::from_bits(((exp + 1023 - 15) << 52) | (frac << 42)),
    };
    f64::from_bits(magnitude.to_bits() | sign)
}

/// `v` as an f32, if that survives the round trip back to f64 bit-for-bit.
fn f32_exact(v: f64) -> Option<f32> {
    let single = v as f32;
    (f64::from(single).to_bits() == v.to_bits()).then_some(single)
}

/// Low-level deterministic writer. Heads are always shortest form; the caller
/// is responsible for writing map keys in [`canonical_key_cmp`] order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Self {
        Self { buf: Vec::new() }
    }

    pub fn with_capacity(n: usize) -> Self {
        Self {
            buf: Vec::with_capacity(n),
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    fn error(&self, reason: CborErrorReason) -> CborError {
        CborError {
            offset: self.buf.len(),
            reason,
        }
    }

    #[inline]
    fn head(&mut self, major: u8, v: u64) {
        let m = major << 5;
        if v < 24 {
            self.buf.push(m | v as u8);
        } else if v <= 0xff {
            self.buf.extend_from_slice(&[m | 24, v as u8]);
        } else if v <= 0xffff {
            self.buf.push(m | 25);
            self.buf.extend_from_slice(&(v as u16).to_be_bytes());
        } else if v <= 0xffff_ffff {
            self.buf.push(m | 26);
            self.buf.extend_from_slice(&(v as u32).to_be_bytes());
        } else {
            self.buf.push(m | 27);
            self.buf.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub fn uint(&mut self, v: u64) {
        self.head(MAJOR_UINT, v);
    }

    pub fn int(&mut self, v: i64) {
        if v >= 0 {
            self.head(MAJOR_UINT, v as u64);
        } else {
            // Major 1 carries -1 - v, which for negative v is !v.
            self.head(MAJOR_NINT, !v as u64);
        }
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.head(MAJOR_BYTES, b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    pub fn text(&mut self, s: &str) {
        self.head(MAJOR_TEXT, s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
    }

    pub fn array(&mut self, len: usize) {
        self.head(MAJOR_ARRAY, len as u64);
    }

    pub fn map(&mut self, len: usize) {
        self.head(MAJOR_MAP, len as u64);
    }

    pub fn bool(&mut self, v: bool) {
        self.buf.push(if v { TRUE } else { FALSE });
    }

    pub fn null(&mut self) {
        self.buf.push(NULL);
    }

    /// Writes the shortest of half/single/double that holds `v` bit-exactly.
    pub fn float(&mut self, v: f64) -> Result<(), CborError> {
        if v.is_nan() {
            return Err(self.error(CborErrorReason::NaN));
        }
        if v.is_infinite() {
            return Err(self.error(CborErrorReason::Infinity));
        }
        if let Some(h) = f64_to_f16_exact(v) {
            self.buf.push(HALF);
            self.buf.extend_from_slice(&h.to_be_bytes());
        } else if let Some(s) = f32_exact(v) {
            self.buf.push(SINGLE);
            self.buf.extend_from_slice(&s.to_bits().to_be_bytes());
        } else {
            self.buf.push(DOUBLE);
            self.buf.extend_from_slice(&v.to_bits().to_be_bytes());
        }
        Ok(())
    }

    /// Writes the canonical encoding of a JSON value.
    pub fn json(&mut self, v: &Value) -> Result<(), CborError> {
        self.json_at(v, 0)
    }

    fn json_at(&mut self, v: &Value, depth: usize) -> Result<(), CborError> {
        match v {
            Value::Null => self.null(),
            Value::Bool(b) => self.bool(*b),
            Value::Number(n) => self.number(n)?,
            Value::String(s) => self.text(s),
            Value::Array(items) => {
                // Refuse what the decoder would refuse, or the id of this
                // value could never be read back.
                if depth >= MAX_DEPTH {
                    return Err(self.error(CborErrorReason::TooDeep));
                }
                self.array(items.len());
                for item in items {
                    self.json_at(item, depth + 1)?;
                }
            }
            Value::Object(map) => {
                if depth >= MAX_DEPTH {
                    return Err(self.error(CborErrorReason::TooDeep));
                }
                self.map(map.len());
                // Sort explicitly instead of trusting the Map's iteration
                // order: feature unification could switch serde_json to
                // `preserve_order`, and BTreeMap order is not canonical anyway.
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| canonical_key_cmp(a.0, b.0));
                for (key, value) in entries {
                    self.text(key);
                    self.json_at(value, depth + 1)?;
                }
            }
        }
        Ok(())
    }

    fn number(&mut self, n: &Number) -> Result<(), CborError> {
        // Integer views first: a Number holding an integer must stay an
        // integer, while one holding a float (even 1.0) stays a float.
        if let Some(u) = n.as_u64() {
            self.uint(u);
        } else if let Some(i) = n.as_i64() {
            self.int(i);
        } else if let Some(f) = n.as_f64() {
            self.float(f)?;
        } else {
            return Err(self.error(CborErrorReason::UnrepresentableNumber));
        }
        Ok(())
    }
}

/// Canonical bytes of one JSON value.
pub(crate) fn encode_json(v: &Value) -> Result<Vec<u8>, CborError> {
    let mut enc = Encoder::new();
    enc.json(v)?;
    Ok(enc.into_bytes())
}

/// Strictly decodes exactly one JSON value occupying the whole buffer.
pub(crate) fn decode_json(bytes: &[u8]) -> Result<Value, CborError> {
    let mut dec = Decoder::new(bytes);
    let value = dec.json()?;
    dec.finish()?;
    Ok(value)
}

/// Strictly decodes exactly one JSON value occupying the whole buffer and
/// appends its JSON text to `out`: the very text `serde_json::to_string`
/// gives for the value [`decode_json`] returns (compact, object keys in
/// bytewise order, the same escapes and number forms), without building
/// the value. On error, `out` may hold part of the text.
pub(crate) fn write_json_text(bytes: &[u8], out: &mut Vec<u8>) -> Result<(), CborError> {
    let mut dec = Decoder::new(bytes);
    dec.json_text(0, out)?;
    dec.finish()
}

/// Appends the compact JSON text serde_json writes for `v`.
fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    serde_json::to_writer(out, v).expect("a string or number serializes into a Vec");
}

/// Human name of the item starting with `initial`, for type-mismatch errors.
fn describe(initial: u8) -> &'static str {
    match initial >> 5 {
        MAJOR_UINT => "unsigned integer",
        MAJOR_NINT => "negative integer",
        MAJOR_BYTES => "byte string",
        MAJOR_TEXT => "text string",
        MAJOR_ARRAY => "array",
        MAJOR_MAP => "map",
        MAJOR_TAG => "tag",
        _ => match initial {
            FALSE | TRUE => "boolean",
            NULL => "null",
            UNDEFINED => "undefined",
            HALF | SINGLE | DOUBLE => "float",
            BREAK => "break stop code",
            _ => "simple value",
        },
    }
}

/// Low-level strict reader over a buffer. Every read validates canonical form;
/// on error the position is left at the start of the offending item.
#[derive(Debug, Clone)]
pub(crate) struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    /// No bytes left.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Major type (0..=7) of the next item.
    pub fn peek_major(&self) -> Result<u8, CborError> {
        Ok(self.peek_initial()? >> 5)
    }

    pub fn peek_is_null(&self) -> bool {
        self.buf.get(self.pos) == Some(&NULL)
    }

    /// An error at the current position with a caller-supplied reason.
    pub fn error(&self, reason: impl Into<String>) -> CborError {
        self.err_at(self.pos, CborErrorReason::Custom(reason.into()))
    }

    /// Succeeds only if the whole buffer has been consumed.
    pub fn finish(self) -> Result<(), CborError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self.err_at(self.pos, CborErrorReason::TrailingBytes))
        }
    }

    pub fn uint(&mut self) -> Result<u64, CborError> {
        let initial = self.expect_major(MAJOR_UINT, "unsigned integer")?;
        self.read_arg(initial)
    }

    /// An integer in i64 range, from major type 0 or 1.
    pub fn int(&mut self) -> Result<i64, CborError> {
        let start = self.pos;
        let initial = self.peek_initial()?;
        match initial >> 5 {
            MAJOR_UINT => {
                let v = self.read_arg(initial)?;
                i64::try_from(v).map_err(|_| self.rewind(start, CborErrorReason::IntegerOutOfRange))
            }
            MAJOR_NINT => self.negative(initial),
            _ => Err(self.unexpected(initial, "integer")),
        }
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], CborError> {
        let initial = self.expect_major(MAJOR_BYTES, "byte string")?;
        self.payload(initial)
    }

    pub fn text(&mut self) -> Result<&'a str, CborError> {
        let initial = self.expect_major(MAJOR_TEXT, "text string")?;
        self.text_body(initial)
    }

    /// Array head; the returned length is at most the number of bytes left.
    pub fn array(&mut self) -> Result<usize, CborError> {
        let initial = self.expect_major(MAJOR_ARRAY, "array")?;
        self.container_len(initial, 1)
    }

    /// Map head; twice the returned length is at most the number of bytes
    /// left. Keys are the caller's to check (see [`canonical_key_cmp`]).
    pub fn map(&mut self) -> Result<usize, CborError> {
        let initial = self.expect_major(MAJOR_MAP, "map")?;
        self.container_len(initial, 2)
    }

    pub fn bool(&mut self) -> Result<bool, CborError> {
        match self.peek_initial()? {
            FALSE => {
                self.pos += 1;
                Ok(false)
            }
            TRUE => {
                self.pos += 1;
                Ok(true)
            }
            other => Err(self.unexpected(other, "boolean")),
        }
    }

    pub fn null(&mut self) -> Result<(), CborError> {
        match self.peek_initial()? {
            NULL => {
                self.pos += 1;
                Ok(())
            }
            other => Err(self.unexpected(other, "null")),
        }
    }

    /// A float in shortest exact form (never NaN or infinite).
    pub fn float(&mut self) -> Result<f64, CborError> {
        match self.peek_initial()? {
            initial @ (HALF | SINGLE | DOUBLE) => self.float_body(initial),
            other => Err(self.unexpected(other, "float")),
        }
    }

    /// One strictly canonical JSON-model value. Nesting is counted from this
    /// call, so a value embedded in a caller's own structure gets the full
    /// [`MAX_DEPTH`].
    pub fn json(&mut self) -> Result<Value, CborError> {
        self.value(0)
    }

    #[cold]
    #[inline(never)]
    fn err_at(&self, offset: usize, reason: CborErrorReason) -> CborError {
        CborError { offset, reason }
    }

    /// Resets the position to the item start so that a failed read leaves the
    /// decoder pointing at the offending item.
    #[cold]
    fn rewind(&mut self, start: usize, reason: CborErrorReason) -> CborError {
        self.pos = start;
        self.err_at(start, reason)
    }

    #[cold]
    fn truncated(&self) -> CborError {
        self.err_at(self.buf.len(), CborErrorReason::Truncated)
    }

    #[cold]
    fn unexpected(&self, initial: u8, expected: &'static str) -> CborError {
        self.err_at(
            self.pos,
            CborErrorReason::UnexpectedType {
                expected,
                found: describe(initial),
            },
        )
    }

    // The small readers below are force-inlined in optimized builds only:
    // that measured ~10% on whole-message decoding, while in unoptimized
    // builds it multiplies the stack frame repeated per nesting level by ~4,
    // which matters at MAX_DEPTH on 2 MiB threads.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn peek_initial(&self) -> Result<u8, CborError> {
        match self.buf.get(self.pos) {
            Some(&b) => Ok(b),
            None => Err(self.truncated()),
        }
    }

    fn expect_major(&self, major: u8, expected: &'static str) -> Result<u8, CborError> {
        let initial = self.peek_initial()?;
        if initial >> 5 == major {
            Ok(initial)
        } else {
            Err(self.unexpected(initial, expected))
        }
    }

    /// `N` bytes starting at `at`, or a truncation error.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn chunk<const N: usize>(&self, at: usize) -> Result<[u8; N], CborError> {
        match self.buf.get(at..).and_then(|rest| rest.first_chunk::<N>()) {
            Some(bytes) => Ok(*bytes),
            None => Err(self.truncated()),
        }
    }

    /// Reads the argument of a major 0..=5 head whose initial byte (at `pos`)
    /// is `initial`, enforcing shortest form, and moves past the head.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn read_arg(&mut self, initial: u8) -> Result<u64, CborError> {
        let start = self.pos;
        let info = initial & 0x1f;
        let (value, head_len, min) = match info {
            0..=23 => {
                self.pos = start + 1;
                return Ok(u64::from(info));
            }
            24 => (u64::from(self.chunk::<1>(start + 1)?[0]), 2, 24),
            25 => (
                u64::from(u16::from_be_bytes(self.chunk(start + 1)?)),
                3,
                0x100,
            ),
            26 => (
                u64::from(u32::from_be_bytes(self.chunk(start + 1)?)),
                5,
                0x1_0000,
            ),
            27 => (u64::from_be_bytes(self.chunk(start + 1)?), 9, 0x1_0000_0000),
            28..=30 => return Err(self.err_at(start, CborErrorReason::ReservedInfo(info))),
            _ => return Err(self.err_at(start, CborErrorReason::IndefiniteLength)),
        };
        if value < min {
            let reason = if initial >> 5 <= MAJOR_NINT {
                CborErrorReason::IntegerNotShortest
            } else {
                CborErrorReason::LengthNotShortest
            };
            return Err(self.err_at(start, reason));
        }
        self.pos = start + head_len;
        Ok(value)
    }

    #[inline]
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Reads a length head and checks that `len * min_item_bytes` bytes could
    /// follow, so callers may size allocations from it.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn container_len(&mut self, initial: u8, min_item_bytes: usize) -> Result<usize, CborError> {
        let start = self.pos;
        let len = self.read_arg(initial)?;
        let fits = (self.remaining() / min_item_bytes) as u64;
        if len > fits {
            return Err(self.rewind(start, CborErrorReason::LengthExceedsInput));
        }
        Ok(len as usize)
    }

    /// Body of a byte or text string: the head's length of raw bytes.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn payload(&mut self, initial: u8) -> Result<&'a [u8], CborError> {
        let start = self.pos;
        let len = self.container_len(initial, 1)?;
        let end = self.pos + len;
        match self.buf.get(self.pos..end) {
            Some(bytes) => {
                self.pos = end;
                Ok(bytes)
            }
            None => Err(self.rewind(start, CborErrorReason::LengthExceedsInput)),
        }
    }

    #[cfg_attr(not(debug_assertions), inline(always))]
    fn text_body(&mut self, initial: u8) -> Result<&'a str, CborError> {
        let start = self.pos;
        let bytes = self.payload(initial)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s),
            Err(e) => {
                let bad = self.pos - bytes.len() + e.valid_up_to();
                self.pos = start;
                Err(self.err_at(bad, CborErrorReason::InvalidUtf8))
            }
        }
    }

    fn negative(&mut self, initial: u8) -> Result<i64, CborError> {
        let start = self.pos;
        let n = self.read_arg(initial)?;
        match i64::try_from(n) {
            // -1 - n, which for 0 <= n <= i64::MAX is !n and never overflows.
            Ok(n) => Ok(!n),
            Err(_) => Err(self.rewind(start, CborErrorReason::NegativeOutOfRange)),
        }
    }

    fn float_body(&mut self, initial: u8) -> Result<f64, CborError> {
        let start = self.pos;
        let (v, head_len) = match initial {
            HALF => (f16_to_f64(u16::from_be_bytes(self.chunk(start + 1)?)), 3),
            SINGLE => (
                f64::from(f32::from_bits(u32::from_be_bytes(self.chunk(start + 1)?))),
                5,
            ),
            _ => (
                f64::from_bits(u64::from_be_bytes(self.chunk(start + 1)?)),
                9,
            ),
        };
        if v.is_nan() {
            return Err(self.err_at(start, CborErrorReason::NaN));
        }
        if v.is_infinite() {
            return Err(self.err_at(start, CborErrorReason::Infinity));
        }
        // Accept a width only if it is the one the encoder would choose.
        let shortest = match initial {
            HALF => true,
            SINGLE => f64_to_f16_exact(v).is_none(),
            _ => f32_exact(v).is_none(),
        };
        if !shortest {
            return Err(self.err_at(start, CborErrorReason::FloatNotShortest));
        }
        self.pos = start + head_len;
        Ok(v)
    }

    /// The simple/float item at `pos` as a JSON value, rejecting everything
    /// outside false/true/null and canonical finite floats.
    fn simple_value(&mut self, initial: u8) -> Result<Value, CborError> {
        let start = self.pos;
        let value = match initial {
            FALSE => Value::Bool(false),
            TRUE => Value::Bool(true),
            NULL => Value::Null,
            HALF | SINGLE | DOUBLE => {
                let f = self.float_body(initial)?;
                return match Number::from_f64(f) {
                    Some(n) => Ok(Value::Number(n)),
                    None => Err(self.rewind(start, CborErrorReason::NaN)),
                };
            }
            UNDEFINED => return Err(self.err_at(start, CborErrorReason::Undefined)),
            SIMPLE_1BYTE => {
                let [v] = self.chunk::<1>(start + 1)?;
                let reason = if v < 32 {
                    CborErrorReason::SimpleNotShortest
                } else {
                    CborErrorReason::SimpleValue(v)
                };
                return Err(self.err_at(start, reason));
            }
            0xfc..=0xfe => {
                return Err(self.err_at(start, CborErrorReason::ReservedInfo(initial & 0x1f)))
            }
            BREAK => return Err(self.err_at(start, CborErrorReason::UnexpectedBreak)),
            _ => {
                return Err(self.err_at(start, CborErrorReason::SimpleValue(initial & 0x1f)));
            }
        };
        self.pos = start + 1;
        Ok(value)
    }

    fn value(&mut self, depth: usize) -> Result<Value, CborError> {
        let initial = self.peek_initial()?;
        match initial >> 5 {
            MAJOR_UINT => Ok(Value::Number(Number::from(self.read_arg(initial)?))),
            MAJOR_NINT => Ok(Value::Number(Number::from(self.negative(initial)?))),
            MAJOR_TEXT => Ok(Value::String(self.text_body(initial)?.to_owned())),
            MAJOR_ARRAY => self.array_value(initial, depth).map(Value::Array),
            MAJOR_MAP => self.map_value(initial, depth).map(Value::Object),
            MAJOR_BYTES => Err(self.err_at(self.pos, CborErrorReason::ByteString)),
            MAJOR_TAG => Err(self.err_at(self.pos, CborErrorReason::Tag)),
            _ => self.simple_value(initial),
        }
    }

    /// Writes the JSON text of the value at `pos` (see [`write_json_text`]),
    /// checking it as strictly as [`Decoder::json`] does.
    fn json_text(&mut self, depth: usize, out: &mut Vec<u8>) -> Result<(), CborError> {
        let initial = self.peek_initial()?;
        match initial >> 5 {
            MAJOR_UINT => write_json(out, &self.read_arg(initial)?),
            MAJOR_NINT => write_json(out, &self.negative(initial)?),
            MAJOR_TEXT => write_json(out, self.text_body(initial)?),
            MAJOR_ARRAY => self.array_text(initial, depth, out)?,
            MAJOR_MAP => self.map_text(initial, depth, out)?,
            MAJOR_BYTES => return Err(self.err_at(self.pos, CborErrorReason::ByteString)),
            MAJOR_TAG => return Err(self.err_at(self.pos, CborErrorReason::Tag)),
            _ => match self.simple_value(initial)? {
                Value::Number(n) => write_json(out, &n),
                Value::Bool(true) => out.extend_from_slice(b"true"),
                Value::Bool(false) => out.extend_from_slice(b"false"),
                _ => out.extend_from_slice(b"null"),
            },
        }
        Ok(())
    }

    fn array_text(
        &mut self,
        initial: u8,
        depth: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CborError> {
        if depth >= MAX_DEPTH {
            return Err(self.err_at(self.pos, CborErrorReason::TooDeep));
        }
        let len = self.container_len(initial, 1)?;
        out.push(b'[');
        for k in 0..len {
            if k > 0 {
                out.push(b',');
            }
            self.json_text(depth + 1, out)?;
        }
        out.push(b']');
        Ok(())
    }

    /// A map's text: its keys come in canonical order (shorter first) and
    /// go out in bytewise order, as a `serde_json::Map` holds them, so each
    /// value is first stepped over to find where it lies. That walks a
    /// value once more per map it nests in (at most [`MAX_DEPTH`]).
    fn map_text(&mut self, initial: u8, depth: usize, out: &mut Vec<u8>) -> Result<(), CborError> {
        if depth >= MAX_DEPTH {
            return Err(self.err_at(self.pos, CborErrorReason::TooDeep));
        }
        let len = self.container_len(initial, 2)?;
        let mut entries: Vec<(&'a str, usize)> = Vec::with_capacity(len.min(PREALLOC_CAP));
        let mut prev: Option<&'a str> = None;
        for _ in 0..len {
            let key_start = self.pos;
            let key_initial = self.peek_initial()?;
            if key_initial >> 5 != MAJOR_TEXT {
                return Err(self.err_at(key_start, CborErrorReason::NonTextKey));
            }
            let key = self.text_body(key_initial)?;
            if let Some(prev) = prev {
                match canonical_key_cmp(prev, key) {
                    Ordering::Less => {}
                    Ordering::Equal => {
                        let reason = CborErrorReason::DuplicateKey(key.to_owned());
                        return Err(self.err_at(key_start, reason));
                    }
                    Ordering::Greater => {
                        return Err(self.err_at(key_start, CborErrorReason::KeyOrder));
                    }
                }
            }
            prev = Some(key);
            entries.push((key, self.pos));
            self.skip(depth + 1)?;
        }
        let end = self.pos;
        entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        out.push(b'{');
        for (k, (key, at)) in entries.into_iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            write_json(out, key);
            out.push(b':');
            self.pos = at;
            self.json_text(depth + 1, out)?;
        }
        out.push(b'}');
        self.pos = end;
        Ok(())
    }

    /// Steps over the value at `pos`, checking only its structure (heads,
    /// lengths, nesting): whoever steps over a value reads it properly
    /// afterwards.
    fn skip(&mut self, depth: usize) -> Result<(), CborError> {
        let initial = self.peek_initial()?;
        match initial >> 5 {
            MAJOR_UINT | MAJOR_NINT => {
                self.read_arg(initial)?;
            }
            MAJOR_TEXT | MAJOR_BYTES => {
                self.payload(initial)?;
            }
            major @ (MAJOR_ARRAY | MAJOR_MAP) => {
                if depth >= MAX_DEPTH {
                    return Err(self.err_at(self.pos, CborErrorReason::TooDeep));
                }
                let per_item = if major == MAJOR_MAP { 2 } else { 1 };
                let items = self.container_len(initial, per_item)? * per_item;
                for _ in 0..items {
                    self.skip(depth + 1)?;
                }
            }
            MAJOR_TAG => return Err(self.err_at(self.pos, CborErrorReason::Tag)),
            _ => {
                self.simple_value(initial)?;
            }
        }
        Ok(())
    }

    // Containers live in their own functions so that the frame repeated per
    // nesting level stays small (debug builds give every temporary a slot).
    fn array_value(&mut self, initial: u8, depth: usize) -> Result<Vec<Value>, CborError> {
        if depth >= MAX_DEPTH {
            return Err(self.err_at(self.pos, CborErrorReason::TooDeep));
        }
        let len = self.container_len(initial, 1)?;
        let mut items = Vec::with_capacity(len.min(PREALLOC_CAP));
        for _ in 0..len {
            items.push(self.value(depth + 1)?);
        }
        Ok(items)
    }

    fn map_value(&mut self, initial: u8, depth: usize) -> Result<Map<String, Value>, CborError> {
        if depth >= MAX_DEPTH {
            return Err(self.err_at(self.pos, CborErrorReason::TooDeep));
        }
        let len = self.container_len(initial, 2)?;
        // Collect, then build the Map in one go: BTreeMap's FromIterator
        // bulk-builds its nodes, measured ~15% faster on whole messages than
        // inserting one key at a time.
        let mut entries = Vec::with_capacity(len.min(PREALLOC_CAP));
        let mut prev: Option<&'a str> = None;
        for _ in 0..len {
            let key_start = self.pos;
            let key_initial = self.peek_initial()?;
            if key_initial >> 5 != MAJOR_TEXT {
                return Err(self.err_at(key_start, CborErrorReason::NonTextKey));
            }
            let key = self.text_body(key_initial)?;
            if let Some(prev) = prev {
                // Comparing the borrowed input slices avoids re-encoding.
                match canonical_key_cmp(prev, key) {
                    Ordering::Less => {}
                    Ordering::Equal => {
                        let reason = CborErrorReason::DuplicateKey(key.to_owned());
                        return Err(self.err_at(key_start, reason));
                    }
                    Ordering::Greater => {
                        return Err(self.err_at(key_start, CborErrorReason::KeyOrder));
                    }
                }
            }
            prev = Some(key);
            let value = self.value(depth + 1)?;
            entries.push((key.to_owned(), value));
        }
        Ok(Map::from_iter(entries))
    }
}

#[cfg(test)]
#[path = "cbor_tests.rs"]
mod tests;
