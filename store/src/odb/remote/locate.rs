//! Where each object lives (its `sessctl.objects` row, with its pack's
//! `sessctl.packs` row), looked up on demand (objects-format.md, "Remote
//! store", "Object rows"): a read asks for the objects it needs, a batch at
//! a time, and the handle keeps what it found ([`super::Known`]).
//!
//! It must never remember an absence: another process may store the object
//! a moment later, so a handle told "absent" asks again the next time. A
//! location found stays right until a gc or repack moves the object, and
//! the old pack stays readable for the grace period; a read that then
//! fails looks the row up again ([`RemoteBackend::relocate`]). Under the
//! write lock, whether an object is stored is PostgreSQL's answer, never
//! this memory (see `locked.rs`). Only the verbs that need every object
//! (gc's marking, fsck, a scan, a reindex) read the whole table, and only
//! when they run ([`RemoteBackend::load_rows`]).

use std::sync::atomic::Ordering;

use postgres::types::Type;

use super::{PackRow, RemoteBackend};
use crate::error::Result;
use crate::hash::{IdSet, ObjectId, Prefix};
use crate::odb::OdbStats;

/// Ids looked up per statement at most: a longer list is asked for in
/// several (a statement's parameters stay a few hundred KiB).
const LOCATE_BATCH: usize = 10_000;

impl RemoteBackend {
    /// What every lookup of object rows selects, and from where, in the
    /// order [`RemoteBackend::remember_rows`] reads it.
    pub(super) fn row_columns(&self) -> String {
        format!(
            "o.id, o.pack, o.kind, o.off, o.len, p.key, p.bytes, p.created_at, {}
             FROM sessctl.objects o JOIN sessctl.packs p ON p.id = o.pack",
            self.inline_column()
        )
    }

    /// Looks up where those of `ids` this handle does not know live: one
    /// query (`id = ANY(...)`, on the primary key, prepared once per
    /// connection: every commit asks it) for up to [`LOCATE_BATCH`] of
    /// them. What is found is kept; what is not is
    /// not remembered.
    pub(super) fn locate(&self, ids: &[ObjectId]) -> Result<()> {
        let missing: Vec<&[u8]> = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            let mut seen = IdSet::default();
            ids.iter()
                .filter(|id| !known.objects.contains_key(*id) && seen.insert(**id))
                .map(|id| id.as_bytes().as_slice())
                .collect()
        };
        let sql = format!("SELECT {} WHERE o.id = ANY($1)", self.row_columns());
        for batch in missing.chunks(LOCATE_BATCH) {
            let rows = self.with_reader(|c| {
                let st = c.prepared(&sql, &[Type::BYTEA_ARRAY])?;
                c.query(&st, &[&batch])
            })?;
            self.remember_rows(&rows)?;
        }
        Ok(())
    }

    /// The ids that start with `prefix`, sorted: a range scan of the
    /// primary key (`bytea` compares byte by byte, as ids sort), their rows
    /// kept as [`RemoteBackend::locate`] keeps them.
    pub(super) fn located_with_prefix(&self, prefix: &Prefix) -> Result<Vec<ObjectId>> {
        let (lower, upper) = id_range(prefix);
        let rows = match &upper {
            Some(upper) => {
                let sql = format!(
                    "SELECT {} WHERE o.id >= $1 AND o.id < $2",
                    self.row_columns()
                );
                self.with_reader(|c| {
                    c.query_typed(&sql, &[(&lower, Type::BYTEA), (upper, Type::BYTEA)])
                })?
            }
            None => {
                let sql = format!("SELECT {} WHERE o.id >= $1", self.row_columns());
                self.with_reader(|c| c.query_typed(&sql, &[(&lower, Type::BYTEA)]))?
            }
        };
        let mut ids = self.remember_rows(&rows)?;
        ids.retain(|id| prefix.matches(id));
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// Keeps the places `rows` (of [`RemoteBackend::row_columns`]) give,
    /// and their packs; returns their ids, in the order of the rows.
    pub(super) fn remember_rows(&self, rows: &[postgres::Row]) -> Result<Vec<ObjectId>> {
        self.counts
            .object_rows
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        for r in rows {
            let id: Vec<u8> = r.get(0);
            let (id, loc) = self.loc(&id, r.get(1), r.get(2), r.get(3), r.get(4))?;
            known.objects.insert(id, loc);
            known.packs.entry(loc.pack).or_insert_with(|| PackRow {
                key: r.get(5),
                bytes: r.get::<_, i64>(6).max(0) as u64,
                created_at: r.get(7),
                inline: r.get(8),
            });
            ids.push(id);
        }
        Ok(ids)
    }

    /// The storage figures, counted by PostgreSQL in one query (no row
    /// sent): the packs that hold objects (a write whose objects another
    /// writer stored first leaves a pack row that holds none), their
    /// bytes, and the objects.
    pub(super) fn counted_stats(&self) -> Result<OdbStats> {
        let row = self.with_reader(|c| {
            c.query_typed_one(
                "SELECT count(*), coalesce(sum(p.bytes), 0)::int8,
                        (SELECT count(*) FROM sessctl.objects)
                 FROM sessctl.packs p
                 WHERE EXISTS (SELECT 1 FROM sessctl.objects o WHERE o.pack = p.id)",
                &[],
            )
        })?;
        let n = |i: usize| row.get::<_, i64>(i).max(0) as u64;
        Ok(OdbStats {
            packs: n(0) as usize,
            pack_bytes: n(1),
            pack_objects: n(2) as usize,
            ..OdbStats::default()
        })
    }
}

/// The ids `prefix` matches as a range of the primary key: from its bytes
/// (an odd digit is the high nibble of the last one) to the first key past
/// them (`None`: there is none, every digit is `f`).
fn id_range(prefix: &Prefix) -> (Vec<u8>, Option<Vec<u8>>) {
    let full = prefix.hex_len() / 2;
    let bound = prefix.lower_bound();
    let lower = bound.as_bytes()[..prefix.hex_len().div_ceil(2)].to_vec();
    let mut last = lower[..full].to_vec();
    if prefix.hex_len() % 2 == 1 {
        // The range runs to the end of that nibble's sixteen values.
        last.push(lower[full] | 0x0f);
    }
    (lower, super::super::prefix_end(&last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_a_range_of_ids() {
        let range = |hex: &str| id_range(&Prefix::from_hex(hex).unwrap());
        assert_eq!(range("abcd"), (vec![0xab, 0xcd], Some(vec![0xab, 0xce])));
        assert_eq!(
            range("abcde"),
            (vec![0xab, 0xcd, 0xe0], Some(vec![0xab, 0xcd, 0xf0]))
        );
        // The last nibble carries into the bytes before it.
        assert_eq!(
            range("abcdf"),
            (vec![0xab, 0xcd, 0xf0], Some(vec![0xab, 0xce]))
        );
        assert_eq!(range("abff"), (vec![0xab, 0xff], Some(vec![0xac])));
        assert_eq!(range("ffff"), (vec![0xff, 0xff], None));
        assert_eq!(range("fffff"), (vec![0xff, 0xff, 0xf0], None));
        let id = ObjectId::from_bytes([0x5a; 32]);
        let (lower, upper) = range(&id.to_hex());
        assert_eq!(lower, id.as_bytes().to_vec());
        let mut next = id.as_bytes().to_vec();
        next[31] += 1;
        assert_eq!(upper, Some(next));
    }
}
