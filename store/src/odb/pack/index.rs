//! Reading a pack index in place (objects-format.md, "Pack index"): its
//! layout, the checks of its header, fan-out, checksum and id order, and
//! lookups over borrowed bytes. Every function here is fuzzed and never
//! panics.

use super::{
    le_u32, le_u64, BLOCK_ENTRY_LEN, BLOCK_ENTRY_LEN_V1, CHECKSUM_LEN, DICTIONARY_ENTRY_LEN,
    FANOUT_LEN, INDEX_ENTRY_LEN, INDEX_HEADER_LEN, INDEX_HEADER_LEN_V1, INDEX_MAGIC,
    PACK_FORMAT_V1, PACK_FORMAT_VERSION,
};
use crate::hash::{ObjectId, Prefix, ID_LEN};

/// The layout of a parsed index, with offsets into its bytes.
#[derive(Debug, Clone, Copy)]
pub struct IndexLayout {
    /// The pack format version (1 or 2) of the index and its pack.
    pub version: u32,
    pub objects: usize,
    pub blocks: usize,
    /// Dictionaries in the pack (always 0 in version 1).
    pub dictionaries: usize,
    fanout_at: usize,
    ids_at: usize,
    entries_at: usize,
    blocks_at: usize,
    block_entry_len: usize,
    dictionaries_at: usize,
    trailer_at: usize,
}

impl IndexLayout {
    /// The layout of an index of format `version` with `objects` ids,
    /// `blocks` blocks and `dictionaries` dictionaries, and the index's total
    /// size; `None` when that does not fit in a `usize`.
    fn of(
        version: u32,
        objects: usize,
        blocks: usize,
        dictionaries: usize,
    ) -> Option<(IndexLayout, usize)> {
        let (fanout_at, block_entry_len) = match version {
            PACK_FORMAT_V1 => (INDEX_HEADER_LEN_V1, BLOCK_ENTRY_LEN_V1),
            _ => (INDEX_HEADER_LEN, BLOCK_ENTRY_LEN),
        };
        let ids_at = fanout_at + FANOUT_LEN;
        let entries_at = ids_at.checked_add(objects.checked_mul(ID_LEN)?)?;
        let blocks_at = entries_at.checked_add(objects.checked_mul(INDEX_ENTRY_LEN)?)?;
        let dictionaries_at = blocks_at.checked_add(blocks.checked_mul(block_entry_len)?)?;
        let trailer_at =
            dictionaries_at.checked_add(dictionaries.checked_mul(DICTIONARY_ENTRY_LEN)?)?;
        let size = trailer_at.checked_add(2 * CHECKSUM_LEN)?;
        let layout = IndexLayout {
            version,
            objects,
            blocks,
            dictionaries,
            fanout_at,
            ids_at,
            entries_at,
            blocks_at,
            block_entry_len,
            dictionaries_at,
            trailer_at,
        };
        Some((layout, size))
    }

    /// The size in bytes of the index this layout describes.
    fn index_len(&self) -> usize {
        self.trailer_at + 2 * CHECKSUM_LEN
    }
}

/// Checks an index's header, size and fan-out, without hashing it. Never panics.
pub fn parse_index(idx: &[u8]) -> Result<IndexLayout, String> {
    IndexView::parse(idx).map(|view| view.layout)
}

/// Checks the parts of an index that need a full pass: its checksum and the
/// order of its ids. Never panics, even when `layout` was parsed from other
/// bytes (that is an error).
pub fn verify_index(idx: &[u8], layout: &IndexLayout) -> Result<(), String> {
    if layout.index_len() != idx.len() {
        return Err(format!(
            "index layout is for {} bytes, the index has {}",
            layout.index_len(),
            idx.len()
        ));
    }
    IndexView {
        bytes: idx,
        layout: *layout,
    }
    .verify()
}

/// A pack index read in place: lookups over borrowed bytes (a mapped file,
/// or any slice), with no copy and no allocation.
///
/// [`IndexView::parse`] checks the header, the size and the fan-out table.
/// Every accessor is bounds-checked on its own as well, so a view over a
/// corrupt index answers "not found" or `None`, never panics and never
/// slices out of bounds, whether or not [`IndexView::verify`] passed. Until
/// it has, answers may be wrong (ids out of order defeat the binary search).
#[derive(Debug, Clone, Copy)]
pub struct IndexView<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) layout: IndexLayout,
}

impl<'a> IndexView<'a> {
    /// Checks an index's header, size and fan-out, without hashing it.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        if bytes.len() < INDEX_HEADER_LEN_V1 + FANOUT_LEN + 2 * CHECKSUM_LEN {
            return Err(format!("{} bytes is too short for an index", bytes.len()));
        }
        if bytes[..4] != INDEX_MAGIC {
            return Err("not a pack index (bad magic)".into());
        }
        let header = |at| le_u32(bytes, at).ok_or("the index header is cut short");
        let version = header(4)?;
        if version != PACK_FORMAT_VERSION && version != PACK_FORMAT_V1 {
            return Err(format!(
                "pack index version {version}, expected {PACK_FORMAT_V1} or {PACK_FORMAT_VERSION}"
            ));
        }
        let objects = header(8)? as usize;
        let blocks = header(12)? as usize;
        let dictionaries = match version {
            PACK_FORMAT_V1 => 0,
            _ => {
                if header(20)? != 0 {
                    return Err("the index header's reserved bytes are not zero".into());
                }
                header(16)? as usize
            }
        };
        let (layout, size) =
            IndexLayout::of(version, objects, blocks, dictionaries).ok_or_else(|| {
                format!("index of {objects} objects and {blocks} blocks is too large")
            })?;
        if size != bytes.len() {
            return Err(format!(
                "index of {} objects and {} blocks should be {} bytes, not {}",
                objects,
                blocks,
                size,
                bytes.len()
            ));
        }
        let view = IndexView { bytes, layout };
        let mut prev = 0;
        for b in 0..=255u8 {
            let f = view.fanout(b);
            if f < prev {
                return Err(format!("fan-out table decreases at byte {b:#04x}"));
            }
            prev = f;
        }
        if prev != objects {
            return Err(format!(
                "fan-out table counts {prev} objects, header {objects}"
            ));
        }
        Ok(view)
    }

    pub fn layout(&self) -> IndexLayout {
        self.layout
    }

    /// Number of ids (objects) in the index.
    pub fn object_count(&self) -> usize {
        self.layout.objects
    }

    /// Number of entries in the block table.
    pub fn block_count(&self) -> usize {
        self.layout.blocks
    }

    /// Number of entries in the dictionary table (0 in version 1).
    pub fn dictionary_count(&self) -> usize {
        self.layout.dictionaries
    }

    /// Checks what needs a full pass: the checksum, the id order, and that
    /// every block names a dictionary the table has.
    pub fn verify(&self) -> Result<(), String> {
        self.verify_checksum()?;
        self.verify_order()?;
        self.verify_blocks()
    }

    /// Checks that every block's dictionary is 0 (none) or one of the table.
    pub fn verify_blocks(&self) -> Result<(), String> {
        for n in 0..self.layout.blocks {
            let n = u32::try_from(n).map_err(|_| "too many blocks".to_owned())?;
            match self.block_dictionary(n) {
                Some(d) if (d as usize) <= self.layout.dictionaries => {}
                Some(d) => {
                    return Err(format!(
                        "block {n} names dictionary {d}, the pack has {}",
                        self.layout.dictionaries
                    ))
                }
                None => return Err(format!("block {n} lies outside the index")),
            }
        }
        Ok(())
    }

    /// Checks the index's own checksum, its last 32 bytes.
    pub fn verify_checksum(&self) -> Result<(), String> {
        let end = self.layout.trailer_at + CHECKSUM_LEN;
        let (Some(covered), Some(recorded)) = (self.bytes.get(..end), self.bytes.get(end..)) else {
            return Err("index checksum lies outside the index".into());
        };
        if blake3::hash(covered).as_bytes()[..] != *recorded {
            return Err("index checksum mismatch".into());
        }
        Ok(())
    }

    /// Checks that ids are strictly ascending and each sits inside the
    /// fan-out range of its first byte, which is what lookups rely on.
    pub fn verify_order(&self) -> Result<(), String> {
        let mut prev: Option<&[u8]> = None;
        for i in 0..self.layout.objects {
            let Some(id) = self.id_bytes(i) else {
                return Err(format!("id at position {i} lies outside the index"));
            };
            if prev.is_some_and(|p| p >= id) {
                return Err(format!("ids out of order at position {i}"));
            }
            let (lo, hi) = self.fanout_range(id[0]);
            if i < lo || i >= hi {
                return Err(format!("id at position {i} is outside its fan-out range"));
            }
            prev = Some(id);
        }
        Ok(())
    }

    /// The checksum of the pack this index describes (the trailer).
    pub fn pack_checksum(&self) -> &'a [u8] {
        let at = self.layout.trailer_at;
        self.bytes.get(at..at + CHECKSUM_LEN).unwrap_or(&[])
    }

    /// The id at `position` in sorted order.
    pub fn id(&self, position: usize) -> Option<ObjectId> {
        self.id_bytes(position).and_then(ObjectId::from_slice)
    }

    /// Every id, in index (sorted, once verified) order.
    pub fn ids(&self) -> impl Iterator<Item = ObjectId> + 'a {
        self.bytes
            .get(self.layout.ids_at..self.layout.entries_at)
            .unwrap_or(&[])
            .chunks_exact(ID_LEN)
            .filter_map(ObjectId::from_slice)
    }

    /// The position of `id`, if the index holds it.
    pub fn position(&self, id: &ObjectId) -> Option<usize> {
        let (i, hi) = self.lower_bound(id.as_bytes());
        (i < hi && self.id_bytes(i) == Some(&id.as_bytes()[..])).then_some(i)
    }

    /// Appends the ids that start with `prefix`, in sorted order.
    pub fn ids_with_prefix(&self, prefix: &Prefix, out: &mut Vec<ObjectId>) {
        let (lo, hi) = self.lower_bound(prefix.lower_bound().as_bytes());
        for i in lo..hi {
            match self.id(i) {
                Some(id) if prefix.matches(&id) => out.push(id),
                _ => break,
            }
        }
    }

    /// The entry at `position`: (block, offset of the record in the
    /// decompressed block, record length).
    pub fn entry(&self, position: usize) -> Option<(u32, u32, u32)> {
        if position >= self.layout.objects {
            return None;
        }
        let at = self.layout.entries_at + position * INDEX_ENTRY_LEN;
        Some((
            le_u32(self.bytes, at)?,
            le_u32(self.bytes, at + 4)?,
            le_u32(self.bytes, at + 8)?,
        ))
    }

    /// Block `n` of the block table: (offset in the pack, compressed length,
    /// decompressed length).
    pub fn block_entry(&self, n: u32) -> Option<(u64, u32, u32)> {
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n < self.layout.blocks)?;
        let at = self.layout.blocks_at + n * self.layout.block_entry_len;
        Some((
            le_u64(self.bytes, at)?,
            le_u32(self.bytes, at + 8)?,
            le_u32(self.bytes, at + 12)?,
        ))
    }

    /// The dictionary block `n` was compressed with: 0 for none, `d` for
    /// entry `d - 1` of the dictionary table (not checked against it here).
    /// Always 0 in version 1.
    pub fn block_dictionary(&self, n: u32) -> Option<u32> {
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n < self.layout.blocks)?;
        if self.layout.version == PACK_FORMAT_V1 {
            return Some(0);
        }
        le_u32(
            self.bytes,
            self.layout.blocks_at + n * self.layout.block_entry_len + 16,
        )
    }

    /// Entry `d` of the dictionary table: (offset in the pack, length, the
    /// blake3 checksum of the dictionary's bytes).
    pub fn dictionary_entry(&self, d: usize) -> Option<(u64, u32, &'a [u8])> {
        if d >= self.layout.dictionaries {
            return None;
        }
        let at = self.layout.dictionaries_at + d * DICTIONARY_ENTRY_LEN;
        if le_u32(self.bytes, at + 12)? != 0 {
            return None;
        }
        Some((
            le_u64(self.bytes, at)?,
            le_u32(self.bytes, at + 8)?,
            self.bytes.get(at + 16..at + 16 + CHECKSUM_LEN)?,
        ))
    }

    fn id_bytes(&self, position: usize) -> Option<&'a [u8]> {
        #[cfg(test)]
        tests::PROBES.with(|p| p.set(p.get() + 1));
        if position >= self.layout.objects {
            return None;
        }
        let at = self.layout.ids_at + position * ID_LEN;
        self.bytes.get(at..at + ID_LEN)
    }

    /// Fan-out entry `b`: the number of ids whose first byte is <= `b`.
    fn fanout(&self, b: u8) -> usize {
        le_u32(self.bytes, self.layout.fanout_at + 4 * b as usize).map_or(0, |f| f as usize)
    }

    /// The positions of the ids whose first byte is `first`, clamped to the
    /// id table so that a corrupt fan-out cannot send a search outside it.
    fn fanout_range(&self, first: u8) -> (usize, usize) {
        let hi = self.fanout(first).min(self.layout.objects);
        let lo = match first {
            0 => 0,
            _ => self.fanout(first - 1),
        };
        (lo.min(hi), hi)
    }

    /// Position of the first id >= `key` within its fan-out range, and the
    /// range's end (an interpolation search: see
    /// [`crate::hash::interpolated_lower_bound`]).
    fn lower_bound(&self, key: &[u8; ID_LEN]) -> (usize, usize) {
        let (lo, hi) = self.fanout_range(key[0]);
        let at = crate::hash::interpolated_lower_bound(lo, hi, key, |i| self.id_bytes(i));
        (at, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    thread_local! {
        /// Ids read by this thread's lookups (see `id_bytes`).
        pub(super) static PROBES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// An index of `ids` (sorted here) and no blocks, as `parse` reads it
    /// (entries and checksums zero: lookups read neither).
    fn index_of(ids: &mut Vec<[u8; ID_LEN]>) -> Vec<u8> {
        ids.sort_unstable();
        ids.dedup();
        let mut b = Vec::new();
        // A version-1 index (16-byte header, no dictionary table): the
        // lookups are the same in both versions.
        b.extend_from_slice(&INDEX_MAGIC);
        b.extend_from_slice(&PACK_FORMAT_V1.to_le_bytes());
        b.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for first in 0..=255u8 {
            let n = ids.iter().filter(|id| id[0] <= first).count() as u32;
            b.extend_from_slice(&n.to_le_bytes());
        }
        for id in ids.iter() {
            b.extend_from_slice(id);
        }
        b.resize(b.len() + ids.len() * INDEX_ENTRY_LEN + 2 * CHECKSUM_LEN, 0);
        b
    }

    /// Ids that are uniform (hashes), or that crowd a few values of the
    /// bytes interpolation reads (which a damaged or hostile index may
    /// hold), so that the search must fall back to bisecting.
    fn id() -> impl Strategy<Value = [u8; ID_LEN]> {
        prop_oneof![
            any::<[u8; ID_LEN]>(),
            (0..3u8, 0..3u8, any::<u8>()).prop_map(|(a, b, c)| {
                let mut id = [0u8; ID_LEN];
                id[0] = a;
                id[1..9].fill(b.wrapping_mul(0x7f));
                id[31] = c;
                id
            }),
        ]
    }

    proptest! {
        #[test]
        fn lookups_agree_with_a_sorted_list(
            mut ids in prop::collection::vec(id(), 0..400),
            probes in prop::collection::vec(id(), 0..40),
        ) {
            let bytes = index_of(&mut ids);
            let view = IndexView::parse(&bytes).unwrap();
            for key in ids.iter().chain(&probes) {
                let want = ids.partition_point(|i| i < key);
                let (got, end) = view.lower_bound(key);
                prop_assert_eq!(got, want);
                prop_assert_eq!(end, ids.partition_point(|i| i[0] <= key[0]));
                let found = view.position(&ObjectId::from_bytes(*key));
                prop_assert_eq!(found, ids.binary_search(key).ok());
            }
        }
    }

    proptest! {
        /// A damaged index (ids out of order, or starting with another
        /// byte than their fan-out range says): lookups may miss, never
        /// panic.
        #[test]
        fn lookups_in_a_damaged_index_never_panic(
            mut ids in prop::collection::vec(any::<[u8; ID_LEN]>(), 17..300),
            damage in prop::collection::vec(
                (
                    any::<prop::sample::Index>(),
                    // Random bytes, or a later first byte with a small value:
                    // an id above every key whose value is below theirs.
                    prop_oneof![any::<[u8; 9]>(), Just([0xff, 0, 0, 0, 0, 0, 0, 0, 0])],
                ),
                1..20,
            ),
            probes in prop::collection::vec(any::<[u8; ID_LEN]>(), 1..20),
        ) {
            // One fan-out range, long enough to interpolate in.
            for id in ids.iter_mut() {
                id[0] = 0;
            }
            let mut bytes = index_of(&mut ids);
            let n = ids.len();
            let ids_at = 16 + FANOUT_LEN;
            for (at, b) in &damage {
                let at = ids_at + at.index(n) * ID_LEN;
                bytes[at..at + 9].copy_from_slice(b);
            }
            let view = IndexView::parse(&bytes).unwrap();
            for key in ids.iter().chain(&probes) {
                let mut key = *key;
                key[0] = 0;
                let _ = view.lower_bound(&key);
                let _ = view.position(&ObjectId::from_bytes(key));
            }
        }
    }

    #[test]
    fn a_lookup_among_many_uniform_ids_probes_few() {
        // 256k ids from blake3, about 1k to a fan-out range: a binary
        // search reads 10 or 11 of them per lookup; interpolating, fewer.
        let mut ids: Vec<[u8; ID_LEN]> = (0u32..262_144)
            .map(|i| *blake3::hash(&i.to_le_bytes()).as_bytes())
            .collect();
        let bytes = index_of(&mut ids);
        let view = IndexView::parse(&bytes).unwrap();
        let mut lookups = 0;
        PROBES.with(|p| p.set(0));
        for k in (0u32..262_144).step_by(61) {
            let id = *blake3::hash(&k.to_le_bytes()).as_bytes();
            let absent = *blake3::hash(&(k + 1_000_000).to_le_bytes()).as_bytes();
            assert!(view.lower_bound(&id).0 == ids.binary_search(&id).unwrap());
            assert!(ids.binary_search(&absent).is_err());
            assert_eq!(
                view.lower_bound(&absent).0,
                ids.partition_point(|i| *i < absent)
            );
            lookups += 2;
        }
        let per_lookup = PROBES.with(|p| p.get()) as f64 / lookups as f64;
        assert!(per_lookup < 8.0, "{per_lookup:.1} ids read per lookup");
    }
}
