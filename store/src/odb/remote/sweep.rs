//! gc and repack on a remote store (objects-format.md, "Remote gc"): drop
//! the object rows gc found unreachable, merge small packs into one, retire
//! the packs no row names any more, and delete from the bucket the packs
//! nothing names once they are past the grace period.
//!
//! It must never delete a pack a row names, nor one a concurrent writer may
//! still commit rows for. PostgreSQL changes come first, in one transaction
//! under the write lock (`chain_head FOR UPDATE`); S3 deletes come after
//! that commit, in a second pass that again holds the write lock while it
//! reads the `packs` table and deletes. A writer checks, under the same
//! lock, that the pack it staged is still in the bucket before it commits
//! rows naming it ([`RemoteBackend::staged_still_there`]), so a writer's
//! commit is either before the pass (the pass sees its row and keeps the
//! pack) or after it (the writer sees the pack gone and uploads it again).

use std::collections::{HashMap, HashSet};

use object_store::{ObjectStore, ObjectStoreExt};
use postgres::types::Type;
use postgres::Client;

use super::{
    pack, pack_key, Loc, PackRow, Plans, RemoteBackend, Staged, INLINE_SCHEMA, SWEEPS_SCHEMA,
};
use crate::error::{Error, Result};
use crate::hash::{IdSet, ObjectId};
use crate::object::EncodedObject;
use crate::odb::{Held, RepackStats, Rescue};

/// Packs smaller than this are merged by gc and repack: one pack per write
/// leaves many tiny S3 objects, each a request to fetch.
pub(super) const SMALL_PACK_BYTES: u64 = 4 << 20;

/// The schema version that has `sessctl.retired_packs` (migration 0003).
const RETIRED_PACKS_SCHEMA: i32 = 3;

/// A pack row, with the objects its rows place in it.
struct Listed {
    row: PackRow,
    objects: Vec<(ObjectId, Loc)>,
}

/// Which packs a sweep merges (beside those that lose objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Merge {
    /// gc and repack: the small packs, and every inline one.
    Small,
    /// The seal: the inline packs only (and only they are listed).
    Inline,
}

/// What [`RemoteBackend::prune_bucket`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct BucketPrune {
    /// Packs deleted from the bucket.
    pub deleted: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Packs no row names kept because they are younger than the cutoff.
    pub kept_young: usize,
}

impl RemoteBackend {
    /// Under the write lock, before rows naming `staged` are inserted: the
    /// pack must still be in the bucket (a gc may have deleted it as an
    /// orphan while this writer waited for the lock). Nothing to check when
    /// no sweep can have deleted it: `chain_head.sweeps` was even (none
    /// under way) before the upload began and is the same under the lock
    /// (none since; see [`RemoteBackend::prune_bucket`]). Else one HEAD
    /// when it is there; uploaded again from `new` when it is not. A check
    /// rather than an upload every time: uploading holds every writer
    /// behind this one for as long as the pack takes to send.
    pub(super) fn staged_still_there(
        &self,
        staged: Staged,
        new: &[&EncodedObject],
    ) -> Result<Staged> {
        if staged.inline.is_some() {
            // Its row will hold it: nothing in the bucket to lose.
            return Ok(staged);
        }
        let now = self.under_lock(|u| u.sweeps).flatten();
        if let (Some(seen), Some(now)) = (staged.sweeps_seen, now) {
            if seen % 2 == 0 && seen == now {
                return Ok(staged);
            }
        }
        let key = self.url.key(&pack_key(&staged.name));
        match self.rt.block_on(self.s3.head(&key)) {
            Ok(_) => Ok(staged),
            Err(object_store::Error::NotFound { .. }) => self.upload(new),
            Err(e) => Err(self.s3_error(e)),
        }
    }

    /// The schema version in PostgreSQL.
    fn schema_version(&self) -> Result<i32> {
        let v = self.with_reader(|c| {
            c.query_one("SELECT max(version) FROM sessctl.schema_version", &[])
                .map(|r| r.get::<_, Option<i32>>(0))
        })?;
        Ok(v.unwrap_or(0))
    }

    fn needs_retired_packs(&self, what: &str) -> Result<()> {
        let v = self.schema_version()?;
        if v < RETIRED_PACKS_SCHEMA {
            return Err(Error::Invalid(format!(
                "{}: {what} needs schema version {RETIRED_PACKS_SCHEMA} (this store has {v}); \
                 `sessctl init --store URL` upgrades it",
                self.url.shown
            )));
        }
        Ok(())
    }

    /// The pack rows `merge` may touch (every one for gc and repack, the
    /// inline ones for a seal) with the objects rows place in them, in one
    /// snapshot.
    fn listing(&self, merge: Merge) -> Result<HashMap<i64, Listed>> {
        let (packs_sql, objects_sql) = match merge {
            Merge::Small => (
                format!(
                    "SELECT p.id, p.key, p.bytes, p.created_at, {} FROM sessctl.packs p",
                    self.inline_column()
                ),
                "SELECT id, pack, kind, off, len FROM sessctl.objects",
            ),
            Merge::Inline => (
                "SELECT p.id, p.key, p.bytes, p.created_at, true FROM sessctl.packs p
                 WHERE p.body IS NOT NULL"
                    .to_owned(),
                "SELECT o.id, o.pack, o.kind, o.off, o.len FROM sessctl.objects o
                 WHERE o.pack IN (SELECT id FROM sessctl.packs WHERE body IS NOT NULL)",
            ),
        };
        let (packs, objects) = self.with_reader(|c| {
            let mut tx = c
                .build_transaction()
                .read_only(true)
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .start()?;
            let packs = tx.query(&packs_sql, &[])?;
            let objects = tx.query(objects_sql, &[])?;
            tx.commit()?;
            Ok((packs, objects))
        })?;
        let mut out: HashMap<i64, Listed> = packs
            .iter()
            .map(|r| {
                (
                    r.get::<_, i64>(0),
                    Listed {
                        row: PackRow {
                            key: r.get(1),
                            bytes: r.get::<_, i64>(2).max(0) as u64,
                            created_at: r.get(3),
                            inline: r.get(4),
                        },
                        objects: Vec::new(),
                    },
                )
            })
            .collect();
        for r in &objects {
            let raw: Vec<u8> = r.get(0);
            let pack: i64 = r.get(1);
            let loc = self.loc(&raw, pack, r.get(2), r.get(3), r.get(4))?;
            if let Some(p) = out.get_mut(&pack) {
                p.objects.push(loc);
            }
        }
        Ok(out)
    }

    /// Seals the inline packs into one pack in the bucket (objects-format.md,
    /// "Inline packs"): [`RemoteBackend::sweep_rows`] merging those alone.
    /// One sealer at a time, on any machine (an advisory lock on the writer
    /// connection, let go by the server if this process dies): a writer
    /// that finds another sealing leaves it to that one (`None`).
    pub(super) fn seal(&self) -> Result<Option<RepackStats>> {
        let got: bool = self.with_writer_conn(|c| {
            c.query_one("SELECT pg_try_advisory_lock(hashtext('sessctl seal'))", &[])
                .map(|r| r.get(0))
        })?;
        if !got {
            return Ok(None);
        }
        let sealed = self.sweep(Merge::Inline, &IdSet::default(), None);
        let unlocked = self.with_writer_conn(|c| {
            c.execute("SELECT pg_advisory_unlock(hashtext('sessctl seal'))", &[])
        });
        let sealed = sealed?;
        unlocked?;
        Ok(Some(sealed))
    }

    /// gc's sweep and repack: [`RemoteBackend::sweep`] of the small packs.
    pub(super) fn sweep_rows(
        &self,
        doomed: &IdSet,
        rescue: Option<&Rescue<'_>>,
    ) -> Result<RepackStats> {
        self.sweep(Merge::Small, doomed, rescue)
    }

    /// gc's sweep, repack (`doomed` empty) and the seal (`Merge::Inline`):
    /// see the module's documentation. Drops the rows of `doomed` but those
    /// `rescue` names under the lock, rewrites the live objects of the
    /// packs that lose some and of those `merge` names into one new pack in
    /// the bucket, and retires the packs no row names afterwards. Deletes
    /// nothing from the bucket; an inline pack's bytes go with its row.
    fn sweep(
        &self,
        merge_what: Merge,
        doomed: &IdSet,
        rescue: Option<&Rescue<'_>>,
    ) -> Result<RepackStats> {
        let listing = self.listing(merge_what)?;
        let packs_before = listing.len();
        let bytes_before: u64 = listing.values().map(|p| p.row.bytes).sum();
        let mut stats = RepackStats {
            packs_before,
            bytes_before,
            bytes_after: bytes_before,
            ..RepackStats::default()
        };
        // Which packs change: those losing objects (rewritten, or dropped
        // when nothing in them lives), and the small ones (merged).
        let mut touched: Vec<i64> = Vec::new();
        let mut merge: Vec<i64> = Vec::new();
        for (id, p) in &listing {
            let gone = p.objects.iter().filter(|(o, _)| doomed.contains(o)).count();
            if gone > 0 {
                touched.push(*id);
                if gone < p.objects.len() {
                    merge.push(*id);
                }
            } else if p.row.inline || p.row.bytes < SMALL_PACK_BYTES {
                merge.push(*id);
            }
        }
        // A lone small pack in the bucket stays as it is; an inline one
        // moves there, however alone.
        let must_move = merge.iter().any(|id| {
            let p = &listing[id];
            p.row.inline || p.objects.iter().any(|(o, _)| doomed.contains(o))
        });
        if merge.len() < 2 && !must_move {
            merge.clear();
        }
        if touched.is_empty() && merge.is_empty() {
            return Ok(stats);
        }
        // Changes to PostgreSQL need the table that remembers when a pack
        // was retired (its S3 object outlives its row by the grace period).
        // Without it, a gc that drops nothing leaves small packs as they
        // are; one that would drop objects is refused.
        if doomed.is_empty() && self.schema_version()? < RETIRED_PACKS_SCHEMA {
            return Ok(stats);
        }
        self.needs_retired_packs("dropping objects")?;
        merge.sort_unstable();
        touched.extend(merge.iter().copied());
        touched.sort_unstable();
        touched.dedup();

        // The new pack, uploaded (create-only) before the lock.
        {
            // Where the plan found them, for the reads below.
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            for p in &merge {
                known
                    .packs
                    .entry(*p)
                    .or_insert_with(|| listing[p].row.clone());
            }
        }
        let inline: Vec<(i64, String)> = merge
            .iter()
            .filter(|p| listing[*p].row.inline)
            .map(|p| (*p, listing[p].row.key.clone()))
            .collect();
        self.prefetch_inline(&inline)?;
        let mut moved: Vec<(ObjectId, i64)> = Vec::new();
        let mut live: Vec<EncodedObject> = Vec::new();
        for p in &merge {
            for (id, loc) in &listing[p].objects {
                if doomed.contains(id) {
                    continue;
                }
                live.push(self.read_at(id, *loc)?);
                moved.push((*id, *p));
            }
        }
        let built = if live.is_empty() {
            None
        } else {
            let refs: Vec<&EncodedObject> = live.iter().collect();
            let built = pack::build(&refs).map_err(|e| Error::Remote {
                what: self.url.s3_shown(),
                reason: format!("packing {} objects: {e}", refs.len()),
            })?;
            self.put_pack(&built)?;
            Some(built)
        };

        let lock = self.lock_chain(Plans::Chosen)?;
        let Held::Remote(held) = &lock.0 else {
            unreachable!("the remote backend's own lock");
        };
        let rescued: IdSet = match rescue {
            Some(r) => r()?.into_iter().collect(),
            None => IdSet::default(),
        };
        let dropping: Vec<Vec<u8>> = doomed
            .iter()
            .filter(|id| !rescued.contains(*id))
            .map(|id| id.as_bytes().to_vec())
            .collect();
        let now = crate::time::now_ms();
        let mut conn = held.conn.borrow_mut();
        let c: &mut Client = conn.as_mut().expect("a held lock has its connection");
        let pg = |e| self.pg_error(e);
        let mut new_row = None;
        if let Some(b) = &built {
            // Ours, uploaded just now, unless the same bytes were there
            // already: a pack some gc may delete, so checked as a writer's.
            let staged = self.staged_still_there(
                Staged {
                    name: b.name.clone(),
                    bytes: b.bytes.len() as u64,
                    entries: b.entries.iter().map(|e| (e.id, *e)).collect(),
                    sweeps_seen: None,
                    body: std::sync::Arc::new(Vec::new()),
                    inline: None,
                },
                &live.iter().collect::<Vec<_>>(),
            )?;
            let row: i64 = c
                .query_one(
                    "INSERT INTO sessctl.packs (key, bytes, created_at) VALUES ($1, $2, $3)
                     ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key RETURNING id",
                    &[&staged.name, &(staged.bytes as i64), &now],
                )
                .map_err(pg)?
                .get(0);
            c.execute(
                "DELETE FROM sessctl.retired_packs WHERE key = $1",
                &[&staged.name],
            )
            .map_err(pg)?;
            let (mut ids, mut olds, mut offs, mut lens) = (vec![], vec![], vec![], vec![]);
            for (id, old) in &moved {
                let e = staged.entries[id];
                ids.push(id.as_bytes().to_vec());
                olds.push(*old);
                offs.push(e.off as i64);
                lens.push(e.len as i64);
            }
            // Only rows still where the plan found them.
            c.execute(
                "UPDATE sessctl.objects o SET pack = $2, off = t.f, len = t.l
                 FROM unnest($1::bytea[], $3::int8[], $4::int8[], $5::int8[]) AS t(i, p, f, l)
                 WHERE o.id = t.i AND o.pack = t.p",
                &[&ids, &row, &olds, &offs, &lens],
            )
            .map_err(pg)?;
            touched.push(row);
            new_row = Some((row, staged));
        }
        c.execute(
            "DELETE FROM sessctl.objects WHERE id = ANY($1::bytea[])",
            &[&dropping],
        )
        .map_err(pg)?;
        self.forget_lineage(c, &dropping)?;
        let retired = c
            .query(
                &format!(
                    "DELETE FROM sessctl.packs p WHERE p.id = ANY($1::int8[])
                     AND NOT EXISTS (SELECT 1 FROM sessctl.objects o WHERE o.pack = p.id)
                     RETURNING p.id, p.key, {}",
                    self.inline_column()
                ),
                &[&touched],
            )
            .map_err(pg)?;
        let retired: Vec<(i64, String, bool)> = retired
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        // Only a pack in the bucket outlives its row there; an inline
        // pack's bytes went with it.
        let keys: Vec<&String> = retired.iter().filter(|r| !r.2).map(|r| &r.1).collect();
        c.execute(
            "INSERT INTO sessctl.retired_packs (key, retired_at) SELECT k, $2 FROM unnest($1::text[]) AS t(k)
             ON CONFLICT (key) DO UPDATE SET retired_at = EXCLUDED.retired_at",
            &[&keys, &now],
        )
        .map_err(pg)?;
        if self.schema >= INLINE_SCHEMA {
            // The writers' running figure, set again from the table.
            c.batch_execute(
                "UPDATE sessctl.chain_head SET inline_bytes =
                     (SELECT coalesce(sum(bytes), 0) FROM sessctl.packs WHERE body IS NOT NULL)",
            )
            .map_err(pg)?;
        }
        c.batch_execute("COMMIT")
            .map_err(|e| match self.pg_error(e) {
                Error::Remote { what, reason } => Error::Remote {
                    what,
                    reason: format!("committing gc (it may or may not have landed): {reason}"),
                },
                e => e,
            })?;
        held.open.set(false);
        drop(conn);

        // This handle's memory of the tables, as committed.
        {
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            for id in doomed.iter().filter(|id| !rescued.contains(*id)) {
                known.objects.remove(id);
            }
            if let Some((row, staged)) = &new_row {
                for (id, old) in &moved {
                    let e = staged.entries[id];
                    if known.objects.get(id).is_some_and(|l| l.pack == *old) {
                        known.objects.insert(
                            *id,
                            Loc {
                                pack: *row,
                                kind: e.kind,
                                off: e.off,
                                len: e.len,
                            },
                        );
                    }
                }
                known.packs.insert(
                    *row,
                    PackRow {
                        key: staged.name.clone(),
                        bytes: staged.bytes,
                        created_at: now,
                        inline: false,
                    },
                );
            }
            let gone: HashSet<i64> = retired.iter().map(|r| r.0).collect();
            known.objects.retain(|_, l| !gone.contains(&l.pack));
            known.packs.retain(|p, _| !gone.contains(p));
        }
        drop(lock);
        let after = self.listing(merge_what)?;
        stats.objects = moved.len();
        stats.bytes_after = after.values().map(|p| p.row.bytes).sum();
        stats.pack_name = new_row.map(|(_, s)| s.name);
        stats.rescued = rescued.into_iter().collect();
        stats.rescued.sort_unstable();
        Ok(stats)
    }

    /// Deletes from the bucket the packs under the store's prefix that no
    /// `packs` row names, last modified before `before_ms` and, if retired,
    /// retired before it too; forgets the retirements of packs gone. Holds
    /// the write lock from reading the `packs` table to the last delete.
    ///
    /// Sweeps are announced in `chain_head.sweeps` (schema version 4), for
    /// writers to know when their staged pack cannot have been deleted (see
    /// [`RemoteBackend::staged_still_there`]): one sweep at a time (an
    /// advisory lock on the writer connection, which the server lets go if
    /// this process dies), an odd value committed before the listing, the
    /// next even one in the transaction that ends the deletes. A sweep that
    /// dies midway leaves the value odd: every writer checks its pack until
    /// the next sweep ends.
    pub(super) fn prune_bucket(&self, before_ms: i64) -> Result<BucketPrune> {
        let announce = self.schema >= SWEEPS_SCHEMA;
        if !announce {
            return self.prune_bucket_locked(before_ms, false);
        }
        self.with_writer_conn(|c| {
            c.execute("SELECT pg_advisory_lock(hashtext('sessctl sweep'))", &[])
        })?;
        let pruned = self
            .begin_sweep()
            .and_then(|()| self.prune_bucket_locked(before_ms, true));
        let unlocked = self.with_writer_conn(|c| {
            c.execute("SELECT pg_advisory_unlock(hashtext('sessctl sweep'))", &[])
        });
        let out = pruned?;
        unlocked?;
        Ok(out)
    }

    /// Commits an odd `chain_head.sweeps`, above every value before it:
    /// a sweep is under way.
    fn begin_sweep(&self) -> Result<()> {
        let lock = self.lock_chain(Plans::Chosen)?;
        let Held::Remote(held) = &lock.0 else {
            unreachable!("the remote backend's own lock");
        };
        let mut conn = held.conn.borrow_mut();
        let c: &mut Client = conn.as_mut().expect("a held lock has its connection");
        c.batch_execute("UPDATE sessctl.chain_head SET sweeps = (sweeps | 1) + 2")
            .map_err(|e| self.pg_error(e))?;
        held.commit(c).map_err(|e| self.pg_error(e))
    }

    fn prune_bucket_locked(&self, before_ms: i64, announce: bool) -> Result<BucketPrune> {
        let mut out = BucketPrune::default();
        let prefix = self.url.key("packs");
        let listed = self
            .rt
            .block_on(self.s3.list_with_delimiter(Some(&prefix)))
            .map_err(|e| self.s3_error(e))?;
        let lock = self.lock_chain(Plans::Chosen)?;
        let Held::Remote(held) = &lock.0 else {
            unreachable!("the remote backend's own lock");
        };
        let mut conn = held.conn.borrow_mut();
        let c: &mut Client = conn.as_mut().expect("a held lock has its connection");
        let pg = |e| self.pg_error(e);
        let named: HashSet<String> = c
            .query("SELECT key FROM sessctl.packs", &[])
            .map_err(pg)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let v3 = self.schema_version()? >= RETIRED_PACKS_SCHEMA;
        let retired: HashMap<String, i64> = if v3 {
            c.query("SELECT key, retired_at FROM sessctl.retired_packs", &[])
                .map_err(pg)?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect()
        } else {
            HashMap::new()
        };
        let mut in_bucket: HashSet<String> = HashSet::new();
        let mut gone: Vec<String> = Vec::new();
        for meta in &listed.objects {
            let Some(name) = meta
                .location
                .filename()
                .and_then(|f| f.strip_suffix(".srpk"))
                .map(str::to_owned)
            else {
                continue;
            };
            in_bucket.insert(name.clone());
            if named.contains(&name) {
                continue;
            }
            let modified = meta.last_modified.timestamp_millis();
            let retired_at = retired.get(&name).copied().unwrap_or(i64::MIN);
            if modified >= before_ms || retired_at >= before_ms {
                out.kept_young += 1;
                continue;
            }
            match self.rt.block_on(self.s3.delete(&meta.location)) {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.s3_error(e)),
            }
            self.forget_cached(&name);
            out.deleted += 1;
            out.bytes += meta.size;
            gone.push(name);
        }
        if v3 {
            // Retirements of packs no longer in the bucket (deleted now, or
            // by a gc that stopped before this).
            let stale: Vec<&String> = retired
                .iter()
                .filter(|(k, at)| **at < before_ms && !in_bucket.contains(*k))
                .map(|(k, _)| k)
                .chain(gone.iter())
                .collect();
            c.execute(
                "DELETE FROM sessctl.retired_packs WHERE key = ANY($1::text[])",
                &[&stale],
            )
            .map_err(pg)?;
        }
        if announce {
            // The sweep is over: the even value after this one's.
            c.batch_execute("UPDATE sessctl.chain_head SET sweeps = sweeps + 1")
                .map_err(pg)?;
        }
        held.commit(c).map_err(pg)?;
        Ok(out)
    }

    /// Drops a deleted pack from this handle's cache directory.
    fn forget_cached(&self, name: &str) {
        if let Some(dir) = &self.cache_dir {
            let _ = std::fs::remove_file(dir.join(format!("{name}.srpk")));
        }
    }

    /// `read` for an object whose remembered pack is gone (merged by a gc
    /// and deleted past the grace period): its row read again.
    /// Returns its pack row now (`None`: gc dropped it).
    pub(super) fn relocate(&self, id: &ObjectId) -> Result<Option<i64>> {
        let sql = format!("SELECT {} WHERE o.id = $1", self.row_columns());
        let rows =
            self.with_reader(|c| c.query_typed(&sql, &[(&id.as_bytes().as_slice(), Type::BYTEA)]))?;
        if rows.is_empty() {
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            known.objects.remove(id);
            return Ok(None);
        }
        self.remember_rows(&rows)?;
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        Ok(known.objects.get(id).map(|l| l.pack))
    }
}
