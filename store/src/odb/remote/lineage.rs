//! Each stored session's lineage in PostgreSQL (`sessctl.lineage`, schema
//! version 5; objects-format.md, "Lineage rows"): its parents and creation
//! time, written in the transaction that stores the session, dropped in the
//! one in which gc drops it, and read by walks a closure at a time (one
//! recursive query for up to [`ObjectBackend::lineage_closure`]'s bound of
//! ancestors) instead of one lookup a session.
//!
//! A row is derived from its session object's decoded bytes and never
//! changes (an id fixes its parents). This module must never write a row
//! that differs from its object: a row that is missing (a session stored
//! before the table, until `sessctl reindex`) only costs a walk a round
//! trip, one that is wrong would give wrong answers; `fsck --full` checks
//! every row against its object.
//!
//! [`ObjectBackend::lineage_closure`]: super::ObjectBackend::lineage_closure

use postgres::types::Type;
use postgres::Client;

use super::{Held, RemoteBackend};
use crate::error::{Error, Result};
use crate::hash::{IdMap, ObjectId};
use crate::object::{EncodedObject, ObjectKind, Session};
use crate::odb::{LineageRow, ObjectBackend};

/// The schema version that added `sessctl.lineage`
/// (objects-format.md, "Lineage rows").
pub const LINEAGE_SCHEMA: i32 = 5;

/// Rows written per statement by a rebuild.
const CHUNK: usize = 10_000;

/// Rows as one `INSERT ... SELECT FROM unnest(...)` takes them: ids, each
/// session's parents as one `bytea` of 32-byte ids back to back (a
/// two-dimensional array must be rectangular), and times.
#[derive(Debug, Default)]
pub(super) struct Columns {
    pub ids: Vec<Vec<u8>>,
    pub parents: Vec<Vec<u8>>,
    pub created: Vec<i64>,
}

impl Columns {
    /// The rows of the sessions among a write's new objects, decoded; a
    /// session that does not decode is refused, naming it. None before the
    /// table exists.
    pub(super) fn of_new(backend: &RemoteBackend, new: &[&EncodedObject]) -> Result<Columns> {
        let mut cols = Columns::default();
        if backend.schema < LINEAGE_SCHEMA {
            return Ok(cols);
        }
        for o in new.iter().filter(|o| o.kind() == ObjectKind::Session) {
            let s =
                Session::decode(o.payload()).map_err(|e| Error::corrupt(o.id(), e.to_string()))?;
            cols.push(&o.id(), &s);
        }
        Ok(cols)
    }

    fn push(&mut self, id: &ObjectId, s: &Session) {
        self.ids.push(id.as_bytes().to_vec());
        self.parents
            .push(s.parents.iter().flat_map(|p| *p.as_bytes()).collect());
        self.created.push(s.created_at);
    }
}

/// The rows of [`Columns`] passed as parameters `$ids`, `$parents` and
/// `$created` (their numbers), as an `INSERT ... SELECT` takes them: each
/// parents `bytea` split back into its 32-byte ids, in order.
pub(super) fn rows_of_columns(ids: usize, parents: usize, created: usize) -> String {
    format!(
        "SELECT t.i,
                ARRAY(SELECT substring(t.p FROM 1 + 32 * g FOR 32)
                      FROM generate_series(0, length(t.p) / 32 - 1) AS g ORDER BY g),
                t.c
         FROM unnest(${ids}::bytea[], ${parents}::bytea[], ${created}::int8[]) AS t(i, p, c)"
    )
}

/// The insert of [`Columns`] ($1 to $3) by a rebuild: only sessions stored
/// as such ($4, the kind code) get a row.
fn insert() -> String {
    format!(
        "INSERT INTO sessctl.lineage (id, parents, created_at) {}
         WHERE EXISTS (SELECT 1 FROM sessctl.objects o WHERE o.id = t.i AND o.kind = $4)",
        rows_of_columns(1, 2, 3)
    )
}

/// Up to `$2` rows: the session `$1` and its ancestors by every parent,
/// nearest first, each once (`UNION`), stopping at a session without a row.
const CLOSURE: &str = "WITH RECURSIVE walk(id, parents, created_at) AS (
         SELECT id, parents, created_at FROM sessctl.lineage WHERE id = $1
       UNION
         SELECT l.id, l.parents, l.created_at
         FROM walk w CROSS JOIN LATERAL unnest(w.parents) AS p(id)
         JOIN sessctl.lineage l ON l.id = p.id
     )
     SELECT id, parents, created_at FROM walk LIMIT $2";

fn session_code() -> i16 {
    i16::from(ObjectKind::Session.code())
}

/// A row as read, when well formed (`None`: an id that is not 32 bytes,
/// which a walk then reads from the object, and fsck names).
fn row(id: &[u8], parents: &[Vec<u8>], created_at: i64) -> Option<LineageRow> {
    Some(LineageRow {
        id: ObjectId::from_slice(id)?,
        parents: parents
            .iter()
            .map(|p| ObjectId::from_slice(p))
            .collect::<Option<Vec<_>>>()?,
        created_at,
    })
}

impl RemoteBackend {
    /// gc's part, in its open transaction: the rows of the objects it drops.
    pub(super) fn forget_lineage(&self, c: &mut Client, dropping: &[Vec<u8>]) -> Result<()> {
        if self.schema < LINEAGE_SCHEMA || dropping.is_empty() {
            return Ok(());
        }
        c.execute(
            "DELETE FROM sessctl.lineage WHERE id = ANY($1::bytea[])",
            &[&dropping],
        )
        .map_err(|e| self.pg_error(e))?;
        Ok(())
    }

    /// See [`ObjectBackend::lineage_closure`].
    pub(super) fn closure(&self, id: &ObjectId, n: usize) -> Result<Option<Vec<LineageRow>>> {
        if self.schema < LINEAGE_SCHEMA {
            return Ok(None);
        }
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let key = id.as_bytes().to_vec();
        let rows = self.with_reader(|c| {
            c.query_typed(CLOSURE, &[(&key, Type::BYTEA), (&limit, Type::INT8)])
        })?;
        Ok(Some(
            rows.iter()
                .filter_map(|r| {
                    row(
                        &r.get::<_, Vec<u8>>(0),
                        &r.get::<_, Vec<Vec<u8>>>(1),
                        r.get(2),
                    )
                })
                .collect(),
        ))
    }

    /// The stored sessions, in storage order, decoded (each verified).
    fn stored_sessions(&self) -> Result<Vec<(ObjectId, Session)>> {
        self.load_rows()?;
        let ids: Vec<ObjectId> = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            let mut v: Vec<(i64, u64, ObjectId)> = known
                .objects
                .iter()
                .filter(|(_, l)| l.kind == ObjectKind::Session)
                .map(|(id, l)| (l.pack, l.off, *id))
                .collect();
            v.sort_unstable();
            v.into_iter().map(|(_, _, id)| id).collect()
        };
        let mut out = Vec::with_capacity(ids.len());
        self.read_many(&ids, &mut |i, _, payload| {
            let s = Session::decode(payload).map_err(|e| Error::corrupt(ids[i], e.to_string()))?;
            out.push((ids[i], s));
            Ok(())
        })?;
        Ok(out)
    }

    /// See [`ObjectBackend::lineage_rebuild`]: every stored session's row
    /// written from its object (a wrong one corrected), and every row
    /// whose session is not stored deleted, in one transaction under the
    /// write lock (so that no gc drops a session in between).
    pub(super) fn rebuild_lineage(&self) -> Result<Option<usize>> {
        if self.schema < LINEAGE_SCHEMA || self.read_only {
            return Ok(None);
        }
        let sessions = self.stored_sessions()?;
        let lock = self.write_lock()?;
        let Held::Remote(held) = &lock.0 else {
            unreachable!("the remote backend's own lock");
        };
        let mut conn = held.conn.borrow_mut();
        let c = conn.as_mut().expect("a held lock has its connection");
        let pg = |e| self.pg_error(e);
        let mut written = 0;
        for chunk in sessions.chunks(CHUNK) {
            let mut cols = Columns::default();
            for (id, s) in chunk {
                cols.push(id, s);
            }
            written += c
                .execute(
                    &format!(
                        "{} ON CONFLICT (id) DO UPDATE
                         SET parents = EXCLUDED.parents, created_at = EXCLUDED.created_at",
                        insert()
                    ),
                    &[&cols.ids, &cols.parents, &cols.created, &session_code()],
                )
                .map_err(pg)?;
        }
        c.execute(
            "DELETE FROM sessctl.lineage l WHERE NOT EXISTS
               (SELECT 1 FROM sessctl.objects o WHERE o.id = l.id AND o.kind = $1)",
            &[&session_code()],
        )
        .map_err(pg)?;
        c.batch_execute("COMMIT").map_err(pg)?;
        held.open.set(false);
        Ok(Some(written as usize))
    }

    /// fsck `--full`'s part: each row against its session object. A row
    /// whose session is not stored, that does not parse, or whose parents
    /// or time are not the object's is named; a stored session without a
    /// row is not damage (it is read from its object).
    pub(super) fn verify_lineage(&self) -> Result<Vec<String>> {
        if self.schema < LINEAGE_SCHEMA {
            return Ok(Vec::new());
        }
        let rows = self
            .with_reader(|c| c.query("SELECT id, parents, created_at FROM sessctl.lineage", &[]))?;
        let shown = &self.url.shown;
        let mut problems = Vec::new();
        let mut kept: IdMap<LineageRow> = IdMap::default();
        for r in &rows {
            let id: Vec<u8> = r.get(0);
            match row(&id, &r.get::<_, Vec<Vec<u8>>>(1), r.get(2)) {
                Some(l) => {
                    kept.insert(l.id, l);
                }
                None => problems.push(format!(
                    "{shown}: the lineage row of {} holds an id that is not 32 bytes",
                    crate::hash::hex(&id)
                )),
            }
        }
        let stored: IdMap<Session> = self.stored_sessions()?.into_iter().collect();
        let mut ids: Vec<&ObjectId> = kept.keys().collect();
        ids.sort_unstable();
        for id in ids {
            let l = &kept[id];
            match stored.get(id) {
                None => problems.push(format!(
                    "session {id}: {shown} has a lineage row for it, but no such session is stored"
                )),
                Some(s) if s.parents != l.parents || s.created_at != l.created_at => {
                    problems.push(format!(
                        "session {id}: its lineage row in {shown} says parents [{}] at {}, the session says [{}] at {}",
                        join(&l.parents),
                        l.created_at,
                        join(&s.parents),
                        s.created_at
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(problems)
    }
}

fn join(ids: &[ObjectId]) -> String {
    ids.iter()
        .map(ObjectId::to_hex)
        .collect::<Vec<_>>()
        .join(", ")
}
