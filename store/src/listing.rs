//! The listing: a snapshot of the most recently active conversations, so
//! that `sessctl ls` in a fresh process reads one small file instead of
//! opening the index and scanning the journal (objects-format.md,
//! "Listing").
//!
//! It is derived data, written by a writer when it closes the store, and
//! trusted only while it provably describes the store as it is: its stamp
//! names the newest journal segment and that segment's length, which every
//! write (and every repack, which starts a new segment) changes. The writer
//! syncs the journal before writing the listing, so the bytes the stamp
//! covers are durable: a crash afterwards can only add a torn tail, which
//! changes the length or is cut back to it. A listing that is missing,
//! damaged, stale, or that cannot answer a question (it holds too few
//! conversations, or one of them has an open run that a writer would first
//! have to check) is simply not used.

use std::fs;
use std::path::Path;

use crate::error::{IoResultExt, Result};
use crate::index::ConversationInfo;
use crate::odb::atomic_file::AtomicFile;
use crate::odb::{journal, Durability};
use crate::refs::Hash;

/// Version of the listing file (objects-format.md, "Versioning").
pub const LISTING_FORMAT_VERSION: u32 = 1;
/// The file's name in the store directory.
pub const LISTING_FILE: &str = "listing";
/// How many conversations a listing holds at most.
pub const LISTING_LIMIT: usize = 256;

const MAGIC: [u8; 4] = *b"SLST";
const HEADER_LEN: usize = 72;

/// What the listing describes: the journal as it was when it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The newest journal segment's number and length in bytes.
    pub segment: u64,
    pub segment_len: u64,
    /// The last operation applied: sequence number (0: none) and hash.
    pub op_seq: u64,
    pub op_hash: Hash,
}

/// A decoded listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    pub stamp: Stamp,
    /// True when it holds every conversation of the store.
    pub complete: bool,
    /// Newest activity first, as the index orders them.
    pub conversations: Vec<ConversationInfo>,
}

impl Listing {
    /// The conversations `keep` accepts, newest first, at most `limit`; or
    /// `None` when this listing cannot tell (it holds too few, or one of
    /// them has an open run).
    pub fn select(
        &self,
        limit: Option<usize>,
        keep: impl Fn(&ConversationInfo) -> bool,
    ) -> Option<Vec<ConversationInfo>> {
        let want = limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        for c in &self.conversations {
            if out.len() >= want {
                break;
            }
            if keep(c) {
                if c.running.is_some() {
                    return None;
                }
                out.push(c.clone());
            }
        }
        (out.len() >= want || self.complete).then_some(out)
    }
}

/// The listing's bytes (objects-format.md, "Listing").
pub fn encode(stamp: &Stamp, complete: bool, conversations: &[ConversationInfo]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN + conversations.len() * 512 + 32);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&LISTING_FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&stamp.segment.to_le_bytes());
    b.extend_from_slice(&stamp.segment_len.to_le_bytes());
    b.extend_from_slice(&stamp.op_seq.to_le_bytes());
    b.extend_from_slice(&stamp.op_hash);
    b.extend_from_slice(&u32::from(complete).to_le_bytes());
    b.extend_from_slice(&(conversations.len() as u32).to_le_bytes());
    for c in conversations {
        let record = c.to_bytes();
        b.extend_from_slice(&(c.name.len() as u32).to_le_bytes());
        b.extend_from_slice(c.name.as_bytes());
        b.extend_from_slice(&(record.len() as u32).to_le_bytes());
        b.extend_from_slice(&record);
    }
    let sum = blake3::hash(&b);
    b.extend_from_slice(sum.as_bytes());
    b
}

/// Decodes a listing; `None` for anything that is not a whole, intact one.
pub fn decode(bytes: &[u8]) -> Option<Listing> {
    if bytes.len() < HEADER_LEN + 32 {
        return None;
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    if blake3::hash(body).as_bytes() != sum || body[..4] != MAGIC {
        return None;
    }
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
    };
    if u32_at(4)? != LISTING_FORMAT_VERSION {
        return None;
    }
    let stamp = Stamp {
        segment: u64_at(8)?,
        segment_len: u64_at(16)?,
        op_seq: u64_at(24)?,
        op_hash: body.get(32..64)?.try_into().ok()?,
    };
    let complete = match u32_at(64)? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let n = u32_at(68)? as usize;
    let mut at = 72;
    let mut conversations = Vec::with_capacity(n.min(LISTING_LIMIT));
    for _ in 0..n {
        let len = u32_at(at)? as usize;
        let name = std::str::from_utf8(body.get(at + 4..at + 4 + len)?).ok()?;
        at += 4 + len;
        let len = u32_at(at)? as usize;
        let record = body.get(at + 4..at + 4 + len)?;
        at += 4 + len;
        conversations.push(ConversationInfo::from_bytes(name, record)?);
    }
    (at == body.len()).then_some(Listing {
        stamp,
        complete,
        conversations,
    })
}

/// The newest journal segment of the store at `root` and its length.
fn journal_end(root: &Path) -> Result<Option<(u64, u64)>> {
    let dir = root.join("journal");
    let mut newest: Option<u64> = None;
    for entry in fs::read_dir(&dir).at(&dir)? {
        let entry = entry.at(&dir)?;
        if let Some(seq) = entry
            .file_name()
            .to_str()
            .and_then(journal::parse_segment_name)
        {
            newest = newest.max(Some(seq));
        }
    }
    let Some(seq) = newest else {
        return Ok(None);
    };
    let path = dir.join(journal::segment_name(seq));
    let len = fs::metadata(&path).at(&path)?.len();
    Ok(Some((seq, len)))
}

/// The store's listing when it describes the store as it is now; `None`
/// when there is none, it is stale or damaged, or the store's `FORMAT` is
/// not this sessctl's. Takes no lock and opens
/// neither the index nor the journal.
pub fn read_current(root: &Path) -> Option<Listing> {
    // A store of another format (or with a damaged FORMAT) is refused by
    // the open this answer would spare, so there is no answer here.
    crate::odb::check_format(root).ok()?;
    let bytes = fs::read(root.join(LISTING_FILE)).ok()?;
    let listing = decode(&bytes)?;
    let (segment, segment_len) = journal_end(root).ok()??;
    (listing.stamp.segment == segment && listing.stamp.segment_len == segment_len)
        .then_some(listing)
}

/// Writes the listing of a store whose journal is synced up to its end and
/// whose index has applied every operation in it. Not synced: losing it
/// costs only the slow path.
pub(crate) fn write(
    root: &Path,
    op: Option<(u64, Hash)>,
    mut newest: Vec<ConversationInfo>,
) -> Result<()> {
    let path = root.join(LISTING_FILE);
    let Some((segment, segment_len)) = journal_end(root)? else {
        return Ok(());
    };
    let complete = newest.len() <= LISTING_LIMIT;
    newest.truncate(LISTING_LIMIT);
    let (op_seq, op_hash) = op.unwrap_or((0, [0; 32]));
    let stamp = Stamp {
        segment,
        segment_len,
        op_seq,
        op_hash,
    };
    let bytes = encode(&stamp, complete, &newest);
    AtomicFile::replace(&path, &bytes, Durability::NoSync)
}

/// Removes the listing (it would be stale).
pub(crate) fn remove(root: &Path) {
    let _ = fs::remove_file(root.join(LISTING_FILE));
}
