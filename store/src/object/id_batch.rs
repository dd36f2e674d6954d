//! The ids of many objects at once, for the reads that verify many: a pack's
//! records read in a batch, a history's messages.
//!
//! An id is BLAKE3 of the identity header and the payload
//! (objects-format.md, "Identity"). Hashed one at a time, a message of a few
//! KB is one or a few BLAKE3 chunks whose 64-byte blocks each wait for the
//! one before: about 3 cycles a byte here, most of what verifying a loaded
//! history costs (13 ms of 10,000 messages, where the same bytes hashed as
//! one input take 2.3 ms). BLAKE3's SIMD kernel compresses the blocks of 4
//! to 16 inputs side by side when they have the same shape, so this
//! computes every input's BLAKE3 tree a stage at a time across the batch:
//!
//! 1. every chunk but an input's last (1024 bytes of whole blocks), with
//!    the SIMD kernel, grouped by chunk number (its counter);
//! 2. the whole blocks of each last chunk before its final block, with the
//!    SIMD kernel, grouped by chunk number and block count;
//! 3. each final block (a length and a starting state of its own), one
//!    compression each;
//! 4. the parent nodes, through BLAKE3's stable `hazmat` API.
//!
//! The kernel (`blake3::platform`) is one the blake3 crate exposes without
//! promising to keep it. So the batch path is checked against
//! `blake3::hash` once per process, on inputs of every shape it handles,
//! and is not used if it disagrees: a blake3 that changed it makes reads
//! slower, never wrong (and never lets a damaged object through: a wrong
//! hash is a mismatch, which fails a read). Inputs longer than 16 chunks
//! go to `blake3::hash`, which is already SIMD-wide on them.

use std::sync::OnceLock;

use blake3::hazmat::{merge_subtrees_non_root, merge_subtrees_root, ChainingValue, Mode};
use blake3::platform::Platform;
use blake3::IncrementCounter;

use super::{id_header, ObjectKind, ID_HEADER_MAX};
use crate::hash::ObjectId;

const BLOCK_LEN: usize = blake3::BLOCK_LEN;
const CHUNK_LEN: usize = blake3::CHUNK_LEN;
const BLOCKS_PER_CHUNK: usize = CHUNK_LEN / BLOCK_LEN;
/// Longer inputs are hashed by `blake3::hash` (whose own SIMD covers them).
const MAX_BATCH_CHUNKS: usize = 16;
/// Fewer inputs than this are hashed one at a time: nothing to share.
const MIN_BATCH: usize = 4;

/// BLAKE3's initialization vector and domain flags (the BLAKE3
/// specification, section 2).
const IV: [u32; 8] = [
    0x6A09_E667,
    0xBB67_AE85,
    0x3C6E_F372,
    0xA54F_F53A,
    0x510E_527F,
    0x9B05_688C,
    0x1F83_D9AB,
    0x5BE0_CD19,
];
const CHUNK_START: u8 = 1 << 0;
const CHUNK_END: u8 = 1 << 1;
const ROOT: u8 = 1 << 3;

/// Objects gathered to be hashed together: each one's identity header and
/// payload back to back in one buffer (the kernel reads each input as one
/// contiguous run), so that a payload can be handed on from there once its
/// id is known. The buffer may be a caller's, which then keeps the
/// payloads ([`IdBatch::over`], [`IdBatch::into_frames`]).
#[derive(Debug, Default)]
pub(crate) struct IdBatch {
    frames: Vec<u8>,
    /// Per object not yet forgotten: where its header starts, where its
    /// payload starts, its end.
    items: Vec<(usize, usize, usize)>,
}

impl IdBatch {
    /// A batch that appends to `frames` (what it holds stays as it is).
    pub(crate) fn over(frames: Vec<u8>) -> Self {
        IdBatch {
            frames,
            items: Vec::new(),
        }
    }

    /// The buffer: what it held before, and every object pushed since.
    pub(crate) fn into_frames(self) -> Vec<u8> {
        self.frames
    }

    /// Makes room for `bytes` more bytes of headers and payloads.
    pub(crate) fn reserve(&mut self, bytes: usize) {
        self.frames.reserve(bytes);
    }

    /// Adds an object of `kind` with `payload` (copied).
    pub(crate) fn push(&mut self, kind: ObjectKind, payload: &[u8]) {
        let mut header = [0u8; ID_HEADER_MAX];
        let n = id_header(kind, payload.len(), &mut header);
        let start = self.frames.len();
        self.frames.reserve(n + payload.len());
        self.frames.extend_from_slice(&header[..n]);
        self.frames.extend_from_slice(payload);
        self.items.push((start, start + n, self.frames.len()));
    }

    /// Bytes held of the objects not yet forgotten (headers and payloads).
    pub(crate) fn bytes(&self) -> usize {
        self.items
            .first()
            .map_or(0, |&(start, _, _)| self.frames.len() - start)
    }

    /// The buffer.
    pub(crate) fn frames(&self) -> &[u8] {
        &self.frames
    }

    /// Where object `n`'s payload lies in the buffer.
    pub(crate) fn payload_range(&self, n: usize) -> std::ops::Range<usize> {
        let (_, from, to) = self.items[n];
        from..to
    }

    /// Object `n`'s payload.
    pub(crate) fn payload(&self, n: usize) -> &[u8] {
        &self.frames[self.payload_range(n)]
    }

    /// The id of every object not yet forgotten, in the order pushed.
    pub(crate) fn ids(&self) -> Vec<ObjectId> {
        let inputs: Vec<&[u8]> = self
            .items
            .iter()
            .map(|&(start, _, end)| &self.frames[start..end])
            .collect();
        hash_all(&inputs)
            .into_iter()
            .map(ObjectId::from_bytes)
            .collect()
    }

    /// Forgets the objects, keeping their bytes in the buffer.
    pub(crate) fn forget(&mut self) {
        self.items.clear();
    }

    /// Forgets the objects and drops their bytes from the buffer.
    pub(crate) fn clear(&mut self) {
        if let Some(&(start, _, _)) = self.items.first() {
            self.frames.truncate(start);
        }
        self.items.clear();
    }
}

/// `blake3::hash` of each input, in order.
pub(crate) fn hash_all(inputs: &[&[u8]]) -> Vec<[u8; 32]> {
    if inputs.len() < MIN_BATCH || !batch_path_agrees() {
        return inputs.iter().map(|i| *blake3::hash(i).as_bytes()).collect();
    }
    hash_batched(inputs)
}

/// Whether the batch path gives `blake3::hash`'s answer on this machine
/// with this blake3, on inputs of every shape it handles; asked once.
fn batch_path_agrees() -> bool {
    static AGREES: OnceLock<bool> = OnceLock::new();
    *AGREES.get_or_init(|| {
        let data: Vec<u8> = (0..MAX_BATCH_CHUNKS * CHUNK_LEN + 64)
            .map(|i| (i.wrapping_mul(31) ^ (i >> 7)) as u8)
            .collect();
        // Each shape at several offsets, so that every group fills SIMD
        // lanes and part of them.
        let mut inputs: Vec<&[u8]> = Vec::new();
        for len in sample_lengths() {
            for k in 0..17 {
                inputs.push(&data[k..k + len]);
            }
        }
        let batched = hash_batched(&inputs);
        inputs
            .iter()
            .zip(&batched)
            .all(|(i, h)| blake3::hash(i).as_bytes() == h)
    })
}

/// Lengths of every shape the batch path handles: each block count of a
/// last chunk, whole and partial final blocks, one chunk and many.
fn sample_lengths() -> Vec<usize> {
    let mut v = vec![0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 2049, 3000];
    v.extend((1..=BLOCKS_PER_CHUNK).map(|b| CHUNK_LEN + b * BLOCK_LEN - 7));
    v.push(MAX_BATCH_CHUNKS * CHUNK_LEN - 1);
    v.push(MAX_BATCH_CHUNKS * CHUNK_LEN);
    v.push(MAX_BATCH_CHUNKS * CHUNK_LEN + 1);
    v
}

/// Chunks in an input of `len` bytes (an empty input is one empty chunk).
fn chunks_of(len: usize) -> usize {
    len.div_ceil(CHUNK_LEN).max(1)
}

/// The batch path (see the module's comment).
fn hash_batched(inputs: &[&[u8]]) -> Vec<[u8; 32]> {
    let platform = Platform::detect();
    let mut out = vec![[0u8; 32]; inputs.len()];
    // Chaining values of every chunk of the inputs batched, at `first[i]..`.
    let mut first = Vec::with_capacity(inputs.len());
    let mut total = 0;
    for input in inputs {
        first.push(total);
        let c = chunks_of(input.len());
        if c <= MAX_BATCH_CHUNKS {
            total += c;
        }
    }
    let mut cvs: Vec<[u8; 32]> = vec![[0u8; 32]; total];
    let mut kernel_out = Vec::new();

    // 1. Whole chunks before each last chunk, by chunk number.
    for j in 0..MAX_BATCH_CHUNKS - 1 {
        let mut group: Vec<&[u8; CHUNK_LEN]> = Vec::new();
        let mut slots = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            let c = chunks_of(input.len());
            if c <= MAX_BATCH_CHUNKS && j + 1 < c {
                let chunk = &input[j * CHUNK_LEN..(j + 1) * CHUNK_LEN];
                group.push(chunk.try_into().expect("a whole chunk"));
                slots.push(first[i] + j);
            }
        }
        if group.is_empty() {
            break;
        }
        kernel_out.clear();
        kernel_out.resize(group.len() * 32, 0);
        platform.hash_many(
            &group,
            &IV,
            j as u64,
            IncrementCounter::No,
            0,
            CHUNK_START,
            CHUNK_END,
            &mut kernel_out,
        );
        for (slot, cv) in slots.iter().zip(kernel_out.chunks_exact(32)) {
            cvs[*slot].copy_from_slice(cv);
        }
    }

    // 2. The whole blocks of each last chunk before its final block, by
    // chunk number and block count (1 to 15): bucketed first.
    let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); MAX_BATCH_CHUNKS * BLOCKS_PER_CHUNK];
    for (i, input) in inputs.iter().enumerate() {
        let c = chunks_of(input.len());
        if c > MAX_BATCH_CHUNKS {
            continue;
        }
        let tail = input.len() - (c - 1) * CHUNK_LEN;
        let before = tail.saturating_sub(1) / BLOCK_LEN;
        if before > 0 {
            buckets[(c - 1) * BLOCKS_PER_CHUNK + before].push(i);
        }
    }
    for (key, members) in buckets.iter().enumerate() {
        if members.is_empty() {
            continue;
        }
        let (j, blocks) = (key / BLOCKS_PER_CHUNK, key % BLOCKS_PER_CHUNK);
        let starts: Vec<&[u8]> = members
            .iter()
            .map(|&i| &inputs[i][j * CHUNK_LEN..])
            .collect();
        kernel_out.clear();
        kernel_out.resize(members.len() * 32, 0);
        chunk_prefixes(platform, blocks, j as u64, &starts, &mut kernel_out);
        for (&i, cv) in members.iter().zip(kernel_out.chunks_exact(32)) {
            let last = first[i] + chunks_of(inputs[i].len()) - 1;
            cvs[last].copy_from_slice(cv);
        }
    }

    // 3. Each final block, from the state stage 2 left (or the IV).
    for (i, input) in inputs.iter().enumerate() {
        let c = chunks_of(input.len());
        if c > MAX_BATCH_CHUNKS {
            out[i] = *blake3::hash(input).as_bytes();
            continue;
        }
        let j = c - 1;
        let tail = &input[j * CHUNK_LEN..];
        let before = tail.len().saturating_sub(1) / BLOCK_LEN;
        let last = first[i] + j;
        let mut cv = if before == 0 { IV } else { words(&cvs[last]) };
        let rest = &tail[before * BLOCK_LEN..];
        let mut block = [0u8; BLOCK_LEN];
        block[..rest.len()].copy_from_slice(rest);
        let mut flags = CHUNK_END;
        if before == 0 {
            flags |= CHUNK_START;
        }
        if c == 1 {
            flags |= ROOT;
        }
        let len = u8::try_from(rest.len()).expect("at most a block");
        platform.compress_in_place(&mut cv, &block, len, j as u64, flags);
        let bytes = le_bytes(&cv);
        if c == 1 {
            out[i] = bytes;
        } else {
            cvs[last] = bytes;
        }
    }

    // 4. Parents: the tree over each input's chunk chaining values.
    for (i, input) in inputs.iter().enumerate() {
        let c = chunks_of(input.len());
        if (2..=MAX_BATCH_CHUNKS).contains(&c) {
            let leaves = &cvs[first[i]..first[i] + c];
            let split = left_chunks(c);
            let (l, r) = (subtree(&leaves[..split]), subtree(&leaves[split..]));
            out[i] = *merge_subtrees_root(&l, &r, Mode::Hash).as_bytes();
        }
    }
    out
}

/// Chunks in the left subtree of a node over `n` (2 or more) chunks: the
/// largest power of two below `n` (the BLAKE3 specification, section 2.1).
fn left_chunks(n: usize) -> usize {
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// The chaining value of a non-root subtree over `leaves`.
fn subtree(leaves: &[ChainingValue]) -> ChainingValue {
    if leaves.len() == 1 {
        return leaves[0];
    }
    let split = left_chunks(leaves.len());
    let (l, r) = (subtree(&leaves[..split]), subtree(&leaves[split..]));
    merge_subtrees_non_root(&l, &r, Mode::Hash)
}

/// The kernel over the first `blocks` whole blocks of each chunk `starts`
/// begins, as chunk `counter`, without ending the chunk. The kernel takes
/// its input length as a constant, hence one instance per block count.
fn chunk_prefixes(
    platform: Platform,
    blocks: usize,
    counter: u64,
    starts: &[&[u8]],
    out: &mut [u8],
) {
    macro_rules! by_blocks {
        ($($b:literal)*) => {
            match blocks {
                $($b => {
                    let group: Vec<&[u8; $b * BLOCK_LEN]> = starts
                        .iter()
                        .map(|s| s[..$b * BLOCK_LEN].try_into().expect("whole blocks"))
                        .collect();
                    platform.hash_many(
                        &group,
                        &IV,
                        counter,
                        IncrementCounter::No,
                        0,
                        CHUNK_START,
                        0,
                        out,
                    );
                })*
                _ => unreachable!("a last chunk has 1 to 15 whole blocks before its final one"),
            }
        };
    }
    by_blocks!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
}

fn words(bytes: &[u8; 32]) -> [u32; 8] {
    let mut w = [0u32; 8];
    for (k, c) in bytes.chunks_exact(4).enumerate() {
        w[k] = u32::from_le_bytes(c.try_into().expect("4 bytes"));
    }
    w
}

fn le_bytes(words: &[u32; 8]) -> [u8; 32] {
    let mut b = [0u8; 32];
    for (k, w) in words.iter().enumerate() {
        b[4 * k..4 * k + 4].copy_from_slice(&w.to_le_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bytes, different at every offset and per seed.
    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// The batch path gives `blake3::hash` for every length from 0 to 5
    /// chunks and past the batched limit, in mixed batches (lanes of one
    /// group full and partly full), with the kernel this machine picks.
    #[test]
    fn the_batch_path_is_blake3_for_every_length() {
        let mut inputs: Vec<Vec<u8>> = Vec::new();
        for len in (0..5 * CHUNK_LEN + 70).chain(sample_lengths()) {
            inputs.push(bytes(len as u64, len));
        }
        for k in 0..40 {
            inputs.push(bytes(1000 + k, 1500));
        }
        inputs.push(bytes(7, 40 * CHUNK_LEN + 3));
        let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let got = hash_batched(&refs);
        for (input, h) in refs.iter().zip(&got) {
            assert_eq!(h, blake3::hash(input).as_bytes(), "{} bytes", input.len());
        }
        assert!(batch_path_agrees());
        assert_eq!(hash_all(&refs), got);
    }

    /// Ids from a batch are the ids `object_id` gives, in push order, and
    /// each payload comes back as pushed.
    #[test]
    fn a_batch_gives_each_object_its_id() {
        let mut batch = IdBatch::default();
        let payloads: Vec<Vec<u8>> = (0..50)
            .map(|k| bytes(k, (k as usize * 97) % 3000))
            .collect();
        for (k, p) in payloads.iter().enumerate() {
            let kind = [ObjectKind::Blob, ObjectKind::Session, ObjectKind::Raw][k % 3];
            batch.push(kind, p);
        }
        let ids = batch.ids();
        for (k, p) in payloads.iter().enumerate() {
            let kind = [ObjectKind::Blob, ObjectKind::Session, ObjectKind::Raw][k % 3];
            assert_eq!(ids[k], super::super::object_id(kind, p));
            assert_eq!(batch.payload(k), &p[..]);
        }
        // One byte changed changes that id only.
        let mut changed = IdBatch::default();
        for (k, p) in payloads.iter().enumerate() {
            let kind = [ObjectKind::Blob, ObjectKind::Session, ObjectKind::Raw][k % 3];
            let mut p = p.clone();
            if k == 20 {
                p[5] ^= 1;
            }
            changed.push(kind, &p);
        }
        let other = changed.ids();
        for k in 0..payloads.len() {
            assert_eq!(ids[k] == other[k], k != 20, "{k}");
        }
        // Over a buffer: what it held stays, the objects follow.
        let mut over = IdBatch::over(b"kept".to_vec());
        over.push(ObjectKind::Blob, &payloads[3]);
        assert_eq!(over.ids(), vec![ids[3]]);
        assert_eq!(over.payload(0), &payloads[3][..]);
        over.forget();
        assert_eq!(over.bytes(), 0);
        let frames = over.into_frames();
        assert!(frames.starts_with(b"kept") && frames.ends_with(&payloads[3]));
        batch.clear();
        assert_eq!(batch.bytes(), 0);
        assert!(batch.ids().is_empty() && batch.frames().is_empty());
    }
}
