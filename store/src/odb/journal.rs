// Over 600 lines on purpose: the frame format, the recovery scan and the group-commit writer are one protocol.
//! The journal: append-only segment files of checksummed frames
//! (objects-format.md, "Journal").
//!
//! One [`Journal::append`] writes one frame, which is one write batch: all of
//! its entries become durable with one `fdatasync`, or none of them count.
//! Concurrent appenders share syncs (group commit): whoever finds no sync in
//! flight becomes the leader and syncs everything written so far; the others
//! wait for a sync that covers their frame.
//!
//! On open the journal is scanned and indexed in memory, and a handle that
//! may write syncs what it read, so that the sync watermark of each frame it
//! appends vouches for every frame it read. A frame that fails its
//! checksum at the end of the last segment, past every watermark, is a torn
//! write: its bytes are set aside in `journal/torn-*.bin` and the segment is
//! cut there, never earlier. This module must never drop a frame that a
//! later watermark vouches for.
//!
//! One file, though long: the frame format, the recovery scan that trusts
//! or cuts frames by their sync watermark, and the group-commit writer that
//! stamps it are one protocol and change together.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

use super::lock::LockGuard;
use crate::error::{Error, IoResultExt, OdbError, Result};
use crate::hash::{ObjectId, Prefix, ID_LEN};
use crate::object::{EncodedObject, ObjectKind};

/// `journal/<seq>.journal` starts with these 4 bytes (objects-format.md, "Segment header").
pub const SEGMENT_MAGIC: [u8; 4] = *b"SJNL";
/// `oplog/<first>-<last>.ops` starts with these 4 bytes (objects-format.md, "Operation log").
pub const OPLOG_MAGIC: [u8; 4] = *b"SOPL";
/// Version of the segment and frame layout (objects-format.md, "Versioning"):
/// 3, a segment whose frames may be followed by zero bytes written ahead
/// ("Space written ahead"). Version-2 segments (no such tail) still read,
/// and are appended to as they are.
pub const JOURNAL_FORMAT_VERSION: u32 = 3;
/// The previous segment version, which this sessctl still reads and appends
/// to (without writing ahead).
pub const JOURNAL_FORMAT_V2: u32 = 2;
/// Version in an operation log file's header (objects-format.md,
/// "Operation log"): 3, its frames compressed as one zstd frame.
pub const OPLOG_FORMAT_VERSION: u32 = 3;
/// The previous op-log version, still read: the frames as they are.
pub const OPLOG_FORMAT_V2: u32 = 2;
/// Bytes before the first frame of a segment.
pub const SEGMENT_HEADER_LEN: u64 = 16;
/// Bytes of a frame header: body length, entry count, sync watermark, checksum.
pub const FRAME_HEADER_LEN: usize = 24;
/// Where a frame header's checksum starts; the bytes before it are checksummed.
pub const FRAME_CHECKSUM_AT: usize = 16;
/// Bytes of an entry header: type, payload length.
pub const ENTRY_HEADER_LEN: usize = 5;
/// Fixed bytes of an object entry before its data: kind, codec, id, raw length.
pub const OBJECT_ENTRY_FIXED: usize = 1 + 1 + ID_LEN + 4;
/// The largest frame body a reader accepts; a batch larger than this is refused.
pub const MAX_FRAME_BODY: usize = 1 << 30;
/// Entry type: one object.
pub const ENTRY_OBJECT: u8 = 1;
/// Entry type: one operation (ref moves, conversation records, run events);
/// payload: u64 LE sequence number, then the operation's canonical bytes.
pub const ENTRY_OP: u8 = 2;
/// Object entry codec: payload stored as is.
pub const CODEC_RAW: u8 = 0;
/// Object entry codec: payload compressed as one zstd frame.
pub const CODEC_ZSTD: u8 = 1;
/// The largest canonical payload (and pack block) a reader will inflate.
pub const MAX_OBJECT_SIZE: usize = 1 << 30;
/// A segment is sealed and a new one started once it grows past this.
pub const DEFAULT_SEGMENT_TARGET: u64 = 2 << 20;
/// How far past a frame a writer of a version-3 segment writes zeros once
/// the space written ahead runs out (objects-format.md, "Space written
/// ahead"): the file's size then changes once per this many bytes of
/// frames, not at every append, so an `fdatasync` writes the frame's
/// blocks and not the inode as well.
pub const WRITE_AHEAD: u64 = 1 << 20;

/// Payloads shorter than this are stored raw: the journal is packed (and
/// compressed in blocks) once a segment is sealed, so compressing each
/// message on its own costs more time than the bytes it saves for so short
/// a while. Large payloads (tool output) are still worth it.
const COMPRESS_MIN: usize = 4096;
const JOURNAL_ZSTD_LEVEL: i32 = 1;

/// The frame checksum: the first 8 bytes of blake3 over the body and then
/// the header bytes before the checksum (length, count, watermark), so a
/// torn or flipped header is caught as well. The body comes first so that a
/// writer can hash it before it knows the watermark.
pub fn frame_checksum(header: &[u8], body: &[u8]) -> [u8; 8] {
    let mut h = blake3::Hasher::new();
    h.update(body);
    seal_checksum(h, header)
}

fn seal_checksum(mut body_hash: blake3::Hasher, header: &[u8]) -> [u8; 8] {
    body_hash.update(header);
    let mut out = [0u8; 8];
    out.copy_from_slice(&body_hash.finalize().as_bytes()[..8]);
    out
}

/// A frame whose body is laid out and hashed, waiting for its watermark.
struct PreparedFrame {
    bytes: Vec<u8>,
    body_hash: blake3::Hasher,
}

impl PreparedFrame {
    /// Fills in the header for watermark `synced`.
    fn seal(mut self, synced: u64) -> Vec<u8> {
        let body_len = (self.bytes.len() - FRAME_HEADER_LEN) as u32;
        self.bytes[8..16].copy_from_slice(&synced.to_le_bytes());
        self.bytes[0..4].copy_from_slice(&body_len.to_le_bytes());
        let sum = seal_checksum(self.body_hash, &self.bytes[..FRAME_CHECKSUM_AT]);
        self.bytes[FRAME_CHECKSUM_AT..FRAME_HEADER_LEN].copy_from_slice(&sum);
        self.bytes
    }
}

/// A complete frame (header and body) built from entries.
#[derive(Debug, Default)]
pub struct FrameBuilder {
    body: Vec<u8>,
    entries: u32,
    /// (id, offset of the entry payload within the body, payload length)
    objects: Vec<(ObjectId, usize, u32)>,
    /// (operation sequence number, offset of the entry payload, payload length)
    ops: Vec<(u64, usize, u32)>,
}

impl FrameBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an object entry, compressing the payload when that pays.
    pub fn push_object(&mut self, obj: &EncodedObject) {
        let payload = obj.payload();
        let compressed = if payload.len() >= COMPRESS_MIN {
            compress(payload).filter(|c| c.len() < payload.len())
        } else {
            None
        };
        let (codec, data) = match &compressed {
            Some(c) => (CODEC_ZSTD, c.as_slice()),
            None => (CODEC_RAW, payload),
        };
        let len = (OBJECT_ENTRY_FIXED + data.len()) as u32;
        self.body.push(ENTRY_OBJECT);
        self.body.extend_from_slice(&len.to_le_bytes());
        let at = self.body.len();
        self.body.push(obj.kind().code());
        self.body.push(codec);
        self.body.extend_from_slice(obj.id().as_bytes());
        self.body
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.body.extend_from_slice(data);
        self.entries += 1;
        self.objects.push((obj.id(), at, len));
    }

    /// Adds an operation entry: its sequence number and canonical bytes.
    pub fn push_op(&mut self, seq: u64, op: &[u8]) {
        let len = (8 + op.len()) as u32;
        self.body.push(ENTRY_OP);
        self.body.extend_from_slice(&len.to_le_bytes());
        self.ops.push((seq, self.body.len(), len));
        self.body.extend_from_slice(&seq.to_le_bytes());
        self.body.extend_from_slice(op);
        self.entries += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Number of objects in the frame.
    pub fn objects_len(&self) -> usize {
        self.objects.len()
    }

    pub fn body_len(&self) -> usize {
        self.body.len()
    }

    /// The frame's bytes.
    pub fn finish(&self) -> Vec<u8> {
        self.finish_synced(0)
    }

    /// The frame's bytes, recording that the segment was durable up to byte
    /// `synced` when the frame was appended (the sync watermark).
    pub fn finish_synced(&self, synced: u64) -> Vec<u8> {
        self.prepare().seal(synced)
    }

    fn prepare(&self) -> PreparedFrame {
        let mut bytes = Vec::with_capacity(FRAME_HEADER_LEN + self.body.len());
        bytes.extend_from_slice(&[0u8; 4]);
        bytes.extend_from_slice(&self.entries.to_le_bytes());
        bytes.extend_from_slice(&[0u8; 16]);
        bytes.extend_from_slice(&self.body);
        let mut body_hash = blake3::Hasher::new();
        body_hash.update(&self.body);
        PreparedFrame { bytes, body_hash }
    }
}

/// Why bytes at some offset are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than the header or the declared body.
    Truncated { declared_body: Option<usize> },
    /// The declared body is larger than any writer produces.
    TooLarge { declared_body: usize },
    /// Header and body do not match the checksum.
    BadChecksum { declared_body: usize },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Truncated {
                declared_body: None,
            } => write!(f, "frame header cut short"),
            FrameError::Truncated {
                declared_body: Some(n),
            } => write!(f, "frame of {n} bytes cut short"),
            FrameError::TooLarge { declared_body } => {
                write!(
                    f,
                    "frame claims {declared_body} bytes, more than any writer writes"
                )
            }
            FrameError::BadChecksum { declared_body } => {
                write!(f, "frame of {declared_body} bytes fails its checksum")
            }
        }
    }
}

/// A frame that passed its checksum.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub entry_count: u32,
    /// The segment was durable up to this byte when the frame was appended.
    pub synced: u64,
    pub body: &'a [u8],
}

impl Frame<'_> {
    /// Header plus body.
    pub fn total_len(&self) -> usize {
        FRAME_HEADER_LEN + self.body.len()
    }
}

/// Parses the frame that starts at `buf[0]`. Never panics.
pub fn parse_frame(buf: &[u8]) -> Result<Frame<'_>, FrameError> {
    if buf.len() < FRAME_HEADER_LEN {
        return Err(FrameError::Truncated {
            declared_body: None,
        });
    }
    let body_len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    let entry_count = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let synced = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
    if body_len > MAX_FRAME_BODY {
        return Err(FrameError::TooLarge {
            declared_body: body_len,
        });
    }
    let Some(body) = buf.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + body_len) else {
        return Err(FrameError::Truncated {
            declared_body: Some(body_len),
        });
    };
    if frame_checksum(&buf[..FRAME_CHECKSUM_AT], body) != buf[FRAME_CHECKSUM_AT..FRAME_HEADER_LEN] {
        return Err(FrameError::BadChecksum {
            declared_body: body_len,
        });
    }
    Ok(Frame {
        entry_count,
        synced,
        body,
    })
}

/// One entry of a frame body.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub entry_type: u8,
    /// Offset of the payload within the body.
    pub offset: usize,
    pub payload: &'a [u8],
}

/// Iterates a frame body's entries; yields an error and stops at the first
/// malformed one. Never panics.
pub fn entries(body: &[u8]) -> impl Iterator<Item = Result<Entry<'_>, String>> + '_ {
    let mut pos = 0usize;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || pos >= body.len() {
            return None;
        }
        let Some(head) = body.get(pos..pos + ENTRY_HEADER_LEN) else {
            failed = true;
            return Some(Err(format!("entry header at body offset {pos} cut short")));
        };
        let entry_type = head[0];
        let len = u32::from_le_bytes(head[1..5].try_into().expect("4 bytes")) as usize;
        let start = pos + ENTRY_HEADER_LEN;
        let Some(payload) = start.checked_add(len).and_then(|end| body.get(start..end)) else {
            failed = true;
            return Some(Err(format!(
                "entry at body offset {pos} claims {len} bytes past the frame's end"
            )));
        };
        pos = start + len;
        Some(Ok(Entry {
            entry_type,
            offset: start,
            payload,
        }))
    })
}

/// The parts of an object entry, not yet decompressed or verified.
#[derive(Debug, Clone, Copy)]
pub struct ObjectEntry<'a> {
    pub kind: ObjectKind,
    pub codec: u8,
    pub id: ObjectId,
    pub raw_len: u32,
    pub data: &'a [u8],
}

/// Splits an object entry's payload into its fields. Never panics.
pub fn parse_object_entry(payload: &[u8]) -> Result<ObjectEntry<'_>, String> {
    if payload.len() < OBJECT_ENTRY_FIXED {
        return Err(format!(
            "object entry of {} bytes is shorter than its {OBJECT_ENTRY_FIXED}-byte header",
            payload.len()
        ));
    }
    let kind = ObjectKind::from_code(payload[0])
        .ok_or_else(|| format!("unknown object kind code {}", payload[0]))?;
    let codec = payload[1];
    if codec != CODEC_RAW && codec != CODEC_ZSTD {
        return Err(format!("unknown codec {codec}"));
    }
    let id = ObjectId::from_slice(&payload[2..2 + ID_LEN]).expect("32 bytes");
    let raw_len = u32::from_le_bytes(
        payload[2 + ID_LEN..OBJECT_ENTRY_FIXED]
            .try_into()
            .expect("4 bytes"),
    );
    Ok(ObjectEntry {
        kind,
        codec,
        id,
        raw_len,
        data: &payload[OBJECT_ENTRY_FIXED..],
    })
}

impl<'a> ObjectEntry<'a> {
    /// Decompresses and re-hashes: the object, or why it is corrupt.
    pub fn to_object(&self) -> Result<EncodedObject, String> {
        let mut scratch = Vec::new();
        self.verified_payload(&mut scratch)?;
        let payload = match self.codec {
            CODEC_RAW => self.data.to_vec(),
            _ => scratch,
        };
        Ok(EncodedObject::from_verified(self.id, self.kind, payload))
    }

    /// The canonical payload, checked to hash to the entry's id: borrowed
    /// when it is stored raw, else inflated into `scratch` (its contents
    /// replaced). The reason when it is corrupt.
    pub fn verified_payload<'s>(&self, scratch: &'s mut Vec<u8>) -> Result<&'s [u8], String>
    where
        'a: 's,
    {
        let payload = match self.codec {
            CODEC_RAW => {
                if self.data.len() != self.raw_len as usize {
                    return Err(format!(
                        "stored length {} differs from the recorded {}",
                        self.data.len(),
                        self.raw_len
                    ));
                }
                self.data
            }
            _ => {
                let raw_len = self.raw_len as usize;
                check_frame_size(self.data, raw_len)?;
                if raw_len > MAX_OBJECT_SIZE {
                    // Refused before any of it is inflated or hashed.
                    return Err(format!(
                        "{raw_len} bytes is more than the {MAX_OBJECT_SIZE}-byte limit of an object"
                    ));
                }
                if raw_len > STREAM_VERIFY_ABOVE {
                    // Proven by its hash before it is held.
                    let mut frame = inflating(self.data, raw_len)?;
                    let actual = streamed_id(&mut frame, self.kind, raw_len)?;
                    if actual != self.id {
                        return Err(format!(
                            "content hashes to {actual} ({}, {raw_len} bytes), not to its id",
                            self.kind
                        ));
                    }
                }
                decompress_into(self.data, raw_len, scratch)?;
                &scratch[..]
            }
        };
        crate::object::verify_id(&self.id, self.kind, payload)?;
        Ok(payload)
    }
}

/// Compresses one payload with a per-thread context; `None` if zstd fails,
/// in which case the payload is stored raw.
fn compress(payload: &[u8]) -> Option<Vec<u8>> {
    thread_local! {
        static CCTX: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    CCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = zstd::bulk::Compressor::new(JOURNAL_ZSTD_LEVEL).ok();
        }
        slot.as_mut()?.compress(payload).ok()
    })
}

/// Above this many inflated bytes, what a zstd frame of outside bytes holds
/// is hashed as it streams before anything is inflated into memory, so that
/// a frame that lies costs 64 KiB, not its size (objects-format.md, "Reading
/// with bounded memory").
pub(crate) const STREAM_VERIFY_ABOVE: usize = 16 << 20;

/// Checks, before anything is inflated, that a zstd frame declares the
/// size its record gives.
pub(crate) fn check_frame_size(data: &[u8], raw_len: usize) -> Result<(), String> {
    match zstd::zstd_safe::get_frame_content_size(data) {
        Ok(Some(n)) if n == raw_len as u64 => {}
        Ok(Some(n)) => {
            return Err(format!(
                "zstd frame declares {n} bytes, the record says {raw_len}"
            ))
        }
        Ok(None) => return Err("zstd frame does not declare its size".into()),
        Err(_) => return Err("zstd frame header is damaged".into()),
    }
    Ok(())
}

/// A zstd frame that must declare `raw_len` bytes, inflated as a stream.
pub(crate) fn inflating(data: &[u8], raw_len: usize) -> Result<impl std::io::Read + '_, String> {
    check_frame_size(data, raw_len)?;
    zstd::stream::read::Decoder::with_buffer(data)
        .map(|d| d.single_frame())
        .map_err(|e| format!("zstd: {e}"))
}

/// The id of an object of `kind` whose `len`-byte payload comes next from
/// `src`, hashed 64 KiB at a time; the source must hold that many bytes.
pub(crate) fn streamed_id(
    src: &mut impl std::io::Read,
    kind: ObjectKind,
    len: usize,
) -> Result<ObjectId, String> {
    let mut hasher = crate::object::id_hasher(kind, len);
    let mut buf = vec![0u8; 64 * 1024];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len());
        src.read_exact(&mut buf[..n]).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                format!(
                    "inflates to {} bytes, fewer than the {len} recorded",
                    len - left
                )
            }
            _ => format!("zstd: {e}"),
        })?;
        hasher.update(&buf[..n]);
        left -= n;
    }
    Ok(ObjectId::from_bytes(*hasher.finalize().as_bytes()))
}

/// Decompresses one zstd frame of a known size into `out` (its contents
/// replaced, so that a reader going over many frames reuses one buffer),
/// reusing a per-thread context: creating one per object costs more than
/// the decompression. `out` holds exactly `raw_len` bytes on success.
///
/// The frame's own declared size must equal `raw_len` before anything is
/// allocated, so a damaged or forged length cannot make a reader reserve
/// gigabytes.
pub(crate) fn decompress_into(
    data: &[u8],
    raw_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    check_frame_size(data, raw_len)?;
    if raw_len > MAX_OBJECT_SIZE {
        return Err(format!(
            "{raw_len} bytes is more than the {MAX_OBJECT_SIZE}-byte limit of an object"
        ));
    }
    thread_local! {
        static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    out.clear();
    out.reserve_exact(raw_len);
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?);
        }
        let d = slot.as_mut().expect("set just above");
        d.decompress_to_buffer(data, out)
            .map_err(|e| format!("zstd: {e}"))
    })?;
    if out.len() != raw_len {
        return Err(format!(
            "decompressed to {} bytes, not the recorded {raw_len}",
            out.len()
        ));
    }
    Ok(())
}

/// Where an object entry's payload lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntryLoc {
    seq: u64,
    offset: u64,
    len: u32,
}

/// A batch read of journal entries reads runs of entries that lie this
/// close together in one `pread`, rather than one call each.
const READ_GAP: u64 = 64 << 10;
/// ... up to this many bytes a call (an entry larger than this is read on
/// its own).
const READ_WINDOW: u64 = 1 << 20;

/// A position in the journal: (segment, byte offset); ordered.
pub type Pos = (u64, u64);

/// Splits an operation entry's payload into its sequence number and bytes.
pub fn parse_op_entry(payload: &[u8]) -> Result<(u64, &[u8]), String> {
    if payload.len() < 8 {
        return Err(format!(
            "operation entry of {} bytes has no sequence number",
            payload.len()
        ));
    }
    let seq = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
    Ok((seq, &payload[8..]))
}

/// What this handle knows of the newest segment, the one appended to.
#[derive(Debug)]
struct Tail {
    /// `None` until the store has a segment (a fresh store before its first
    /// write).
    file: Option<Arc<File>>,
    seq: u64,
    /// Bytes of it read and indexed: the end of its last valid frame.
    len: u64,
    /// How far the journal is known durable: by this handle's own syncs
    /// (the one at open included), the watermarks of frames others wrote,
    /// and rotations (a segment is synced whole before the next is
    /// created).
    synced: Pos,
    syncing: bool,
    poisoned: Option<String>,
    /// The segment is of version 3: a writer keeps zeros written ahead of
    /// its frames.
    write_ahead: bool,
    /// The file's length as this handle last knew it (zeros written ahead
    /// included); a writer that needs more looks again before writing
    /// zeros.
    alloc: u64,
    /// The last scan stopped at bad bytes: the next one reads the rest of
    /// the file whole, and a header of zeros there is not trusted as the
    /// end without it.
    whole: bool,
}

/// Where a scan of a segment stopped.
#[derive(Debug, Clone, Copy)]
struct ScanEnd {
    /// The end of the last valid frame.
    end: u64,
    /// The highest sync watermark among the frames read.
    watermark: u64,
    /// The frames end at zeros written ahead (so no other process had
    /// sealed the segment when it was read: sealing cuts them off).
    zero_tail: bool,
    /// Bad bytes follow `end` (a write in progress, torn, or damage).
    bad: bool,
}

/// Who may cut a torn tail: only the holder of the store's write lock,
/// since anyone else may be looking at a frame still being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Read what is there; stop before a frame that does not parse yet.
    Read,
    /// The write lock is held: nothing is being written, so a bad tail is
    /// torn and is cut (set aside first).
    Repair,
}

/// The journal of one store, as one handle sees it.
///
/// Many processes append to the same files: each holds the store's write
/// lock for its append (see `DiskBackend`), and every handle catches up by
/// reading the frames appended since it last looked
/// ([`Journal::refresh`]), never by rescanning.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    read_only: bool,
    segment_target: u64,
    tail: Mutex<Tail>,
    synced_cv: Condvar,
    segments: RwLock<BTreeMap<u64, Arc<File>>>,
    objects: RwLock<HashMap<ObjectId, EntryLoc>>,
    /// Operation entries in journal order: (sequence number, where).
    ops: RwLock<Vec<(u64, EntryLoc)>>,
    /// Set once an operation is met whose sequence number is not above the
    /// one before it (only an edited or damaged store has one): lookups by
    /// sequence number then scan instead of bisecting.
    ops_unordered: AtomicBool,
    /// Segments holding damaged bytes: never retired, so nothing that could
    /// still be salvaged is deleted.
    damaged: Mutex<std::collections::BTreeSet<u64>>,
    notes: Mutex<Vec<String>>,
}

/// The file name of segment `seq`.
pub fn segment_name(seq: u64) -> String {
    format!("{seq:016}.journal")
}

/// The segment number a file name names, if it names one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".journal")?;
    (digits.len() == 16 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

fn segment_header(seq: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    segment_header_of(JOURNAL_FORMAT_VERSION, seq)
}

/// The header a version-2 segment starts with (read and appended to, never
/// created).
fn segment_header_v2(seq: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    segment_header_of(JOURNAL_FORMAT_V2, seq)
}

fn segment_header_of(version: u32, seq: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    h[..4].copy_from_slice(&SEGMENT_MAGIC);
    h[4..8].copy_from_slice(&version.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h
}

/// Whether a writer keeps zeros written ahead in this segment: only in a
/// segment of version 3 (a version-2 reader would take them for a torn
/// write).
fn writes_ahead(file: &File) -> bool {
    let mut v = [0u8; 4];
    matches!(file.read_at(&mut v, 4), Ok(4)) && u32::from_le_bytes(v) >= JOURNAL_FORMAT_VERSION
}

/// Fills `buf` from `file` at `at` as far as the file goes; returns how
/// many bytes were read.
fn read_up_to(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Where the frames of a segment end and its zeros written ahead begin:
/// 24 zero bytes where a frame header would be, and nothing but zeros from
/// there to the end of `buf`. A frame header is never all zeros (its body
/// is never empty).
fn zero_tail_at(buf: &[u8], pos: usize) -> bool {
    buf.len() >= pos + FRAME_HEADER_LEN && buf[pos..].iter().all(|b| *b == 0)
}

/// How much of a segment a catch-up reads at first: the frames appended
/// since it last looked, as far as they go before the zeros written ahead.
const CATCH_UP_WINDOW: usize = 64 << 10;

/// Reads `file` from `from` on as far as its frames go: stops at a header
/// of zeros (the space written ahead, which is not read) or the end of the
/// file, reading on past the window as long as a frame's declared length
/// asks for it. Bad bytes end the walk early; the caller reads the rest
/// whole ([`read_from`]) to judge them. Also says whether it stopped at
/// zeros written ahead.
fn read_frames_from(file: &File, from: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let mut buf = vec![0u8; CATCH_UP_WINDOW];
    let mut got = read_up_to(file, &mut buf, from)?;
    let mut pos = 0usize;
    loop {
        if pos + FRAME_HEADER_LEN > got {
            break;
        }
        let head = &buf[pos..pos + FRAME_HEADER_LEN];
        if head.iter().all(|b| *b == 0) {
            buf.truncate(pos);
            return Ok((buf, true));
        }
        let body = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
        if body > MAX_FRAME_BODY {
            break;
        }
        let end = pos + FRAME_HEADER_LEN + body;
        if end > got {
            if got < buf.len() {
                // The file ends inside the frame: a write in progress.
                break;
            }
            // Read on: the frame, and a window past it.
            let want = end + CATCH_UP_WINDOW;
            buf.resize(want, 0);
            got += read_up_to(file, &mut buf[got..], from + got as u64)?;
            if end > got {
                break;
            }
        }
        pos = end;
        if pos + FRAME_HEADER_LEN > got && got == buf.len() {
            buf.resize(got + CATCH_UP_WINDOW, 0);
            got += read_up_to(file, &mut buf[got..], from + got as u64)?;
        }
    }
    buf.truncate(got);
    Ok((buf, false))
}

pub(crate) use crate::odb::atomic_file::sync_dir;

/// The segment numbers in `dir`, ascending.
pub fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut seqs: Vec<u64> = Vec::new();
    for entry in fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        if let Some(seq) = entry.file_name().to_str().and_then(parse_segment_name) {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// Reads `file` from `from` to its end, as far as it goes now (a file
/// another process is cutting may end early).
fn read_from(file: &File, from: u64) -> std::io::Result<Vec<u8>> {
    let len = file.metadata()?.len();
    let mut buf = vec![0u8; len.saturating_sub(from) as usize];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], from + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

impl Journal {
    /// Opens the journal in `dir` and indexes what it holds. Nothing is cut
    /// or written here: another process may be appending, so an unreadable
    /// tail is left for the next holder of the write lock to judge. A
    /// handle that may write syncs the newest segment's frames it read
    /// (`sync_frames_read`).
    pub fn open(dir: &Path, read_only: bool, segment_target: u64) -> Result<Journal> {
        let journal = Journal {
            dir: dir.to_path_buf(),
            read_only,
            segment_target: segment_target.max(SEGMENT_HEADER_LEN + 1),
            tail: Mutex::new(Tail {
                file: None,
                seq: 0,
                len: SEGMENT_HEADER_LEN,
                synced: (0, 0),
                syncing: false,
                poisoned: None,
                write_ahead: false,
                alloc: 0,
                whole: false,
            }),
            synced_cv: Condvar::new(),
            segments: RwLock::new(BTreeMap::new()),
            objects: RwLock::new(HashMap::new()),
            ops: RwLock::new(Vec::new()),
            ops_unordered: AtomicBool::new(false),
            damaged: Mutex::new(Default::default()),
            notes: Mutex::new(Vec::new()),
        };
        let seqs = list_segments(dir)?;
        let mut st = journal.tail.lock().expect("journal tail lock");
        for (i, &seq) in seqs.iter().enumerate() {
            let file = match journal.open_segment(seq) {
                Ok(f) => f,
                // Packed and deleted since the listing: its objects are in a
                // pack now, its operations in the op log.
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    continue
                }
                Err(e) => return Err(e),
            };
            let is_last = i + 1 == seqs.len();
            if !is_last {
                journal.scan(seq, &file, SEGMENT_HEADER_LEN, false, Scan::Read, true)?;
                journal.segments_mut().insert(seq, file);
                continue;
            }
            // Read whole: bytes past a header of zeros are a torn write a
            // crash left (or damage), never the end of the frames.
            let end = journal.scan(seq, &file, SEGMENT_HEADER_LEN, true, Scan::Read, true)?;
            journal.segments_mut().insert(seq, file.clone());
            st.write_ahead = writes_ahead(&file);
            st.seq = seq;
            st.len = end.end;
            st.alloc = end.end;
            st.whole = end.bad;
            st.synced = (seq, end.watermark.max(SEGMENT_HEADER_LEN));
            if !read_only && end.end > st.synced.1 {
                journal.sync_frames_read(&mut st, &file, end.end);
            }
            st.file = Some(file);
        }
        drop(st);
        Ok(journal)
    }

    /// Makes the frames this handle read of the newest segment, up to
    /// `end`, durable with one `fdatasync`, so that the watermark of every
    /// frame it appends can claim them (objects-format.md, "Recovery").
    ///
    /// Without it, a handle's frames could claim only what its own syncs
    /// and others' watermarks prove, and a process that commits once and
    /// exits proves nothing to the next: in a segment written one commit a
    /// process, every frame would carry the segment's start as its
    /// watermark, and damage anywhere in it would pass for a torn write and
    /// be cut, with every acknowledged commit after it. Whoever wrote those
    /// frames, and whether or not they synced, a sync that starts after
    /// they were read and verified makes them durable as read: no claim
    /// rests on a process that may have died before its sync.
    ///
    /// At open, not under the write lock, which is never held across an
    /// `fdatasync`. When their writers synced (`Durability::Sync`) nothing
    /// is dirty and the call only flushes the disk's cache; frames a
    /// `NoSync` writer left dirty are written now, the price of vouching
    /// for them. A failed sync poisons the handle's writes, as any failed
    /// sync does.
    fn sync_frames_read(&self, st: &mut Tail, file: &File, end: u64) {
        match file.sync_data() {
            Ok(()) => st.synced = st.synced.max((st.seq, end)),
            Err(e) => st.poisoned = Some(format!("{}: {e}", self.segment_path(st.seq).display())),
        }
    }

    fn segments_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<u64, Arc<File>>> {
        self.segments.write().expect("segment map lock")
    }

    fn open_segment(&self, seq: u64) -> Result<Arc<File>> {
        let path = self.segment_path(seq);
        let file = OpenOptions::new()
            .read(true)
            .write(!self.read_only)
            .open(&path)
            .at(&path)?;
        Ok(Arc::new(file))
    }

    fn segment_path(&self, seq: u64) -> PathBuf {
        self.dir.join(segment_name(seq))
    }

    fn note(&self, line: String) {
        self.notes.lock().expect("notes lock").push(line);
    }

    /// What recovery did or found (torn tails cut, damaged frames).
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().expect("notes lock"))
    }

    /// Reads, verifies and indexes segment `seq` from byte `from` on;
    /// returns the end of its last valid frame and the highest sync
    /// watermark among the frames read. `is_last`: it is the newest
    /// segment, where a bad frame may be a write in progress or a torn one.
    /// `whole`: read to the end of the file, zeros written ahead included,
    /// so that bytes after a header of zeros are seen (an open, or a tail
    /// that stopped at bad bytes before); else only as far as the frames go.
    fn scan(
        &self,
        seq: u64,
        file: &File,
        from: u64,
        is_last: bool,
        mode: Scan,
        whole: bool,
    ) -> Result<ScanEnd> {
        let path = self.segment_path(seq);
        if from < SEGMENT_HEADER_LEN {
            return Err(Error::CorruptFile {
                path,
                offset: from,
                reason: "scan starts inside the segment header".into(),
            });
        }
        if from == SEGMENT_HEADER_LEN && !self.check_header(seq, file, is_last, mode)? {
            // A header still being written: nothing to read yet.
            return Ok(ScanEnd {
                end: SEGMENT_HEADER_LEN,
                watermark: 0,
                zero_tail: false,
                bad: false,
            });
        }
        let (mut buf, window_zero) = if whole {
            (read_from(file, from).at(&path)?, false)
        } else {
            read_frames_from(file, from).at(&path)?
        };
        let mut windowed = !whole;
        let mut base = from;
        let mut zero_tail = false;
        let mut bad = false;
        let mut pos = 0usize;
        let mut watermark = 0u64;
        let mut objects = self.objects.write().expect("object map lock");
        let mut ops = self.ops.write().expect("op list lock");
        let ops_before = ops.len();
        let ordered = |ops: &[(u64, EntryLoc)]| {
            ops[ops_before.saturating_sub(1)..]
                .windows(2)
                .all(|w| w[0].0 < w[1].0)
        };
        while pos < buf.len() {
            let at = base + pos as u64;
            let err = match parse_frame(&buf[pos..]) {
                Ok(frame) => {
                    index_frame(
                        &mut objects,
                        Some(&mut ops),
                        seq,
                        at + FRAME_HEADER_LEN as u64,
                        frame.body,
                    );
                    watermark = watermark.max(frame.synced);
                    pos += frame.total_len();
                    continue;
                }
                Err(err) => err,
            };
            // Fewer zeros than a frame header, up to the end of the file,
            // are zeros written ahead too: a frame can end a few bytes
            // before the space written ahead does. (In a window, what
            // follows is judged against the rest of the file, below.)
            if zero_tail_at(&buf, pos) || (!windowed && buf[pos..].iter().all(|b| *b == 0)) {
                // The zeros written ahead: the end of the frames.
                zero_tail = true;
                break;
            }
            if windowed {
                // Bad bytes are judged against the rest of the file.
                buf = read_from(file, at).at(&path)?;
                (base, pos, windowed) = (at, 0, false);
                continue;
            }
            // Where does readable history resume, and were the bad bytes
            // ever durable? A sealed segment was synced whole before the
            // next was started, so a bad frame there is damage. In the
            // newest segment it is damage only if a later frame's sync
            // watermark passes its start (a sync completed after it was
            // written); otherwise it is a write in progress or a torn write
            // that no one was told had landed, and a later frame may build
            // on it, so from it on is cut (by the write lock's holder only).
            let next = first_frame_after(&buf, pos, base);
            let damaged = match next {
                Some(n) => !is_last || durable_evidence(&buf, n, at, base),
                None => false,
            };
            if let (true, Some(next)) = (damaged, next) {
                if self.damaged.lock().expect("damage lock").insert(seq) || mode == Scan::Repair {
                    self.note(format!(
                        "{}: {err} at byte {at}: bytes {at}..{} are damaged; the objects there are verified one by one when read, the operations skipped; fsck lists what is affected",
                        path.display(),
                        base + next as u64
                    ));
                }
                // The damaged frame's objects, when its length still leads
                // to the next frame. An operation cannot be verified on its
                // own, so none is replayed.
                if let FrameError::BadChecksum { declared_body } = err {
                    if pos + FRAME_HEADER_LEN + declared_body == next {
                        index_frame(
                            &mut objects,
                            None,
                            seq,
                            at + FRAME_HEADER_LEN as u64,
                            &buf[pos + FRAME_HEADER_LEN..next],
                        );
                    }
                }
                pos = next;
                continue;
            }
            bad = true;
            let rest = &buf[pos..];
            let rest = &rest[..rest.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1)];
            let lost = rest.len();
            if !is_last {
                if self.damaged.lock().expect("damage lock").insert(seq) {
                    self.note(format!(
                        "{}: {err} at byte {at}: {lost} bytes of a sealed segment are damaged and unreadable; fsck lists what is affected",
                        path.display()
                    ));
                }
            } else if mode == Scan::Repair && !self.read_only {
                let kept = self.set_aside_tail(seq, at, rest)?;
                file.set_len(at).at(&path)?;
                file.sync_all().at(&path)?;
                self.note(format!(
                    "{}: {err} at byte {at}: torn write, cut the last {lost} bytes (kept in {})",
                    path.display(),
                    kept.display()
                ));
            }
            break;
        }
        if !ordered(&ops) {
            self.ops_unordered.store(true, AtomicOrdering::Relaxed);
        }
        if windowed && pos == buf.len() {
            // The window stopped where the frames stop.
            zero_tail = window_zero;
        }
        Ok(ScanEnd {
            end: base + pos as u64,
            watermark,
            zero_tail,
            bad,
        })
    }

    /// Checks a segment's header; false when it is still being written
    /// (shorter than a header, and what is there agrees), which the write
    /// lock's holder completes.
    fn check_header(&self, seq: u64, file: &File, is_last: bool, mode: Scan) -> Result<bool> {
        let path = self.segment_path(seq);
        let header = segment_header(seq);
        let mut buf = [0u8; SEGMENT_HEADER_LEN as usize];
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], got as u64).at(&path)? {
                0 => break,
                n => got += n,
            }
        }
        if got < buf.len() {
            // A segment whose header never reached the disk holds nothing.
            if is_last && header.starts_with(&buf[..got]) {
                if mode == Scan::Repair && !self.read_only {
                    file.write_all_at(&header, 0).at(&path)?;
                    file.set_len(header.len() as u64).at(&path)?;
                    file.sync_all().at(&path)?;
                    return Ok(true);
                }
                return Ok(false);
            }
            return Err(Error::CorruptFile {
                path,
                offset: 0,
                reason: "segment header cut short".into(),
            });
        }
        if buf != header && buf != segment_header_v2(seq) {
            return Err(Error::CorruptFile {
                path,
                offset: 0,
                reason: format!(
                    "not a version-{JOURNAL_FORMAT_V2} or {JOURNAL_FORMAT_VERSION} journal segment numbered {seq}"
                ),
            });
        }
        Ok(true)
    }

    /// Catches up with what other processes appended since this handle
    /// last looked: the new frames of the newest segment, and the segments
    /// started since. O(new bytes); never a rescan.
    pub fn refresh(&self) -> Result<()> {
        let mut st = self.tail.lock().expect("journal tail lock");
        self.refresh_tail(&mut st, Scan::Read)
    }

    /// As [`Journal::refresh`], for the holder of the store's write lock:
    /// a torn tail is cut, and a store without a segment gets its first.
    /// Returns with the tail ready to append to.
    fn refresh_locked(&self, st: &mut Tail) -> Result<()> {
        self.refresh_tail(st, Scan::Repair)?;
        if st.file.is_none() {
            let (file, len) = self.create_segment(1)?;
            st.file = Some(file);
            st.seq = 1;
            st.len = len;
            st.alloc = len;
            st.write_ahead = true;
            st.whole = false;
            st.synced = (1, len);
        }
        Ok(())
    }

    /// [`Journal::refresh`] for the holder of the write lock (a torn tail
    /// is cut).
    pub fn refresh_locked_now(&self, _write_lock: &LockGuard<'_>) -> Result<()> {
        let mut st = self.tail()?;
        self.refresh_locked(&mut st)
    }

    fn refresh_tail(&self, st: &mut Tail, mode: Scan) -> Result<()> {
        loop {
            if let Some(file) = st.file.clone() {
                let path = self.segment_path(st.seq);
                if !st.whole {
                    // Where the next frame would go: zeros written ahead
                    // say that nothing is new and that the segment is
                    // still the newest (sealing cuts them off before the
                    // next segment is made), for one read, without a stat
                    // or a look for a successor.
                    let mut head = [0u8; FRAME_HEADER_LEN];
                    let n = read_up_to(&file, &mut head, st.len).at(&path)?;
                    if n == FRAME_HEADER_LEN && head == [0u8; FRAME_HEADER_LEN] {
                        return Ok(());
                    }
                    if n > 0 {
                        let end = self.scan(st.seq, &file, st.len, true, mode, false)?;
                        Self::advance(st, end);
                        if end.zero_tail {
                            return Ok(());
                        }
                    }
                } else {
                    let on_disk = file.metadata().at(&path)?.len();
                    // Grown (appended by others), or shorter (a torn tail
                    // cut by the lock's holder: nothing past our end was
                    // indexed, since a torn frame never parses).
                    if on_disk > st.len || (on_disk != st.len && mode == Scan::Repair) {
                        let end = self.scan(st.seq, &file, st.len, true, mode, true)?;
                        Self::advance(st, end);
                        if end.zero_tail {
                            return Ok(());
                        }
                    }
                }
            }
            // Has the newest segment been sealed? Then the next exists.
            let next = st.seq + 1;
            let file = match self.open_segment(next) {
                Ok(f) => f,
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    // Ours may still not be the newest: while this handle
                    // looked elsewhere, it may have been sealed and packed
                    // away, and its successors too; then its descriptor
                    // reads a file no longer linked, and a listing finds the
                    // newest. A linked segment without a successor by name
                    // is the newest: segments are only ever retired as a
                    // prefix of those present (`retire`).
                    let retired = match &st.file {
                        Some(f) => f.metadata().at(&self.segment_path(st.seq))?.nlink() == 0,
                        None => true,
                    };
                    if !retired {
                        return Ok(());
                    }
                    let Some(later) = list_segments(&self.dir)?.into_iter().find(|s| *s > st.seq)
                    else {
                        return Ok(());
                    };
                    // What is left of ours was written before its successor
                    // was created: read it, through the descriptor, as sealed.
                    if let Some(old) = st.file.clone() {
                        let end = self.scan(st.seq, &old, st.len, false, Scan::Read, true)?;
                        st.len = end.end;
                        st.synced = st.synced.max((st.seq, end.end));
                    }
                    // Segments gone from the directory are in a pack now,
                    // their operations in the op log.
                    self.forget_gone_below(later)?;
                    match self.open_segment(later) {
                        Ok(file) => self.adopt(st, later, file, mode)?,
                        // Packed in turn since the listing: look again.
                        Err(Error::Io { source, .. })
                            if source.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            // The old newest segment was synced whole before its successor
            // was created: read what is left of it as a sealed one.
            if let Some(old) = st.file.clone() {
                let end = self.scan(st.seq, &old, st.len, false, Scan::Read, true)?;
                st.len = end.end;
                st.synced = st.synced.max((st.seq, end.end));
            }
            self.adopt(st, next, file, mode)?;
        }
    }

    /// Makes segment `seq` the newest this handle knows and indexes it.
    fn adopt(&self, st: &mut Tail, seq: u64, file: Arc<File>, mode: Scan) -> Result<()> {
        self.segments_mut().insert(seq, file.clone());
        let end = self.scan(seq, &file, SEGMENT_HEADER_LEN, true, mode, false)?;
        st.write_ahead = writes_ahead(&file);
        st.file = Some(file);
        st.seq = seq;
        st.len = end.end;
        st.alloc = end.end;
        st.whole = end.bad;
        st.synced = st.synced.max((seq, end.watermark.max(SEGMENT_HEADER_LEN)));
        Ok(())
    }

    /// Takes what a scan of the newest segment found.
    fn advance(st: &mut Tail, end: ScanEnd) {
        st.len = end.end;
        st.alloc = st.alloc.max(end.end);
        st.whole = end.bad;
        st.synced = st.synced.max((st.seq, end.watermark));
    }

    /// Forgets segments that are gone from the directory (packed by another
    /// process; their objects are in a pack, their operations in the op
    /// log). Call after the pack list is fresh.
    pub fn forget_missing(&self) -> Result<()> {
        let newest = self.tail.lock().expect("journal tail lock").seq;
        self.forget_gone_below(newest)
    }

    /// [`Journal::forget_missing`] for segments below `newest`, for a
    /// caller that holds the tail's lock.
    fn forget_gone_below(&self, newest: u64) -> Result<()> {
        let present: std::collections::BTreeSet<u64> =
            list_segments(&self.dir)?.into_iter().collect();
        let gone: Vec<u64> = self
            .segments
            .read()
            .expect("segment map lock")
            .keys()
            .copied()
            .filter(|s| *s < newest && !present.contains(s))
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        self.forget(&gone);
        Ok(())
    }

    fn forget(&self, seqs: &[u64]) {
        self.objects
            .write()
            .expect("object map lock")
            .retain(|_, l| !seqs.contains(&l.seq));
        self.ops
            .write()
            .expect("op list lock")
            .retain(|(_, l)| !seqs.contains(&l.seq));
        let mut segments = self.segments_mut();
        for seq in seqs {
            segments.remove(seq);
        }
    }

    /// Saves an unreadable tail before it is cut, so that nothing is ever
    /// deleted on a guess.
    fn set_aside_tail(&self, seq: u64, offset: u64, bytes: &[u8]) -> Result<PathBuf> {
        let path = self.dir.join(format!("torn-{seq:016}-{offset}.bin"));
        fs::write(&path, bytes).at(&path)?;
        File::open(&path).and_then(|f| f.sync_all()).at(&path)?;
        sync_dir(&self.dir)?;
        Ok(path)
    }

    /// Creates segment `seq` with its header, atomically: the header is
    /// written and synced under a temporary name, then linked to the
    /// segment's name (which fails if it exists), so no process ever sees
    /// a segment without its header.
    fn create_segment(&self, seq: u64) -> Result<(Arc<File>, u64)> {
        let path = self.segment_path(seq);
        let tmp = self
            .dir
            .join(format!(".tmp-{}-{seq:016}", std::process::id()));
        let made = (|| -> Result<()> {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)
                .at(&tmp)?;
            file.write_all_at(&segment_header(seq), 0).at(&tmp)?;
            file.sync_all().at(&tmp)?;
            match fs::hard_link(&tmp, &path) {
                Ok(()) => Ok(()),
                // A file system without hard links: segments are created
                // under the write lock only, so a rename after a look is as
                // exclusive.
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported && !path.exists() => {
                    fs::rename(&tmp, &path).at(&path)
                }
                Err(e) => Err(Error::io(&path, e)),
            }
        })();
        let _ = fs::remove_file(&tmp);
        made?;
        sync_dir(&self.dir)?;
        let file = self.open_segment(seq)?;
        self.segments_mut().insert(seq, file.clone());
        Ok((file, SEGMENT_HEADER_LEN))
    }

    fn tail(&self) -> Result<MutexGuard<'_, Tail>> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let st = self.tail.lock().expect("journal tail lock");
        if let Some(p) = &st.poisoned {
            return Err(Error::Poisoned(p.clone()));
        }
        Ok(st)
    }

    /// Seals the newest segment (synced) and starts the next one.
    fn rotate(&self, st: &mut Tail) -> Result<()> {
        let old = self.segment_path(st.seq);
        if let Some(file) = &st.file {
            // A sealed segment ends with its last frame: the zeros written
            // ahead go first, so that a reader that finds them knows the
            // segment is still the newest.
            if st.write_ahead {
                file.set_len(st.len).at(&old)?;
            }
            file.sync_data().map_err(|e| {
                st.poisoned = Some(format!("{}: {e}", old.display()));
                Error::io(&old, e)
            })?;
        }
        st.synced = st.synced.max((st.seq, st.len));
        let (file, len) = self.create_segment(st.seq + 1)?;
        st.seq += 1;
        st.file = Some(file);
        st.len = len;
        st.alloc = len;
        st.write_ahead = true;
        st.whole = false;
        Ok(())
    }

    /// Seals the newest segment so that everything written so far sits in
    /// sealed segments; returns the sequence numbers of all sealed
    /// segments. The caller holds the store's write lock.
    pub fn seal(&self, _write_lock: &LockGuard<'_>) -> Result<Vec<u64>> {
        // A segment header a writer that died was creating: only the write
        // lock's holder creates one, and it is held.
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(".tmp-") {
                let _ = fs::remove_file(entry.path());
            }
        }
        let mut st = self.tail()?;
        self.refresh_locked(&mut st)?;
        if st.len > SEGMENT_HEADER_LEN {
            self.rotate(&mut st)?;
        }
        let current = st.seq;
        drop(st);
        Ok(self
            .segments
            .read()
            .expect("segment map lock")
            .keys()
            .copied()
            .filter(|&s| s < current)
            .collect())
    }

    /// Segments sealed by rotation, without damage: what an incremental
    /// pack takes. None for a read-only journal.
    pub fn sealed_segments(&self) -> Vec<u64> {
        if self.read_only {
            return Vec::new();
        }
        let current = self.tail.lock().expect("journal tail lock").seq;
        // Below the first damaged one only: that one stays, and so must
        // every later one (see `retire`), so packing them would only pack
        // them again at every write.
        let below = self
            .damaged
            .lock()
            .expect("damage lock")
            .first()
            .copied()
            .unwrap_or(u64::MAX)
            .min(current);
        self.segments
            .read()
            .expect("segment map lock")
            .keys()
            .copied()
            .filter(|s| *s < below)
            .collect()
    }

    /// Waits until an `fdatasync` covers everything this handle has read or
    /// written.
    pub fn sync_all(&self) -> Result<()> {
        let st = self.tail()?;
        let end = (st.seq, st.len);
        self.wait_synced(st, end)
    }

    /// Waits until an `fdatasync` covers everything up to `end` (group
    /// commit within this process).
    pub fn sync_to(&self, end: Pos) -> Result<()> {
        let st = self.tail()?;
        self.wait_synced(st, end)
    }

    /// Appends one frame without waiting for the disk; returns the position
    /// its end must be synced to. The caller holds the store's write lock
    /// (which is what makes this handle's view of the tail the file's
    /// end). Its objects and operations are visible to this handle at once.
    pub fn append_locked(&self, frame: &FrameBuilder, _write_lock: &LockGuard<'_>) -> Result<Pos> {
        if frame.body_len() > MAX_FRAME_BODY {
            return Err(OdbError::BatchTooLarge {
                size: frame.body_len() as u64,
                limit: MAX_FRAME_BODY as u64,
            }
            .into());
        }
        let prepared = (!frame.is_empty()).then(|| frame.prepare());
        let mut st = self.tail()?;
        self.refresh_locked(&mut st)?;
        let Some(prepared) = prepared else {
            return Ok((st.seq, st.len));
        };
        let frame_len = (FRAME_HEADER_LEN + frame.body_len()) as u64;
        if st.len + frame_len > self.segment_target && st.len > SEGMENT_HEADER_LEN {
            self.rotate(&mut st)?;
        }
        // The watermark: how far this segment is known durable right now.
        let synced = if st.synced.0 == st.seq {
            st.synced.1
        } else {
            SEGMENT_HEADER_LEN
        };
        let mut bytes = prepared.seal(synced);
        let frame_len = bytes.len() as u64;
        let at = st.len;
        let file = st.file.clone().expect("refresh_locked leaves a segment");
        if st.write_ahead && at + frame_len > st.alloc {
            // Another process may have written zeros ahead since.
            st.alloc = file.metadata().at(&self.segment_path(st.seq))?.len();
            if at + frame_len > st.alloc {
                // Zeros after the frame, in the same write: the size
                // changes now, and not at the next appends' syncs.
                let ahead = (at + frame_len + WRITE_AHEAD)
                    .min(self.segment_target.max(at + frame_len))
                    .next_multiple_of(4096);
                bytes.resize((ahead - at) as usize, 0);
            }
        }
        if let Err(e) = file.write_all_at(&bytes, at) {
            // Cut whatever part landed, so the next frame starts clean.
            let _ = file.set_len(at);
            st.alloc = at;
            return Err(Error::io(self.segment_path(st.seq), e));
        }
        st.alloc = st.alloc.max(at + bytes.len() as u64);
        st.len += frame_len;
        let end = (st.seq, st.len);
        {
            let body_at = at + FRAME_HEADER_LEN as u64;
            let mut objects = self.objects.write().expect("object map lock");
            // The newest copy wins: an older one goes first, with its
            // segment (gc writes an object it rescues again).
            for &(id, off, len) in &frame.objects {
                objects.insert(
                    id,
                    EntryLoc {
                        seq: st.seq,
                        offset: body_at + off as u64,
                        len,
                    },
                );
            }
            drop(objects);
            let mut ops = self.ops.write().expect("op list lock");
            for &(op_seq, off, len) in &frame.ops {
                if ops.last().is_some_and(|l| l.0 >= op_seq) {
                    self.ops_unordered.store(true, AtomicOrdering::Relaxed);
                }
                ops.push((
                    op_seq,
                    EntryLoc {
                        seq: st.seq,
                        offset: body_at + off as u64,
                        len,
                    },
                ));
            }
        }
        Ok(end)
    }

    /// The payloads of the operations with a sequence number above `after`,
    /// in journal order: (sequence number, canonical bytes).
    pub fn ops_after(&self, after: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let locs: Vec<(u64, EntryLoc)> = {
            let ops = self.ops.read().expect("op list lock");
            // Appended under the write lock, one after the other: in
            // sequence order, so the tail is found by bisection (a catch-up
            // with nothing new costs no scan of the journal's operations).
            let from = if self.ops_unordered.load(AtomicOrdering::Relaxed) {
                0
            } else {
                ops.partition_point(|(s, _)| *s <= after)
            };
            ops[from..]
                .iter()
                .filter(|(s, _)| *s > after)
                .copied()
                .collect()
        };
        self.read_ops(&locs)
    }

    /// The operations held in the given segments, in journal order.
    pub fn ops_in(&self, seqs: &[u64]) -> Result<Vec<(u64, Vec<u8>)>> {
        let locs: Vec<(u64, EntryLoc)> = self
            .ops
            .read()
            .expect("op list lock")
            .iter()
            .filter(|(_, l)| seqs.contains(&l.seq))
            .copied()
            .collect();
        self.read_ops(&locs)
    }

    /// Operation `seq`'s bytes, if the journal holds it.
    pub fn op(&self, seq: u64) -> Result<Option<Vec<u8>>> {
        let loc = self
            .ops
            .read()
            .expect("op list lock")
            .iter()
            .rev()
            .find(|(s, _)| *s == seq)
            .copied();
        match loc {
            Some(l) => Ok(self.read_ops(&[l])?.pop().map(|(_, b)| b)),
            None => Ok(None),
        }
    }

    /// The lowest and highest operation sequence numbers in the journal.
    pub fn op_range(&self) -> Option<(u64, u64)> {
        let ops = self.ops.read().expect("op list lock");
        Some((ops.first()?.0, ops.last()?.0))
    }

    fn read_ops(&self, locs: &[(u64, EntryLoc)]) -> Result<Vec<(u64, Vec<u8>)>> {
        let segments = self.segments.read().expect("segment map lock");
        let mut out = Vec::with_capacity(locs.len());
        for (op_seq, loc) in locs {
            let path = self.segment_path(loc.seq);
            let file = segments.get(&loc.seq).ok_or_else(|| Error::CorruptFile {
                path: path.clone(),
                offset: loc.offset,
                reason: "segment vanished".into(),
            })?;
            let mut buf = vec![0u8; loc.len as usize];
            file.read_exact_at(&mut buf, loc.offset).at(&path)?;
            let (_, op) = parse_op_entry(&buf).map_err(|reason| Error::CorruptFile {
                path: path.clone(),
                offset: loc.offset,
                reason,
            })?;
            out.push((*op_seq, op.to_vec()));
        }
        Ok(out)
    }

    /// Group commit: become the leader and sync, or wait for the leader.
    fn wait_synced<'a>(&'a self, mut st: MutexGuard<'a, Tail>, end: Pos) -> Result<()> {
        loop {
            if st.synced >= end {
                return Ok(());
            }
            if let Some(p) = &st.poisoned {
                return Err(Error::Poisoned(p.clone()));
            }
            if st.syncing {
                st = self.synced_cv.wait(st).expect("journal tail lock");
                continue;
            }
            if st.seq > end.0 {
                // Sealed since: rotation synced it whole (this handle's or
                // another process's, which syncs before it creates the next).
                st.synced = st.synced.max(end);
                continue;
            }
            st.syncing = true;
            let target = (st.seq, st.len);
            let Some(file) = st.file.clone() else {
                st.syncing = false;
                return Ok(());
            };
            drop(st);
            let result = file.sync_data();
            st = self.tail.lock().expect("journal tail lock");
            st.syncing = false;
            match result {
                Ok(()) => st.synced = st.synced.max(target),
                // After a failed fdatasync the kernel may have dropped the
                // dirty pages: nothing written since the last good sync can
                // be trusted, so stop accepting writes (PostgreSQL's lesson).
                Err(e) => {
                    st.poisoned = Some(format!("{}: {e}", self.segment_path(target.0).display()))
                }
            }
            self.synced_cv.notify_all();
        }
    }

    /// Reads and verifies an object held in the journal.
    pub fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>> {
        let Some(loc) = self.locate(id) else {
            return Ok(None);
        };
        let file = self
            .segments
            .read()
            .expect("segment map lock")
            .get(&loc.seq)
            .cloned();
        let Some(file) = file else {
            return Ok(None);
        };
        let mut buf = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut buf, loc.offset)
            .map_err(|e| read_error(id, loc, e))?;
        let entry = checked_entry(id, loc, &buf)?;
        entry.to_object().map(Some).map_err(|r| {
            Error::corrupt(
                *id,
                format!("in journal segment {}: {r}", segment_name(loc.seq)),
            )
        })
    }

    /// Where the journal holds `id`, if it does.
    pub(crate) fn locate(&self, id: &ObjectId) -> Option<EntryLoc> {
        self.objects
            .read()
            .expect("object map lock")
            .get(id)
            .copied()
    }

    /// Reads and verifies the entries `wanted` names (each with its
    /// position in `ids`, the ids they must hold), handing each to `visit`
    /// with that position. Goes in journal order, reading entries that lie
    /// close together with one `pread`. Returns the positions whose segment
    /// this handle no longer has (packed away meanwhile), for the caller to
    /// look for elsewhere.
    pub(crate) fn read_records(
        &self,
        wanted: &mut [(EntryLoc, usize)],
        ids: &[ObjectId],
        visit: &mut super::Visit<'_>,
    ) -> Result<Vec<usize>> {
        wanted.sort_unstable_by_key(|(l, i)| (l.seq, l.offset, *i));
        let mut gone = Vec::new();
        let mut window: Vec<u8> = Vec::new();
        let mut scratch = Vec::new();
        let mut k = 0;
        while k < wanted.len() {
            let (first, _) = wanted[k];
            let start = first.offset;
            let mut end = start + u64::from(first.len);
            let mut j = k + 1;
            while let Some((l, _)) = wanted.get(j) {
                let l_end = l.offset + u64::from(l.len);
                if l.seq != first.seq || l.offset > end + READ_GAP || l_end - start > READ_WINDOW {
                    break;
                }
                end = end.max(l_end);
                j += 1;
            }
            let run = &wanted[k..j];
            k = j;
            let file = self
                .segments
                .read()
                .expect("segment map lock")
                .get(&first.seq)
                .cloned();
            let Some(file) = file else {
                gone.extend(run.iter().map(|(_, i)| *i));
                continue;
            };
            window.clear();
            window.resize((end - start) as usize, 0);
            if file.read_exact_at(&mut window, start).is_ok() {
                for &(loc, i) in run {
                    let at = (loc.offset - start) as usize;
                    let bytes = &window[at..at + loc.len as usize];
                    let (kind, payload) = verified_entry(&ids[i], loc, bytes, &mut scratch)?;
                    visit(i, kind, payload)?;
                }
                continue;
            }
            // The run did not read whole: entry by entry, so that the
            // error names the object it cuts into.
            for &(loc, i) in run {
                let id = &ids[i];
                let mut bytes = vec![0u8; loc.len as usize];
                file.read_exact_at(&mut bytes, loc.offset)
                    .map_err(|e| read_error(id, loc, e))?;
                let (kind, payload) = verified_entry(id, loc, &bytes, &mut scratch)?;
                visit(i, kind, payload)?;
            }
        }
        Ok(gone)
    }

    pub fn contains(&self, id: &ObjectId) -> bool {
        self.objects
            .read()
            .expect("object map lock")
            .contains_key(id)
    }

    /// Ids held in the journal that start with `prefix`.
    pub fn ids_with_prefix(&self, prefix: &Prefix, out: &mut Vec<ObjectId>) {
        let objects = self.objects.read().expect("object map lock");
        if let Some(id) = prefix.as_full_id() {
            if objects.contains_key(&id) {
                out.push(id);
            }
            return;
        }
        out.extend(objects.keys().filter(|id| prefix.matches(id)).copied());
    }

    /// Every object id held in the journal.
    pub fn ids(&self) -> Vec<ObjectId> {
        self.objects
            .read()
            .expect("object map lock")
            .keys()
            .copied()
            .collect()
    }

    /// Every object id with the segment that holds it.
    pub fn ids_with_segments(&self) -> Vec<(ObjectId, u64)> {
        self.objects
            .read()
            .expect("object map lock")
            .iter()
            .map(|(id, l)| (*id, l.seq))
            .collect()
    }

    /// Object ids held in the given segments, in journal order.
    pub fn ids_in(&self, seqs: &[u64]) -> Vec<ObjectId> {
        let objects = self.objects.read().expect("object map lock");
        let mut v: Vec<(EntryLoc, ObjectId)> = objects
            .iter()
            .filter(|(_, l)| seqs.contains(&l.seq))
            .map(|(id, l)| (*l, *id))
            .collect();
        v.sort_unstable_by_key(|(l, _)| (l.seq, l.offset));
        v.into_iter().map(|(_, id)| id).collect()
    }

    /// Forgets and deletes sealed segments whose objects are now in a pack.
    /// A segment with damaged bytes is kept (its objects are in the pack
    /// too; the duplicates are harmless). Other processes that still read
    /// them keep their open descriptors (unlinking does not take a file
    /// from under a reader on Linux).
    pub fn retire(&self, seqs: &[u64]) -> Result<()> {
        let damaged = self.damaged.lock().expect("damage lock").clone();
        // Only a prefix of the segments present goes: what is left is then
        // always a run of consecutive numbers up to the newest, so a handle
        // whose segment is still linked and has no successor by name knows
        // it holds the newest without listing the directory.
        let present = list_segments(&self.dir)?;
        let seqs: Vec<u64> = present
            .iter()
            .copied()
            .take_while(|s| seqs.contains(s) && !damaged.contains(s))
            .collect();
        if seqs.contains(&self.tail.lock().expect("journal tail lock").seq) {
            return Err(OdbError::ActiveSegment.into());
        }
        self.forget(&seqs);
        for seq in &seqs {
            let path = self.segment_path(*seq);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
        sync_dir(&self.dir)
    }

    /// Bytes of journal segments on disk, up to the end of the newest
    /// one's frames (the zeros written ahead after them hold nothing).
    pub fn disk_bytes(&self) -> u64 {
        let (tail, len) = {
            let st = self.tail.lock().expect("journal tail lock");
            (st.seq, st.len)
        };
        self.segments
            .read()
            .expect("segment map lock")
            .iter()
            .filter_map(|(seq, f)| Some((*seq, f.metadata().ok()?)))
            .filter(|(_, m)| m.nlink() > 0)
            .map(|(seq, m)| {
                if seq == tail {
                    m.len().min(len)
                } else {
                    m.len()
                }
            })
            .sum()
    }

    /// Number of objects the journal holds.
    pub fn object_count(&self) -> usize {
        self.objects.read().expect("object map lock").len()
    }
}

/// A failed read of the entry at `loc`, which should hold `id`.
fn read_error(id: &ObjectId, loc: EntryLoc, e: std::io::Error) -> Error {
    Error::corrupt(
        *id,
        format!(
            "journal segment {} at byte {}: {e}",
            segment_name(loc.seq),
            loc.offset
        ),
    )
}

/// The object entry in `bytes` (read from `loc`), checked to name `id`.
fn checked_entry<'b>(id: &ObjectId, loc: EntryLoc, bytes: &'b [u8]) -> Result<ObjectEntry<'b>> {
    let entry = parse_object_entry(bytes).map_err(|r| Error::corrupt(*id, r))?;
    if entry.id != *id {
        return Err(Error::corrupt(
            *id,
            format!("journal entry at byte {} names {}", loc.offset, entry.id),
        ));
    }
    Ok(entry)
}

/// The verified payload of the entry in `bytes` (read from `loc`), which
/// must be object `id`: borrowed from `bytes`, or inflated into `scratch`.
fn verified_entry<'s>(
    id: &ObjectId,
    loc: EntryLoc,
    bytes: &'s [u8],
    scratch: &'s mut Vec<u8>,
) -> Result<(ObjectKind, &'s [u8])> {
    let entry = checked_entry(id, loc, bytes)?;
    let kind = entry.kind;
    let payload = entry.verified_payload(scratch).map_err(|r| {
        Error::corrupt(
            *id,
            format!("in journal segment {}: {r}", segment_name(loc.seq)),
        )
    })?;
    Ok((kind, payload))
}

/// The start of the first valid frame after a bad one at `bad`, found by
/// scanning, since the bad frame's own length cannot be trusted. Cheap
/// checks come before the checksum, so garbage is skipped quickly.
/// `buf` holds the segment from byte `base` on; positions in it are relative.
fn first_frame_after(buf: &[u8], bad: usize, base: u64) -> Option<usize> {
    let last = buf.len().checked_sub(FRAME_HEADER_LEN)?;
    (bad + 1..=last).find(|&p| {
        let body = u32::from_le_bytes(buf[p..p + 4].try_into().expect("4 bytes")) as usize;
        let synced = u64::from_le_bytes(buf[p + 8..p + 16].try_into().expect("8 bytes"));
        body <= MAX_FRAME_BODY
            && p + FRAME_HEADER_LEN + body <= buf.len()
            && buf[p..p + FRAME_HEADER_LEN].iter().any(|b| *b != 0)
            && synced <= base + p as u64
            && parse_frame(&buf[p..]).is_ok()
    })
}

/// Whether a valid frame from `start` on says the segment had been synced
/// past `bad` (a position in the segment; `buf` holds it from `base` on):
/// then the bytes at `bad` were durable, and are damage.
fn durable_evidence(buf: &[u8], start: usize, bad: u64, _base: u64) -> bool {
    let mut p = start;
    while p < buf.len() {
        match parse_frame(&buf[p..]) {
            Ok(f) if f.synced > bad => return true,
            Ok(f) => p += f.total_len(),
            Err(_) => return false,
        }
    }
    false
}

fn index_frame(
    objects: &mut HashMap<ObjectId, EntryLoc>,
    mut ops: Option<&mut Vec<(u64, EntryLoc)>>,
    seq: u64,
    body_at: u64,
    body: &[u8],
) {
    for entry in entries(body) {
        let Ok(entry) = entry else { break };
        let loc = EntryLoc {
            seq,
            offset: body_at + entry.offset as u64,
            len: entry.payload.len() as u32,
        };
        if entry.entry_type == ENTRY_OP {
            if let (Some(ops), Ok((op_seq, _))) =
                (ops.as_deref_mut(), parse_op_entry(entry.payload))
            {
                ops.push((op_seq, loc));
            }
            continue;
        }
        if entry.entry_type != ENTRY_OBJECT {
            continue;
        }
        let Ok(obj) = parse_object_entry(entry.payload) else {
            continue;
        };
        let at = EntryLoc {
            seq,
            offset: body_at + entry.offset as u64,
            len: entry.payload.len() as u32,
        };
        // The newest copy wins (an older one goes first, with its segment),
        // but never over a copy from a sound frame when this one's frame
        // is damaged.
        if ops.is_some() {
            objects.insert(obj.id, at);
        } else {
            objects.entry(obj.id).or_insert(at);
        }
    }
}
