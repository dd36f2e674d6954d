//! Scenario 8's skeletons: the rows a sessctl commit writes to PostgreSQL
//! today, written by plain SQL with no sessctl code around them, in three
//! shapes of write path. They say what a design can reach on these
//! servers before any of its own work, so that a change of design is
//! judged by a measurement rather than argued:
//!
//! - one chain: every write holds one chain-head row (`FOR UPDATE`) for
//!   its write, as the remote store does ("Remote writes"): the lock with
//!   a read of the head and of `HEAD` (one round trip), the write's
//!   statement with its `COMMIT` and `synchronous_commit = off` (one), the
//!   WAL flush after the lock (one); the write moves the conversation's
//!   ref and `HEAD` and advances the chain head.
//! - a chain per conversation: the same rows but the chain head's, in one
//!   autocommitted statement (one round trip, the commit's own flush):
//!   the operation numbered within its conversation's chain, the
//!   conversation's ref moved by compare-and-swap, `HEAD` left alone.
//! - a row per commit, a chain per conversation: as the second, but what
//!   the commit writes is one row of its conversation's chain holding the
//!   operation and the pack, a row per object naming that row (lookup by
//!   id), and the ref moved (five rows): what a store whose lineage, index and packs
//!   were read out of the chain's rows would write.
//!
//! The rows, per turn, in tables shaped like the store's: the turn's pack
//! (its messages' JSON compressed by zstd, in the row as an inline pack
//! is), three object rows (the two messages and the session), a lineage
//! row, an operation of 560 bytes, and seven index keys (three of the
//! conversation's, rewritten each turn, and four new), as the store's
//! tables hold them (objects-format.md, "Scaling": about 14 rows).

use serde_json::Value;

use super::{at_once, conv, Place, Work};
use crate::support::Rng;
use crate::R;

/// The three shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    OneChain,
    PerConversation,
    FewRows,
}

impl Shape {
    pub(super) const ALL: [Shape; 3] = [Shape::OneChain, Shape::PerConversation, Shape::FewRows];

    pub(super) fn label(self) -> &'static str {
        match self {
            Shape::OneChain => "skeleton: sessctl's rows, one chain-head lock (3 round trips)",
            Shape::PerConversation => "skeleton: sessctl's rows, a chain per conversation (1)",
            Shape::FewRows => "skeleton: a row per commit, a chain per conversation (1)",
        }
    }
}

const SCHEMA: &str = "
    DROP SCHEMA IF EXISTS skeleton CASCADE;
    CREATE SCHEMA skeleton;
    CREATE TABLE skeleton.packs (
        id bigserial PRIMARY KEY, key text NOT NULL UNIQUE, bytes bigint NOT NULL,
        created_at bigint NOT NULL, body bytea);
    ALTER TABLE skeleton.packs ALTER COLUMN body SET STORAGE EXTERNAL;
    CREATE INDEX packs_inline ON skeleton.packs (id) WHERE body IS NOT NULL;
    CREATE TABLE skeleton.objects (
        id bytea PRIMARY KEY, pack bigint NOT NULL REFERENCES skeleton.packs (id),
        kind smallint NOT NULL, off bigint NOT NULL, len bigint NOT NULL);
    CREATE INDEX objects_pack ON skeleton.objects (pack);
    CREATE TABLE skeleton.lineage (
        id bytea PRIMARY KEY, parents bytea[] NOT NULL, created_at bigint NOT NULL);
    CREATE TABLE skeleton.ops (
        chain text NOT NULL, seq bigint NOT NULL, hash bytea NOT NULL, body bytea NOT NULL,
        PRIMARY KEY (chain, seq));
    CREATE TABLE skeleton.index_keys (key bytea PRIMARY KEY, value bytea NOT NULL);
    CREATE TABLE skeleton.refs (name text PRIMARY KEY, target text NOT NULL);
    CREATE TABLE skeleton.commits (
        chain text NOT NULL, seq bigint NOT NULL, hash bytea NOT NULL, body bytea NOT NULL,
        PRIMARY KEY (chain, seq));
    ALTER TABLE skeleton.commits ALTER COLUMN body SET STORAGE EXTERNAL;
    CREATE TABLE skeleton.located (
        id bytea PRIMARY KEY, chain text NOT NULL, seq bigint NOT NULL);
    CREATE TABLE skeleton.chain_head (
        one boolean PRIMARY KEY DEFAULT true CHECK (one), seq bigint NOT NULL, hash bytea);
    INSERT INTO skeleton.chain_head (seq, hash) VALUES (0, NULL);
    INSERT INTO skeleton.refs VALUES ('HEAD', 'none');";

/// `bytes` as a literal of type bytea.
fn bytea(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2 + 24);
    s.push_str("decode('");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s.push_str("', 'hex')");
    s
}

fn bytea_array(items: &[Vec<u8>]) -> String {
    let items: Vec<String> = items.iter().map(|b| bytea(b)).collect();
    format!("ARRAY[{}]::bytea[]", items.join(", "))
}

fn random(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(n);
    out
}

/// Where the one-chain write's statement names what the lock read: built
/// before the lock (the pack compressed, the literals spelled, as the
/// store does), these are filled in under it.
const SEQ: &str = "@SEQ@";
const HEAD: &str = "@HEAD@";

/// One writer's turn as SQL: the write's statement, moving `name` from
/// `old` to `new` (and `HEAD` from [`HEAD`] with `head`) and appending
/// operation `seq` (or [`SEQ`]) to `chain`.
fn write(
    rng: &mut Rng,
    msgs: &[Value],
    (name, old, new): (&str, &str, &str),
    head: bool,
    chain: &str,
    seq: &str,
) -> R<String> {
    let json = serde_json::to_vec(msgs)?;
    let pack = zstd::bulk::compress(&json, 3)?;
    let key = format!(
        "{:032x}",
        u128::from(rng.next()) << 64 | u128::from(rng.next())
    );
    let ids = vec![random(rng, 32), random(rng, 32), random(rng, 32)];
    let session = random(rng, 32);
    let parent = random(rng, 32);
    let c = name.as_bytes();
    let prefixed = |p: &[u8], rest: &[u8]| [p, rest].concat();
    let keys = vec![
        prefixed(b"c:", c),
        prefixed(b"u:", c),
        prefixed(b"h:", c),
        prefixed(b"a:", &random(rng, 8)),
        prefixed(b"s:", &session),
        prefixed(b"i:", &random(rng, 32)),
        prefixed(b"t:", &random(rng, 32)),
    ];
    let values: Vec<Vec<u8>> = [300, 40, 30, 8, 150, 40, 40]
        .iter()
        .map(|n| random(rng, *n))
        .collect();
    let (refs_old, refs_new, head_part) = match head {
        true => (
            format!("('{name}', '{old}'), ('HEAD', {HEAD})"),
            format!("('{name}', '{old}', '{new}'), ('HEAD', {HEAD}, 'ref: {name}')"),
            format!(
                ", h AS (UPDATE skeleton.chain_head SET seq = {seq}, hash = {}
                   WHERE (SELECT ok FROM chk))",
                bytea(&random(rng, 32))
            ),
        ),
        false => (
            format!("('{name}', '{old}')"),
            format!("('{name}', '{old}', '{new}')"),
            String::new(),
        ),
    };
    Ok(format!(
        "WITH
           chk AS (
             SELECT (SELECT count(*) FROM skeleton.refs r
                     JOIN (VALUES {refs_old}) AS t(name, o)
                       ON r.name = t.name AND r.target = t.o)
                    = (SELECT count(*) FROM (VALUES {refs_old}) AS t) AS ok),
           moved AS (
             UPDATE skeleton.refs r SET target = t.n FROM (VALUES {refs_new}) AS t(name, o, n)
             WHERE (SELECT ok FROM chk) AND r.name = t.name AND r.target = t.o),
           p AS (
             INSERT INTO skeleton.packs (key, bytes, created_at, body)
             SELECT '{key}', {bytes}, 0, {body} WHERE (SELECT ok FROM chk)
             RETURNING id),
           o AS (
             INSERT INTO skeleton.objects (id, pack, kind, off, len)
             SELECT i, (SELECT id FROM p), 1, 0, 0 FROM unnest({ids}) AS t(i)
             WHERE (SELECT ok FROM chk) ON CONFLICT (id) DO NOTHING),
           l AS (
             INSERT INTO skeleton.lineage (id, parents, created_at)
             SELECT {session}, ARRAY[{parent}], 0 WHERE (SELECT ok FROM chk)),
           op AS (
             INSERT INTO skeleton.ops (chain, seq, hash, body)
             SELECT '{chain}', {seq}, {hash}, {op} WHERE (SELECT ok FROM chk)),
           u AS (
             INSERT INTO skeleton.index_keys (key, value)
             SELECT * FROM unnest({keys}, {values}) WHERE (SELECT ok FROM chk)
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value)
           {head_part}
         SELECT (SELECT ok FROM chk)",
        bytes = pack.len(),
        body = bytea(&pack),
        ids = bytea_array(&ids),
        session = bytea(&session),
        parent = bytea(&parent),
        hash = bytea(&random(rng, 32)),
        op = bytea(&random(rng, 560)),
        keys = bytea_array(&keys),
        values = bytea_array(&values),
    ))
}

/// The write of a row per commit: the commit's row (its operation and pack in one
/// value), its objects' rows, the ref moved by compare-and-swap.
fn write_few(
    rng: &mut Rng,
    msgs: &[Value],
    (name, old, new): (&str, &str, &str),
    seq: usize,
) -> R<String> {
    let json = serde_json::to_vec(msgs)?;
    let mut body = random(rng, 560);
    body.extend_from_slice(&zstd::bulk::compress(&json, 3)?);
    let ids = vec![random(rng, 32), random(rng, 32), random(rng, 32)];
    Ok(format!(
        "WITH
           moved AS (
             UPDATE skeleton.refs SET target = '{new}' WHERE name = '{name}' AND target = '{old}'
             RETURNING 1),
           c AS (
             INSERT INTO skeleton.commits (chain, seq, hash, body)
             SELECT '{name}', {seq}, {hash}, {body} FROM moved),
           o AS (
             INSERT INTO skeleton.located (id, chain, seq)
             SELECT i, '{name}', {seq} FROM unnest({ids}) AS t(i), moved
             ON CONFLICT (id) DO NOTHING)
         SELECT EXISTS (SELECT 1 FROM moved)",
        hash = bytea(&random(rng, 32)),
        body = bytea(&body),
        ids = bytea_array(&ids),
    ))
}

/// The first column of a simple query's rows, in order.
fn texts(rows: &[postgres::SimpleQueryMessage]) -> Vec<String> {
    rows.iter()
        .filter_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .collect()
}

fn first(rows: &[postgres::SimpleQueryMessage]) -> Option<String> {
    texts(rows).into_iter().next()
}

/// The writers' commits/s through `shape`, on fresh tables in the
/// baselines' database.
pub(super) fn rate(shape: Shape, place: &Place<'_>, work: &Work) -> R<f64> {
    let mut c = place.connect()?;
    c.batch_execute(SCHEMA)?;
    let writers = work.msgs.len();
    for k in 0..writers {
        c.execute("INSERT INTO skeleton.refs VALUES ($1, '0')", &[&conv(k)])?;
    }
    let (dt, _) = at_once(
        writers,
        |_| place.connect(),
        |k, mut c| -> R<Vec<()>> {
            let name = conv(k);
            let mut rng = Rng::new(k as u64 + 1);
            let mut target = "0".to_owned();
            for t in 0..work.turns {
                let new = format!("{k}-{t}");
                let msgs = work.turn(k, t);
                let ok = match shape {
                    Shape::OneChain => {
                        let sql = write(&mut rng, msgs, (&name, &target, &new), true, "all", SEQ)?;
                        // The head's read is a statement of its own, after
                        // the lock: one waiting for the row reads the row
                        // as its holder left it, but any other table as of
                        // before the wait.
                        let locked = texts(&c.simple_query(
                            "BEGIN; SET LOCAL synchronous_commit = off;
                             SELECT seq::text FROM skeleton.chain_head FOR UPDATE;
                             SELECT target FROM skeleton.refs WHERE name = 'HEAD'",
                        )?);
                        let [seq, head] = &locked[..] else {
                            return Err(format!("8: skeleton: the lock read {locked:?}").into());
                        };
                        let seq: i64 = seq.parse()?;
                        let sql = sql
                            .replace(SEQ, &(seq + 1).to_string())
                            .replace(HEAD, &format!("'{head}'"));
                        let ok = first(&c.simple_query(&format!("{sql}; COMMIT"))?);
                        c.simple_query("SELECT pg_logical_emit_message(true, 'bench', '')")?;
                        ok
                    }
                    Shape::PerConversation => {
                        let seq = (t + 1).to_string();
                        let sql =
                            write(&mut rng, msgs, (&name, &target, &new), false, &name, &seq)?;
                        first(&c.simple_query(&sql)?)
                    }
                    Shape::FewRows => {
                        let sql = write_few(&mut rng, msgs, (&name, &target, &new), t + 1)?;
                        first(&c.simple_query(&sql)?)
                    }
                };
                if ok.as_deref() != Some("t") {
                    return Err(
                        format!("8: skeleton: {name}, turn {t}: a lost compare-and-swap").into(),
                    );
                }
                target = new;
            }
            Ok(Vec::new())
        },
    )?;
    Ok((writers * work.turns) as f64 / dt)
}
