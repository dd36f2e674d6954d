//! A write's rows (objects-format.md, "Remote writes", step 4): in the
//! write lock's open transaction, one statement moves the refs by
//! compare-and-swap, inserts the pack row (with its bytes when it is
//! inline) and the new objects' rows, the new sessions' lineage rows, the
//! operation rows and the index keys they change, and advances the chain
//! head; the same round trip commits. One round trip under the lock where
//! there were one per part and one for the commit: the lock is what every
//! writer on every machine queues on.
//!
//! The flush after the lock: that commit does not wait for the WAL to
//! reach the disk (`synchronous_commit = off` for its transaction), so the
//! next writer takes the lock while it is flushed; the writer waits for
//! the flush after ([`FLUSH`], from `sync`), and only then acknowledges
//! the write. This is early lock release (Johnson et al., "Aether",
//! VLDB 2010). What another handle reads in between may be lost by a
//! server crash in the same moment, exactly with the write, never without
//! it: the WAL is replayed in order, and a later write's flush covers it.
//!
//! It must never commit a ref move that lost its compare-and-swap: the
//! statement checks them all first and writes nothing unless all hold,
//! and a write that lost one is `RefOutOfDate`.

use postgres::types::{ToSql, Type};
use std::sync::OnceLock;

use postgres::{Client, Statement};

use super::conn::Conn;
use super::literal::Literal;

use super::lineage::{rows_of_columns, Columns};
use super::{RemoteBackend, RemoteLock, Staged, SEAL_BYTES};
use crate::error::{Error, Result};
use crate::object::EncodedObject;
use crate::odb::{KeyWrite, RawOp};
use crate::refs::{Operation, RefUpdate};

/// The name of the write's statement prepared with SQL `PREPARE` on the
/// writer connection (see [`RemoteBackend::write_prepared`]).
const WRITE: &str = "sessctl_write";

/// The most bytes of SQL text a write's rows go as ([`RemoteBackend::record`]):
/// a commit's are a few KiB, an inline pack's up to its limit twice over
/// in hex. Above, an import's write binds them as parameters instead. Kept
/// small because a server logs the text of a statement that fails
/// (`log_min_error_statement`), where bound parameters are not logged.
const FUSED_MAX: usize = 1 << 20;

/// What the write's statement answered: the pack row and whether it is
/// inline, the inline bytes after the write, and whether every
/// compare-and-swap held.
struct Answer {
    pack_row: Option<(i64, bool)>,
    inline_bytes: Option<i64>,
    ok: bool,
}

impl Answer {
    /// The answer of `EXECUTE` in a simple query, as text.
    fn of_text(msgs: Vec<postgres::SimpleQueryMessage>) -> Option<Answer> {
        let row = msgs.into_iter().find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })?;
        let int = |i: usize| row.get(i).and_then(|v| v.parse::<i64>().ok());
        let flag = |i: usize| row.get(i) == Some("t");
        Some(Answer {
            pack_row: int(0).map(|id| (id, flag(1))),
            inline_bytes: int(2),
            ok: flag(3),
        })
    }
}

/// The error of a write's round trip that failed. An `ERROR` the server
/// answered means nothing was committed (the statement failed, or the
/// commit did and rolled back). A connection lost on the way leaves it
/// unknown, which the error says; so does a `FATAL` (a server shutting
/// down may send one after the commit's own answer).
fn landed_or_not(b: &RemoteBackend, e: postgres::Error) -> Error {
    let answered = e
        .as_db_error()
        .is_some_and(|d| d.parsed_severity() == Some(postgres::error::Severity::Error));
    match b.pg_error(e) {
        Error::Remote { what, reason } if !answered => Error::Remote {
            what,
            reason: format!("committing (the write may or may not have landed): {reason}"),
        },
        e => e,
    }
}

/// What [`RemoteBackend::record`] wrote and committed: the pack row named
/// (and whether it is inline), and whether its commit left the WAL's flush
/// to [`FLUSH`], after the lock.
pub(super) struct Recorded {
    pub pack_row: Option<(i64, bool)>,
    pub flush_after: bool,
}

/// What a commit sets before its `COMMIT` so that the write lock (the
/// chain head's row) is let go without waiting for the WAL's flush: the
/// flush is waited for after, by [`FLUSH`], where writers share it.
const NO_FLUSH_UNDER_LOCK: &str = "SET LOCAL synchronous_commit = off; ";

/// Returns once the WAL is flushed past everything this connection
/// committed: a transaction that writes a WAL record (an empty logical
/// decoding message, which changes no table) and so, committing, waits
/// for the flush of its own commit record, which follows theirs. (A
/// transaction that writes no WAL, `SELECT txid_current()` say, commits
/// without waiting for any flush.)
pub(super) const FLUSH: &str = "SELECT pg_logical_emit_message(true, 'sessctl', '')";

/// The error of a [`FLUSH`] that failed: the write committed, and whether
/// it reached the disk is not known.
pub(super) fn unflushed(b: &RemoteBackend, e: postgres::Error) -> Error {
    match b.pg_error(e) {
        Error::Remote { what, reason } => Error::Remote {
            what,
            reason: format!(
                "waiting for a committed write's flush (it may or may not have landed): {reason}"
            ),
        },
        e => e,
    }
}

/// The ref moves of a write as one statement takes them: compare-and-swaps
/// of existing refs, creations, deletions, in the operations' order.
#[derive(Debug, Default)]
struct RefMoves<'u> {
    order: Vec<&'u RefUpdate>,
    moved: (Vec<String>, Vec<String>, Vec<String>),
    created: (Vec<String>, Vec<String>),
    deleted: (Vec<String>, Vec<String>),
}

impl<'u> RefMoves<'u> {
    fn push(&mut self, u: &'u RefUpdate) {
        let name = u.name.to_string();
        match (&u.old, &u.new) {
            (Some(o), Some(n)) => {
                self.moved.0.push(name);
                self.moved.1.push(o.to_string());
                self.moved.2.push(n.to_string());
            }
            (None, Some(n)) => {
                self.created.0.push(name);
                self.created.1.push(n.to_string());
            }
            (Some(o), None) => {
                self.deleted.0.push(name);
                self.deleted.1.push(o.to_string());
            }
            (None, None) => return,
        }
        self.order.push(u);
    }

    /// Whether a ref is moved twice (two operations of one batch): one
    /// statement cannot chain two compare-and-swaps of one row.
    fn repeats(&self) -> bool {
        let mut names: Vec<&crate::refs::RefName> = self.order.iter().map(|u| &u.name).collect();
        names.sort_unstable_by_key(|n| n.to_string());
        names.windows(2).any(|w| w[0] == w[1])
    }
}

/// The statement: `$1`-`$7` the ref moves, `$8`-`$15` the pack and its
/// objects, `$16`-`$18` the lineage rows, `$19`-`$24` the operations and
/// index keys, `$25`-`$27` the new chain head (NULL: no operation),
/// `$28` the inline bytes added. Every part is a data-modifying `WITH`,
/// run once whether or not the final `SELECT` reads it, over the same
/// snapshot: none sees another's rows, and none needs to (the write's
/// objects are new under the lock, its refs distinct).
///
/// `chk` first checks every compare-and-swap (each ref to move holds what
/// it is expected to hold, no ref to create exists, each ref to delete
/// holds what it is expected to), and every part writes only when all
/// hold: a write that lost one writes nothing, so it may be committed in
/// the same round trip whatever the answer (see [`RemoteBackend::record`]).
/// Nothing else moves a ref while the lock is held, so the check and the
/// moves see the same refs. The final `SELECT` returns the pack row, its
/// inline flag, the inline bytes after the write and whether the checks
/// held.
fn statement() -> String {
    format!(
        "WITH
           chk AS (
             SELECT (SELECT count(*) FROM sessctl.refs r
                     JOIN unnest($1::text[], $2::text[]) AS t(name, o)
                       ON r.name = t.name AND r.target = t.o) = cardinality($1::text[])
                AND NOT EXISTS (SELECT 1 FROM sessctl.refs r WHERE r.name = ANY($4::text[]))
                AND (SELECT count(*) FROM sessctl.refs r
                     JOIN unnest($6::text[], $7::text[]) AS t(name, o)
                       ON r.name = t.name AND r.target = t.o) = cardinality($6::text[])
                AS ok),
           moved AS (
             UPDATE sessctl.refs r SET target = t.n
             FROM unnest($1::text[], $2::text[], $3::text[]) AS t(name, o, n)
             WHERE (SELECT ok FROM chk) AND r.name = t.name AND r.target = t.o),
           created AS (
             INSERT INTO sessctl.refs (name, target)
             SELECT * FROM unnest($4::text[], $5::text[]) WHERE (SELECT ok FROM chk)),
           deleted AS (
             DELETE FROM sessctl.refs r USING unnest($6::text[], $7::text[]) AS t(name, o)
             WHERE (SELECT ok FROM chk) AND r.name = t.name AND r.target = t.o),
           p AS (
             INSERT INTO sessctl.packs (key, bytes, created_at, body)
             SELECT $8, $9, $10, $11 WHERE $8::text IS NOT NULL AND (SELECT ok FROM chk)
             ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key
             RETURNING id, body IS NOT NULL AS inline),
           o AS (
             INSERT INTO sessctl.objects (id, pack, kind, off, len)
             SELECT i, (SELECT id FROM p), k, f, l
             FROM unnest($12::bytea[], $13::int2[], $14::int8[], $15::int8[]) AS t(i, k, f, l)
             WHERE (SELECT ok FROM chk)
             ON CONFLICT (id) DO NOTHING),
           l AS (
             INSERT INTO sessctl.lineage (id, parents, created_at) {lineage}
             WHERE (SELECT ok FROM chk)
             ON CONFLICT (id) DO NOTHING),
           op AS (
             INSERT INTO sessctl.ops (seq, hash, body)
             SELECT * FROM unnest($19::int8[], $20::bytea[], $21::bytea[])
             WHERE (SELECT ok FROM chk)),
           d AS (
             DELETE FROM sessctl.index_keys WHERE key = ANY($22) AND (SELECT ok FROM chk)),
           u AS (
             INSERT INTO sessctl.index_keys (key, value)
             SELECT * FROM unnest($23::bytea[], $24::bytea[]) WHERE (SELECT ok FROM chk)
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value),
           h AS (
             UPDATE sessctl.chain_head SET
               seq = coalesce($25, seq),
               hash = CASE WHEN $25::int8 IS NULL THEN hash ELSE $26 END,
               index_seq = CASE WHEN $25::int8 IS NULL THEN index_seq ELSE $27 END,
               inline_bytes = inline_bytes + $28
             WHERE (SELECT ok FROM chk)
             RETURNING inline_bytes)
         SELECT (SELECT id FROM p), (SELECT inline FROM p), (SELECT inline_bytes FROM h),
                (SELECT ok FROM chk)",
        lineage = rows_of_columns(16, 17, 18)
    )
}

/// The types of [`statement`]'s parameters, in order.
const TYPES: [Type; 28] = [
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::BYTEA,
    Type::BYTEA_ARRAY,
    Type::INT2_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::BYTEA_ARRAY,
    Type::BYTEA_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::BYTEA_ARRAY,
    Type::BYTEA_ARRAY,
    Type::BYTEA_ARRAY,
    Type::BYTEA_ARRAY,
    Type::BYTEA_ARRAY,
    Type::INT8,
    Type::BYTEA,
    Type::INT8,
    Type::INT8,
];

impl RemoteBackend {
    /// [`statement`], prepared on the writer connection `c` once for as
    /// long as that connection lasts, for a write whose rows are bound as
    /// parameters (see [`RemoteBackend::record`]).
    pub(super) fn write_statement(&self, c: &mut Conn) -> Result<Statement> {
        static SQL: OnceLock<String> = OnceLock::new();
        let sql = SQL.get_or_init(statement);
        c.prepared(sql, &TYPES).map_err(|e| self.pg_error(e))
    }

    /// The rows of one write, in the lock's open transaction, and its
    /// commit, which lets go of the lock: see the module's documentation.
    /// `pack` is the write's new objects and the pack that holds them,
    /// `ops` its operations (each must continue the chain the lock holds).
    ///
    /// A commit's rows go as literals in one simple query with the
    /// `COMMIT` (`EXECUTE sessctl_write(...); COMMIT`): the lock is held
    /// for one round trip less. The statement writes nothing unless every
    /// compare-and-swap holds, so committing it blind is safe; a write
    /// that lost one commits nothing and is `RefOutOfDate`. Larger writes
    /// (an import) bind their rows as parameters and commit after.
    pub(super) fn record(
        &self,
        c: &mut Conn,
        lock: &RemoteLock<'_>,
        pack: Option<(&Staged, &[&EncodedObject])>,
        ops: &[RawOp],
    ) -> Result<Recorded> {
        let pg = |e| self.pg_error(e);
        let (mut seq, mut hash) = (lock.head_seq, lock.head_hash.clone());
        let (mut seqs, mut hashes, mut bodies) = (Vec::new(), Vec::new(), Vec::new());
        let mut decoded = Vec::with_capacity(ops.len());
        for (s, bytes) in ops {
            let op = Operation::decode(bytes).map_err(|e| Error::CorruptOperation {
                seq: *s,
                reason: e.to_string(),
            })?;
            if op.seq != *s || op.seq as i64 != seq + 1 || op.prev.map(|h| h.to_vec()) != hash {
                return Err(Error::Invalid(format!(
                    "operation {} does not continue the chain of {}, whose head is operation {seq}",
                    op.seq, self.url.shown
                )));
            }
            let h = op.hash();
            seqs.push(op.seq as i64);
            hashes.push(h.to_vec());
            bodies.push(bytes.as_slice());
            (seq, hash) = (op.seq as i64, Some(h.to_vec()));
            decoded.push(op);
        }
        if pack.is_none() && ops.is_empty() {
            // Everything was stored already, and nothing moves.
            lock.commit(c).map_err(|e| landed_or_not(self, e))?;
            return Ok(Recorded {
                pack_row: None,
                flush_after: false,
            });
        }
        let mut refs = RefMoves::default();
        for u in decoded.iter().flat_map(|op| &op.refs) {
            refs.push(u);
        }
        if refs.repeats() {
            // Rare (a batch of operations moving one ref twice): one
            // statement a move, in order, before the rest.
            for u in &refs.order {
                self.move_ref(c, u)?;
            }
            refs = RefMoves::default();
        }

        // The pack row and its objects' rows.
        let (mut ids, mut kinds, mut offs, mut lens) = (vec![], vec![], vec![], vec![]);
        let mut lineage = Columns::default();
        let (mut key, mut size, mut inline, mut inline_bytes) = (None, 0i64, None, 0i64);
        if let Some((p, new)) = pack {
            for o in new {
                let e = p.entries[&o.id()];
                ids.push(o.id().as_bytes().to_vec());
                kinds.push(i16::from(e.kind.code()));
                offs.push(e.off as i64);
                lens.push(e.len as i64);
            }
            lineage = Columns::of_new(self, new)?;
            key = Some(p.name.as_str());
            size = p.bytes as i64;
            inline = p.inline.as_deref();
            // Counted towards the seal (a pack already there under the
            // same name counts twice until the compactor sets the figure
            // again from the table).
            inline_bytes = p.inline.as_ref().map_or(0, |b| b.len() as i64);
        }

        // The index keys the operations change, in their transaction: a
        // write that brings none would leave the keys behind the chain, so
        // it is refused.
        let keys = if self.schema >= 2 && !ops.is_empty() {
            let staged = self
                .staged_keys
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            let Some(keys) = staged else {
                // PostgreSQL's compare-and-swaps still answer first: a
                // stale move is `RefOutOfDate` whatever else is wrong.
                for u in &refs.order {
                    self.move_ref(c, u)?;
                }
                return Err(Error::Invalid(format!(
                    "{}: an operation written without its index keys",
                    self.url.shown
                )));
            };
            KeyBatch::of(keys)
        } else {
            KeyBatch::default()
        };
        let head = (!ops.is_empty()).then_some(seq);
        let index_seq = head.filter(|_| self.schema >= 2);
        let now = crate::time::now_ms();
        // The statement's arguments, in order, once as parameters (bound
        // in binary) and once as literals (spelled in a simple query).
        macro_rules! arguments {
            ($($a:expr),* $(,)?) => {{
                let params: [&(dyn ToSql + Sync); 28] = [$(&$a),*];
                let literals: [&dyn Literal; 28] = [$(&$a),*];
                (params, literals)
            }};
        }
        let (params, literals) = arguments!(
            refs.moved.0,
            refs.moved.1,
            refs.moved.2,
            refs.created.0,
            refs.created.1,
            refs.deleted.0,
            refs.deleted.1,
            key,
            size,
            now,
            inline,
            ids,
            kinds,
            offs,
            lens,
            lineage.ids,
            lineage.parents,
            lineage.created,
            seqs,
            hashes,
            bodies,
            keys.removed,
            keys.put,
            keys.values,
            head,
            hash,
            index_seq,
            inline_bytes,
        );
        let text_bytes: usize = literals.iter().map(|l| l.size_hint()).sum();
        // Whether the write committed in its round trip, and left its flush
        // for after the lock.
        let (answer, committed, flush_after) = if text_bytes <= FUSED_MAX {
            // The rows and the commit in one round trip; the flush after
            // the lock.
            let flush_after = c.flush_after == Some(true);
            let mut sql = format!(
                "{}EXECUTE {WRITE}(",
                if flush_after { NO_FLUSH_UNDER_LOCK } else { "" }
            );
            sql.reserve(text_bytes + 16);
            for (i, l) in literals.iter().enumerate() {
                if i > 0 {
                    sql.push(',');
                }
                l.write_to(&mut sql);
            }
            sql.push_str("); COMMIT");
            let msgs = c.simple_query(&sql).map_err(|e| landed_or_not(self, e))?;
            // Committed, whatever the answer says.
            lock.forget_reads();
            lock.open.set(false);
            let answer = Answer::of_text(msgs).ok_or_else(|| Error::Remote {
                what: self.url.shown.clone(),
                reason: "the write committed, but its statement answered no row".into(),
            })?;
            (answer, true, flush_after)
        } else {
            // An import's write: parameters bound in binary, then the
            // commit.
            let stmt = self.write_statement(c)?;
            let row = c.query_one(&stmt, &params).map_err(pg)?;
            let answer = Answer {
                pack_row: row
                    .get::<_, Option<i64>>(0)
                    .map(|id| (id, row.get::<_, Option<bool>>(1).unwrap_or(false))),
                inline_bytes: row.get::<_, Option<i64>>(2),
                ok: row.get::<_, Option<bool>>(3).unwrap_or(false),
            };
            (answer, false, false)
        };
        if !answer.ok {
            // Lost: nothing was written (committed as nothing, or rolled
            // back when the lock is dropped). The first move in order that
            // could not happen, and what its ref says now (after the lock,
            // when the write committed as nothing: maybe a later writer's).
            return Err(self.first_lost(c, &refs.order));
        }
        if !committed {
            lock.commit(c).map_err(|e| landed_or_not(self, e))?;
        }
        if answer.inline_bytes.unwrap_or(0) >= SEAL_BYTES as i64 && inline_bytes > 0 {
            // Committed: the upkeep after this write seals them.
            self.seal_due
                .store(true, std::sync::atomic::Ordering::Release);
        }
        Ok(Recorded {
            pack_row: answer.pack_row,
            // An import's commit waits for its own flush.
            flush_after,
        })
    }

    /// [`statement`] prepared on the writer connection `c` with SQL
    /// `PREPARE` as [`WRITE`], for a simple query's `EXECUTE` (see
    /// [`RemoteBackend::record`]), once for as long as it lasts.
    pub(super) fn write_prepared(&self, c: &mut Conn) -> Result<()> {
        static DECL: OnceLock<String> = OnceLock::new();
        let decl = DECL.get_or_init(|| {
            let types: Vec<&str> = TYPES.iter().map(Type::name).collect();
            format!("({}) AS {}", types.join(", "), statement())
        });
        c.prepare_sql(WRITE, decl).map_err(|e| self.pg_error(e))?;
        if c.flush_after.is_none() {
            // A role without the right to run FLUSH (a server that revoked
            // it from PUBLIC) commits as before, flushing under the lock.
            // FLUSH calls the overload whose content is text (PostgreSQL 17
            // gave it a fourth argument, with a default).
            let row = c
                .query_one(
                    "SELECT coalesce(bool_or(has_function_privilege(p.oid, 'EXECUTE')), false)
                     FROM pg_catalog.pg_proc p
                     WHERE p.proname = 'pg_logical_emit_message'
                       AND p.pronamespace = 'pg_catalog'::regnamespace
                       AND p.pronargs >= 3
                       AND p.proargtypes[2] = 'text'::regtype",
                    &[],
                )
                .map_err(|e| self.pg_error(e))?;
            c.flush_after = Some(row.get(0));
        }
        Ok(())
    }

    /// The error of a write whose compare-and-swaps did not all hold: the
    /// first of `order` whose ref does not hold what it expected, with
    /// what the ref says.
    fn first_lost(&self, c: &mut Client, order: &[&RefUpdate]) -> Error {
        let names: Vec<String> = order.iter().map(|u| u.name.to_string()).collect();
        let rows = match c.query_typed(
            "SELECT name, target FROM sessctl.refs WHERE name = ANY($1)",
            &[(&names, Type::TEXT_ARRAY)],
        ) {
            Ok(rows) => rows,
            Err(e) => return self.pg_error(e),
        };
        let now: std::collections::HashMap<String, String> = rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
        let lost = order
            .iter()
            .find(|u| {
                now.get(&u.name.to_string()).map(String::as_str)
                    != u.old.as_ref().map(|t| t.to_string()).as_deref()
            })
            .or(order.first());
        match lost {
            Some(u) => Error::RefOutOfDate {
                name: u.name.clone(),
                expected: u.old.as_ref().map(|t| t.to_string()),
                actual: now.get(&u.name.to_string()).cloned(),
            },
            None => Error::Invalid(format!(
                "{}: a write without ref moves was refused",
                self.url.shown
            )),
        }
    }

    /// Moves one ref by compare-and-swap in the open transaction.
    fn move_ref(&self, c: &mut Client, u: &RefUpdate) -> Result<()> {
        let name = u.name.to_string();
        let old = u.old.as_ref().map(|t| t.to_string());
        let new = u.new.as_ref().map(|t| t.to_string());
        let moved = match (&old, &new) {
            (Some(o), Some(n)) => c.execute_typed(
                "UPDATE sessctl.refs SET target = $3 WHERE name = $1 AND target = $2",
                &[(&name, Type::TEXT), (o, Type::TEXT), (n, Type::TEXT)],
            ),
            (None, Some(n)) => c.execute_typed(
                "INSERT INTO sessctl.refs (name, target) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                &[(&name, Type::TEXT), (n, Type::TEXT)],
            ),
            (Some(o), None) => c.execute_typed(
                "DELETE FROM sessctl.refs WHERE name = $1 AND target = $2",
                &[(&name, Type::TEXT), (o, Type::TEXT)],
            ),
            (None, None) => return Ok(()),
        }
        .map_err(|e| self.pg_error(e))?;
        if moved == 1 {
            return Ok(());
        }
        Err(self.first_lost(c, &[u]))
    }
}

/// Index key writes as one statement takes them: the last write of each
/// key (a key written twice in one batch would make one statement touch
/// one row twice), split into upserts and removals.
#[derive(Debug, Default)]
struct KeyBatch {
    put: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    removed: Vec<Vec<u8>>,
}

impl KeyBatch {
    fn of(writes: Vec<KeyWrite>) -> KeyBatch {
        let last: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> =
            writes.into_iter().collect();
        let mut b = KeyBatch::default();
        for (k, v) in last {
            match v {
                Some(v) => {
                    b.put.push(k);
                    b.values.push(v);
                }
                None => b.removed.push(k),
            }
        }
        b
    }
}
