//! What a writer reads while it holds the write lock ([`UnderLock`]): the
//! chain head that came with the lock, index keys, and whether objects are
//! stored, each asked of PostgreSQL once per write, most of them ahead:
//! in the round trip that takes the lock when the writer said beforehand
//! what it will read ([`super::KeptIndex::read_with_lock`]), else in one
//! of their own ([`RemoteBackend::read_ahead`]). Nothing committed can
//! change while the lock is held, so an answer read under it holds until
//! the lock's transaction ends, when it is forgotten
//! ([`super::RemoteLock::forget_reads`]).

use postgres::types::Type;

use super::conn::Conn;
use super::{RemoteBackend, UnderLock};
use crate::error::Result;
use crate::hash::{IdSet, ObjectId};

impl RemoteBackend {
    /// Runs `f` on what this handle read under the write lock; `None` when
    /// it does not hold the lock.
    pub(super) fn under_lock<T>(&self, f: impl FnOnce(&mut UnderLock) -> T) -> Option<T> {
        self.under_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .map(f)
    }

    /// Whether this handle holds the write lock.
    pub(super) fn holds_lock(&self) -> bool {
        self.under_lock(|_| ()).is_some()
    }

    /// Reads ahead, in one query, the index keys and whether each object of
    /// `ids` is stored, for a write under the lock that is about to ask;
    /// what was read already is not asked again. Nothing outside the lock.
    pub(super) fn read_ahead(&self, keys: &[Vec<u8>], ids: &[ObjectId]) -> Result<()> {
        let Some((epoch, keys, ids)) = self.under_lock(|u| {
            let keys: Vec<&[u8]> = keys
                .iter()
                .filter(|k| !u.keys.contains_key(*k))
                .map(Vec::as_slice)
                .collect();
            let ids: Vec<&[u8]> = ids
                .iter()
                .filter(|id| !u.stored.contains_key(*id))
                .map(|id| id.as_bytes().as_slice())
                .collect();
            (u.epoch, keys, ids)
        }) else {
            return Ok(());
        };
        if keys.is_empty() && ids.is_empty() {
            return Ok(());
        }
        let rows = self.with_reader(|c| {
            let st = c.prepared(
                "SELECT key, value FROM sessctl.index_keys WHERE key = ANY($1)
                 UNION ALL
                 SELECT id, NULL FROM sessctl.objects WHERE id = ANY($2)",
                &[Type::BYTEA_ARRAY, Type::BYTEA_ARRAY],
            )?;
            c.query(&st, &[&keys, &ids])
        })?;
        self.under_lock(|u| {
            if u.epoch == epoch {
                u.absorb(
                    keys.iter().copied(),
                    ids.iter().copied(),
                    rows.iter().map(|r| (r.get(0), r.get(1))),
                );
            }
        });
        Ok(())
    }

    /// [`READ_AHEAD`], prepared on the writer connection `c` (an SQL
    /// `PREPARE`, which the lock's simple query can `EXECUTE`), once for as
    /// long as it lasts.
    pub(super) fn read_ahead_prepared(&self, c: &mut Conn) -> Result<()> {
        c.prepare_sql(
            READ_AHEAD,
            "(bytea[], bytea[]) AS
             SELECT encode(key, 'hex'), encode(value, 'hex') FROM sessctl.index_keys
             WHERE key = ANY($1)
             UNION ALL
             SELECT encode(id, 'hex'), NULL FROM sessctl.objects WHERE id = ANY($2)",
        )
        .map_err(|e| self.pg_error(e))
    }

    /// Which of `ids` an `objects` row names, under the write lock:
    /// PostgreSQL's answer (read ahead, or asked now in one query), never
    /// one remembered from before the lock. An object this handle saw that
    /// a gc dropped since is forgotten here, so that the write packs it
    /// again.
    pub(super) fn stored_locked(&self, ids: &[ObjectId]) -> Result<IdSet> {
        let mut answers = None;
        // Twice at most: another thread's hold of the lock may end, and a
        // new one begin, between the read and the answers.
        for _ in 0..2 {
            self.read_ahead(&[], ids)?;
            let got: Option<Option<Vec<(ObjectId, bool)>>> = self.under_lock(|u| {
                ids.iter()
                    .map(|id| u.stored.get(id).map(|there| (*id, *there)))
                    .collect()
            });
            match got {
                Some(Some(a)) => {
                    answers = Some(a);
                    break;
                }
                Some(None) => continue,
                None => break,
            }
        }
        let Some(answers) = answers else {
            // The lock is no longer held: the answer of any read, asked in
            // one query.
            self.locate(ids)?;
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            return Ok(ids
                .iter()
                .filter(|id| known.objects.contains_key(*id))
                .copied()
                .collect());
        };
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        let mut out = IdSet::default();
        for (id, there) in answers {
            if there {
                out.insert(id);
            } else {
                known.objects.remove(&id);
            }
        }
        Ok(out)
    }

    /// `contains` under the write lock (see [`RemoteBackend::stored_locked`]).
    pub(super) fn contains_locked(&self, id: &ObjectId) -> Result<bool> {
        Ok(self.stored_locked(std::slice::from_ref(id))?.contains(id))
    }

    /// A key's value as read under the write lock: `Some(answer)` when it
    /// was read, `None` when it must be asked.
    pub(super) fn key_under_lock(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        self.under_lock(|u| u.keys.get(key).cloned()).flatten()
    }

    /// Keeps a key's value read during hold `epoch` of the write lock, if
    /// that hold goes on.
    pub(super) fn remember_key(&self, epoch: u64, key: &[u8], value: &Option<Vec<u8>>) {
        self.under_lock(|u| {
            if u.epoch == epoch {
                u.keys.insert(key.to_vec(), value.clone());
            }
        });
    }
}

/// The name of the writer connection's prepared read ahead (see
/// [`RemoteBackend::read_ahead_prepared`]).
pub(super) const READ_AHEAD: &str = "sessctl_read_ahead";

impl UnderLock {
    /// Keeps the answers of a read ahead of `keys` and of whether `ids`
    /// are stored: `rows` holds a key and its value for each key that is
    /// there, an id and `None` for each object that is stored; what is
    /// asked and not among them is not there.
    pub(super) fn absorb<'k>(
        &mut self,
        keys: impl Iterator<Item = &'k [u8]>,
        ids: impl Iterator<Item = &'k [u8]>,
        rows: impl IntoIterator<Item = (Vec<u8>, Option<Vec<u8>>)>,
    ) {
        for k in keys {
            self.keys.entry(k.to_vec()).or_insert(None);
        }
        for id in ids {
            if let Some(id) = ObjectId::from_slice(id) {
                self.stored.insert(id, false);
            }
        }
        for (k, v) in rows {
            match v {
                Some(v) => {
                    self.keys.insert(k, Some(v));
                }
                // An object row (a key's value is never NULL).
                None => {
                    if let Some(id) = ObjectId::from_slice(&k) {
                        self.stored.insert(id, true);
                    }
                }
            }
        }
    }
}
