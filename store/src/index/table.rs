//! Index tables: immutable, memory-mapped, checksummed sorted key-value
//! files (objects-format.md, "Index tables"), stacked newest first to make
//! the derived index. A newer table's entry for a key, or its tombstone,
//! hides every older table's.
//!
//! A table is written once, under a temporary name, verified, fsynced and
//! renamed into place; then many processes read it at once through mmap.
//! Opening checks the header and the file's size only, so it costs the same
//! whatever the table holds; the checksum and the order of every record are
//! checked by [`Table::verify`] (fsck, and every write). So every read here
//! bounds-checks what it touches: corrupt bytes are a [`TableError`] naming
//! the problem, never a panic, an out-of-bounds slice or an allocation sized
//! by the file. This module depends on std, blake3 and memmap2 only.

use std::cmp::Ordering;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use memmap2::Mmap;

/// Returns a formatted reason.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(format!($($arg)*))
    };
}

/// objects-format.md, "Index tables": 2, a table whose entries hold a
/// `t:` key for each ref target its `r:` entries set or clear (the layout
/// is version 1's, which still reads: see [`Table::version`]).
pub const INDEX_FORMAT_VERSION: u32 = 2;
/// The first version, read as it is: its tables hold no `t:` keys.
pub const INDEX_FORMAT_V1: u32 = 1;
/// objects-format.md, "Index tables". Not the pack index's `SIDX`.
pub const TABLE_MAGIC: [u8; 4] = *b"SITB";
/// The header's length, up to and including the fan-out.
pub const TABLE_HEADER_LEN: usize = 1096;

const FANOUT_AT: usize = 72;
const CHECKSUM_LEN: usize = 32;
const RECORD_HEADER_LEN: u64 = 8;
const MAX_KEY_LEN: usize = 65_535;
const TOMBSTONE: u32 = u32::MAX;
const MAX_VALUE_LEN: u32 = 1 << 31;

/// An entry: its key, and its value or `None` for a tombstone.
pub type Entry<'a> = (&'a [u8], Option<&'a [u8]>);

/// The operations a table covers: `first..=last` of the store's operation
/// sequence numbers, and the hash of operation `last` (zeros when `last`
/// is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableMeta {
    pub first: u64,
    pub last: u64,
    pub last_hash: [u8; 32],
}

impl TableMeta {
    fn check(&self) -> Result<(), String> {
        if self.first == 0 || self.last < self.first - 1 {
            let (first, last) = (self.first, self.last);
            bail!("it covers operations {first} to {last}: that needs 1 <= first <= last + 1");
        }
        // There is no operation 0. (A later table that covers none still
        // names the hash of the operation before it, which readers check.)
        if self.last == 0 && self.last_hash != [0; 32] {
            return Err("it ends at operation 0 but names a hash for it".into());
        }
        Ok(())
    }
}

/// A table that cannot be read or written; the text names the file (when
/// there is one) and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableError(pub String);

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TableError {}

fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

/// `<first>-<last>.sit`, each number 16 decimal digits.
pub fn table_file_name(meta: &TableMeta) -> String {
    format!("{:016}-{:016}.sit", meta.first, meta.last)
}

/// The `(first, last)` a table's file name gives, for names
/// [`table_file_name`] makes and nothing else.
pub fn parse_table_file_name(name: &str) -> Option<(u64, u64)> {
    let b = name.as_bytes();
    let digits = |s: &[u8]| s.len() == 16 && s.iter().all(u8::is_ascii_digit);
    if b.len() != 37 || !digits(&b[..16]) || b[16] != b'-' || !digits(&b[17..33]) {
        return None;
    }
    if &b[33..] != b".sit" {
        return None;
    }
    Some((name[..16].parse().ok()?, name[17..33].parse().ok()?))
}

/// Encodes a table of `entries` (key, value or `None` for a tombstone),
/// which must be sorted strictly ascending by key, with keys of 1 to 65535
/// bytes and values shorter than 2^31 bytes.
pub fn encode_table<'a>(
    meta: &TableMeta,
    entries: impl IntoIterator<Item = Entry<'a>>,
) -> Result<Vec<u8>, TableError> {
    encode_table_as(meta, INDEX_FORMAT_VERSION, entries)
}

/// [`encode_table`] under the header's `version`, [`INDEX_FORMAT_VERSION`]
/// or [`INDEX_FORMAT_V1`] (a merge that takes a version-1 table along: its
/// `t:` keys are not complete).
pub fn encode_table_as<'a>(
    meta: &TableMeta,
    version: u32,
    entries: impl IntoIterator<Item = Entry<'a>>,
) -> Result<Vec<u8>, TableError> {
    let entries: Vec<Entry<'a>> = entries.into_iter().collect();
    encode(meta, version, &entries)
        .map_err(|r| TableError(format!("cannot encode an index table: {r}")))
}

fn encode(meta: &TableMeta, version: u32, entries: &[Entry<'_>]) -> Result<Vec<u8>, String> {
    meta.check()?;
    if version != INDEX_FORMAT_VERSION && version != INDEX_FORMAT_V1 {
        bail!("there is no version {version}");
    }
    let Ok(n) = u32::try_from(entries.len()) else {
        bail!("too many entries")
    };
    let mut fanout = [0u32; 256];
    let mut heap_len = 0usize;
    for (i, (k, v)) in entries.iter().enumerate() {
        if k.is_empty() || k.len() > MAX_KEY_LEN {
            bail!("entry {i}'s key is {} bytes long", k.len());
        }
        if i > 0 && entries[i - 1].0 >= *k {
            bail!("entry {i}'s key is not after entry {}'s", i - 1);
        }
        let v_len = v.map_or(0, <[u8]>::len);
        if v_len >= MAX_VALUE_LEN as usize {
            bail!("entry {i}'s value is {v_len} bytes long");
        }
        heap_len = heap_len
            .checked_add(8 + k.len() + v_len)
            .ok_or("too large")?;
        fanout[usize::from(k[0])] += 1;
    }
    let total = entries
        .len()
        .checked_mul(8)
        .and_then(|o| {
            o.checked_add(heap_len)?
                .checked_add(TABLE_HEADER_LEN + CHECKSUM_LEN)
        })
        .ok_or("too large")?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&TABLE_MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&meta.first.to_le_bytes());
    out.extend_from_slice(&meta.last.to_le_bytes());
    out.extend_from_slice(&meta.last_hash);
    out.extend_from_slice(&u64::from(n).to_le_bytes());
    out.extend_from_slice(&(heap_len as u64).to_le_bytes());
    let mut below = 0u32;
    for count in fanout {
        below += count;
        out.extend_from_slice(&below.to_le_bytes());
    }
    let mut offset = 0u64;
    for (k, v) in entries {
        out.extend_from_slice(&offset.to_le_bytes());
        offset += 8 + (k.len() + v.map_or(0, <[u8]>::len)) as u64;
    }
    for (k, v) in entries {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&v.map_or(TOMBSTONE, |v| v.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v.unwrap_or_default());
    }
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    debug_assert_eq!(out.len(), total);
    Ok(out)
}

enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

/// What the header says, checked against the file's size.
#[derive(Debug, Clone, Copy)]
struct Layout {
    meta: TableMeta,
    version: u32,
    n: usize,
    heap_start: usize,
    heap_len: u64,
    fanout: [u32; 256],
}

/// A reader for one index table, over a mapped file or bytes in memory.
pub struct Table {
    bytes: Bytes,
    path: Option<PathBuf>,
    /// The mapped file's (device, inode), read from the file opened, so
    /// that a writer can tell a table since replaced under its name.
    identity: Option<(u64, u64)>,
    layout: Layout,
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.path)
            .field("meta", &self.layout.meta)
            .field("len", &self.layout.n)
            .finish()
    }
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

fn parse_header(b: &[u8]) -> Result<Layout, String> {
    let min = TABLE_HEADER_LEN + CHECKSUM_LEN;
    if b.len() < min {
        bail!(
            "{} bytes long, shorter than the {min} of an empty table",
            b.len()
        );
    }
    if b[..4] != TABLE_MAGIC {
        bail!("bad magic {:02x?}", &b[..4]);
    }
    let short = || "truncated header".to_string();
    let version = le_u32(b, 4).ok_or_else(short)?;
    if version != INDEX_FORMAT_VERSION && version != INDEX_FORMAT_V1 {
        bail!(
            "format version {version}; this sessctl reads {INDEX_FORMAT_V1} and {INDEX_FORMAT_VERSION}"
        );
    }
    let mut last_hash = [0u8; 32];
    last_hash.copy_from_slice(&b[24..56]);
    let meta = TableMeta {
        first: le_u64(b, 8).ok_or_else(short)?,
        last: le_u64(b, 16).ok_or_else(short)?,
        last_hash,
    };
    meta.check()?;
    let n = le_u64(b, 56).ok_or_else(short)?;
    let heap_len = le_u64(b, 64).ok_or_else(short)?;
    let expected = n
        .checked_mul(8)
        .and_then(|o| o.checked_add(heap_len))
        .and_then(|o| o.checked_add(min as u64));
    if expected != Some(b.len() as u64) {
        let expected = expected.map_or("more than 2^64".into(), |e| e.to_string());
        bail!(
            "{} bytes long, but {n} entries and {heap_len} heap bytes make {expected}",
            b.len()
        );
    }
    let mut fanout = [0u32; 256];
    let mut below = 0u32;
    for (i, slot) in fanout.iter_mut().enumerate() {
        *slot = le_u32(b, FANOUT_AT + 4 * i).ok_or_else(short)?;
        if *slot < below {
            bail!(
                "fan-out entry {i} ({}) is below entry {} ({below})",
                *slot,
                i - 1
            );
        }
        below = *slot;
    }
    if u64::from(below) != n {
        bail!("fan-out ends at {below}, but the header says {n} entries");
    }
    // Both fit: the file's length, a usize, is larger.
    let n = n as usize;
    Ok(Layout {
        meta,
        version,
        n,
        heap_start: TABLE_HEADER_LEN + 8 * n,
        heap_len,
        fanout,
    })
}

/// The key, value and end (in the heap) of entry `i`, checked to lie in the
/// heap and to have lengths the format allows.
fn record<'a>(b: &'a [u8], l: &Layout, i: usize) -> Result<(Entry<'a>, u64), String> {
    if i >= l.n {
        bail!("no entry {i}: the table has {}", l.n);
    }
    let offset = le_u64(b, TABLE_HEADER_LEN + 8 * i).ok_or("truncated offsets")?;
    if offset
        .checked_add(RECORD_HEADER_LEN)
        .is_none_or(|e| e > l.heap_len)
    {
        bail!(
            "entry {i}'s offset {offset} is past the heap's {} bytes",
            l.heap_len
        );
    }
    // In range: offset < heap_len, which fits in the file's usize length.
    let at = l.heap_start + offset as usize;
    let k_len = le_u32(b, at).ok_or("truncated heap")?;
    let v_len = le_u32(b, at + 4).ok_or("truncated heap")?;
    if k_len == 0 || k_len as usize > MAX_KEY_LEN {
        bail!("entry {i}'s key length {k_len} is not in 1..=65535");
    }
    let value_bytes = match v_len {
        TOMBSTONE => 0,
        v if v < MAX_VALUE_LEN => v,
        v => bail!("entry {i}'s value length {v} is 2^31 or more"),
    };
    let end = offset + RECORD_HEADER_LEN + u64::from(k_len) + u64::from(value_bytes);
    if end > l.heap_len {
        bail!(
            "entry {i} ends at {end}, past the heap's {} bytes",
            l.heap_len
        );
    }
    let key_at = at + 8;
    let value_at = key_at + k_len as usize;
    let key = &b[key_at..value_at];
    let value = (v_len != TOMBSTONE).then(|| &b[value_at..value_at + value_bytes as usize]);
    Ok(((key, value), end))
}

/// The checks of [`Table::verify`], on bytes whose header [`parse_header`]
/// accepted.
fn verify_bytes(b: &[u8], l: &Layout) -> Result<(), String> {
    let (body, sum) = b.split_at(b.len() - CHECKSUM_LEN);
    if blake3::hash(body).as_bytes() != sum {
        return Err("checksum mismatch".into());
    }
    let mut expected = 0u64;
    let mut counts = [0u32; 256];
    let mut prev: Option<&[u8]> = None;
    for i in 0..l.n {
        let offset = le_u64(b, TABLE_HEADER_LEN + 8 * i).ok_or("truncated offsets")?;
        if offset != expected {
            bail!("entry {i} starts at {offset}, not at {expected} where entries before it end");
        }
        let ((key, _), end) = record(b, l, i)?;
        if prev.is_some_and(|p| p >= key) {
            bail!("entry {i}'s key is not after entry {}'s", i - 1);
        }
        counts[usize::from(key[0])] += 1;
        prev = Some(key);
        expected = end;
    }
    if expected != l.heap_len {
        bail!(
            "entries end at {expected}, but the heap is {} bytes",
            l.heap_len
        );
    }
    let mut below = 0u32;
    for (byte, count) in counts.iter().enumerate() {
        below += count;
        if l.fanout[byte] != below {
            let f = l.fanout[byte];
            bail!("fan-out entry {byte} is {f}, but {below} keys start with a byte <= {byte}");
        }
    }
    Ok(())
}

fn corrupt(path: Option<&Path>, reason: String) -> TableError {
    match path {
        Some(p) => TableError(format!("index table {} is corrupt: {reason}", p.display())),
        None => TableError(format!("index table is corrupt: {reason}")),
    }
}

impl Table {
    /// Maps the file read-only and checks its header against its size.
    pub fn open(path: &Path) -> Result<Table, TableError> {
        let fail = |reason: String| TableError(format!("index table {}: {reason}", path.display()));
        let file = File::open(path).map_err(|e| fail(format!("cannot open: {e}")))?;
        let map = map(&file).map_err(|e| fail(format!("cannot map: {e}")))?;
        let layout = parse_header(&map).map_err(|r| corrupt(Some(path), r))?;
        let identity = file.metadata().ok().map(|m| identity(&m));
        Ok(Table {
            bytes: Bytes::Mapped(map),
            path: Some(path.to_path_buf()),
            identity,
            layout,
        })
    }

    /// As [`Table::open`], for bytes in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Table, TableError> {
        let layout = parse_header(&bytes).map_err(|r| corrupt(None, r))?;
        Ok(Table {
            bytes: Bytes::Owned(bytes),
            path: None,
            identity: None,
            layout,
        })
    }

    /// Whether the file this table was opened from is still the one at its
    /// path (`false` once another writer replaced or deleted it; always
    /// `true` for a table in memory).
    pub fn is_current(&self) -> bool {
        match (&self.path, self.identity) {
            (Some(path), Some(id)) => std::fs::metadata(path).is_ok_and(|m| identity(&m) == id),
            (Some(_), None) => false,
            (None, _) => true,
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }

    fn corrupt(&self, reason: String) -> TableError {
        corrupt(self.path.as_deref(), reason)
    }

    /// The file it was opened from; `None` for [`Table::from_bytes`].
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn meta(&self) -> &TableMeta {
        &self.layout.meta
    }

    /// The header's version: [`INDEX_FORMAT_VERSION`], or
    /// [`INDEX_FORMAT_V1`] for a table that holds no `t:` keys.
    pub fn version(&self) -> u32 {
        self.layout.version
    }

    /// The number of entries, tombstones included.
    pub fn len(&self) -> usize {
        self.layout.n
    }

    pub fn is_empty(&self) -> bool {
        self.layout.n == 0
    }

    pub fn file_len(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// The i-th entry (0-based) in key order: its key, and its value or
    /// `None` for a tombstone.
    pub fn entry(&self, i: usize) -> Result<Entry<'_>, TableError> {
        match record(self.bytes(), &self.layout, i) {
            Ok((entry, _)) => Ok(entry),
            Err(reason) => Err(self.corrupt(reason)),
        }
    }

    /// The entries whose key starts with `first`, by the fan-out.
    fn bucket(&self, first: u8) -> (usize, usize) {
        let f = &self.layout.fanout;
        let lo = if first == 0 {
            0
        } else {
            f[usize::from(first) - 1]
        };
        // The header check made the fan-out non-decreasing and end at n.
        (lo as usize, f[usize::from(first)] as usize)
    }

    /// The first index in `lo..hi` whose key is not `before`, keys being
    /// sorted so that `before` holds for a prefix of them.
    fn partition(
        &self,
        mut lo: usize,
        mut hi: usize,
        before: impl Fn(&[u8]) -> bool,
    ) -> Result<usize, TableError> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if before(self.entry(mid)?.0) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// `Ok(None)`: no entry; `Ok(Some(None))`: a tombstone;
    /// `Ok(Some(Some(value)))`: the value.
    pub fn get(&self, key: &[u8]) -> Result<Option<Option<&[u8]>>, TableError> {
        let Some(&first) = key.first() else {
            return Ok(None);
        };
        let (mut lo, mut hi) = self.bucket(first);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, v) = self.entry(mid)?;
            match k.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(Some(v)),
            }
        }
        Ok(None)
    }

    /// The index of the first entry whose key is `key` or after it; `len()`
    /// when there is none.
    pub fn lower_bound(&self, key: &[u8]) -> Result<usize, TableError> {
        let Some(&first) = key.first() else {
            return Ok(0);
        };
        let (lo, hi) = self.bucket(first);
        self.partition(lo, hi, |k| k < key)
    }

    /// The entries whose key starts with `prefix`, in key order; `.rev()`
    /// walks them backwards. Each entry is read when it is reached.
    pub fn prefix(&self, prefix: &[u8]) -> Result<TableRange<'_>, TableError> {
        let (front, back) = match prefix.first() {
            None => (0, self.len()),
            Some(&first) => {
                let (lo, hi) = self.bucket(first);
                let front = self.partition(lo, hi, |k| k < prefix)?;
                (front, self.partition(front, hi, |k| k.starts_with(prefix))?)
            }
        };
        let table = self;
        Ok(TableRange { table, front, back })
    }

    /// Checks the whole file: the checksum, every entry in the heap and
    /// back to back, keys strictly ascending, the fan-out counting them.
    pub fn verify(&self) -> Result<(), TableError> {
        verify_bytes(self.bytes(), &self.layout).map_err(|r| self.corrupt(r))
    }
}

fn map(file: &File) -> std::io::Result<Mmap> {
    crate::odb::pack::map_immutable(file)
}

/// Entries of one table, read lazily from both ends. An entry that cannot
/// be read is an `Err` item, and the iteration ends after it.
#[derive(Debug, Clone)]
pub struct TableRange<'a> {
    table: &'a Table,
    front: usize,
    back: usize,
}

impl<'a> TableRange<'a> {
    fn read(&mut self, i: usize) -> Result<Entry<'a>, TableError> {
        let item = self.table.entry(i);
        if item.is_err() {
            self.front = self.back;
        }
        item
    }
}

impl<'a> Iterator for TableRange<'a> {
    type Item = Result<Entry<'a>, TableError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        self.front += 1;
        Some(self.read(self.front - 1))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.back.saturating_sub(self.front)))
    }
}

impl DoubleEndedIterator for TableRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        Some(self.read(self.back))
    }
}

/// Writes `bytes`, an encoded table for `meta`, into `dir` as
/// [`table_file_name`]: verified, then through a temporary file that is
/// fsynced and renamed into place, the directory fsynced. Returns its path.
pub fn write_table_file(dir: &Path, meta: &TableMeta, bytes: &[u8]) -> Result<PathBuf, TableError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = table_file_name(meta);
    let target = dir.join(&name);
    let fail = |p: &Path, r: String| TableError(format!("index table {}: {r}", p.display()));
    let layout = parse_header(bytes).map_err(|r| corrupt(Some(&target), r))?;
    verify_bytes(bytes, &layout).map_err(|r| corrupt(Some(&target), r))?;
    if layout.meta != *meta {
        return Err(fail(
            &target,
            format!("the bytes are for {:?}", layout.meta),
        ));
    }
    let n = NEXT.fetch_add(1, AtomicOrdering::Relaxed);
    let tmp = dir.join(format!(".tmp-{}-{n}-{name}", std::process::id()));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| fail(&tmp, format!("cannot create: {e}")))?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| fail(&tmp, format!("cannot write: {e}")))
        .and_then(|()| {
            drop(file);
            fs::rename(&tmp, &target)
                .map_err(|e| fail(&target, format!("cannot rename into place: {e}")))
        });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail(dir, format!("cannot sync the directory: {e}")))?;
    Ok(target)
}

/// The merge of tables given newest first: every key once, ascending,
/// with the newest table's entry for it; with `drop_tombstones`, keys
/// whose newest entry is a tombstone are left out (for a merge that
/// becomes the bottom of the stack). An entry that cannot be read, or that
/// is out of order in its table, is an `Err` item, and the merge ends
/// after it.
pub fn merge<'a>(tables: &[&'a Table], drop_tombstones: bool) -> Merge<'a> {
    Merge {
        tables: tables.to_vec(),
        next: vec![0; tables.len()],
        heads: BinaryHeap::with_capacity(tables.len()),
        drop_tombstones,
        started: false,
        done: false,
    }
}

type Head<'a> = (&'a [u8], usize, Option<&'a [u8]>);

/// The iterator [`merge`] returns.
#[derive(Debug)]
pub struct Merge<'a> {
    tables: Vec<&'a Table>,
    /// Per table, the index of its next entry not yet in `heads`.
    next: Vec<usize>,
    /// Each table's next entry: (key, table, value), the smallest key and
    /// among equal keys the newest table on top. No two compare equal, as
    /// a table has one entry here at a time.
    heads: BinaryHeap<Reverse<Head<'a>>>,
    drop_tombstones: bool,
    started: bool,
    done: bool,
}

impl<'a> Merge<'a> {
    /// Puts table `t`'s next entry, if any, among the heads; `prev` is the
    /// key of the entry before it.
    fn advance(&mut self, t: usize, prev: Option<&[u8]>) -> Result<(), TableError> {
        let table = self.tables[t];
        let i = self.next[t];
        if i >= table.len() {
            return Ok(());
        }
        let (key, value) = table.entry(i)?;
        if prev.is_some_and(|p| p >= key) {
            return Err(table.corrupt(format!("entry {i}'s key is not after entry {}'s", i - 1)));
        }
        self.next[t] = i + 1;
        self.heads.push(Reverse((key, t, value)));
        Ok(())
    }

    fn step(&mut self) -> Result<Option<Entry<'a>>, TableError> {
        if !self.started {
            self.started = true;
            for t in 0..self.tables.len() {
                self.advance(t, None)?;
            }
        }
        loop {
            let Some(Reverse((key, t, value))) = self.heads.pop() else {
                return Ok(None);
            };
            self.advance(t, Some(key))?;
            // Older tables' entries for the same key are hidden.
            while let Some(&Reverse((older, t, _))) = self.heads.peek() {
                if older != key {
                    break;
                }
                self.heads.pop();
                self.advance(t, Some(key))?;
            }
            if value.is_some() || !self.drop_tombstones {
                return Ok(Some((key, value)));
            }
        }
    }
}

impl<'a> Iterator for Merge<'a> {
    type Item = Result<Entry<'a>, TableError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
            self.heads.clear();
        }
        item
    }
}
