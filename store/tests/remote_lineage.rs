//! Lineage rows on a remote store (`sessctl.lineage`, schema version 5;
//! objects-format.md, "Lineage rows"), against real servers on loopback:
//! walks give the answers a local store with the same history gives, in a
//! bounded number of PostgreSQL statements counted by the server itself
//! (its statement log); a store of version 4 opens, migrates and walks
//! correctly with rows missing; gc drops the rows of the sessions it drops;
//! fsck names a wrong row and reindex rewrites it.
#![cfg(feature = "remote")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/servers.rs"]
mod servers;
mod support;

use sessctl_store::fsck::FsckOptions;
use sessctl_store::graph::{self, Follow, LogIds, Node, TopoWalk};
use sessctl_store::odb::RemoteBackend;
use sessctl_store::{Durability, ObjectId, OpenOptions, Session, Store, WriteBatch};

fn open(r: &servers::Remote) -> Store {
    Store::open_remote_with(&r.url, &OpenOptions::default(), &r.s3_settings()).unwrap()
}

fn open_read_only(r: &servers::Remote) -> Store {
    let opts = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    Store::open_remote_with(&r.url, &opts, &r.s3_settings()).unwrap()
}

fn sql(r: &servers::Remote, q: &str) -> String {
    r.servers.psql(&r.name, q).trim().to_owned()
}

/// A conversation of `main` sessions; a fork of `fork` sessions from
/// session `fork_at` of it; a merge of both lines; `tail` sessions after
/// the merge. Times interleave the two lines (and one runs backwards), so
/// that log order depends on them.
struct History {
    batch: WriteBatch,
    main: Vec<ObjectId>,
    fork: Vec<ObjectId>,
    merge: ObjectId,
    tail: Vec<ObjectId>,
}

impl History {
    fn new(main: usize, fork_at: usize, fork: usize, tail: usize) -> History {
        let t0 = 1_763_000_000_000i64;
        let mut batch = WriteBatch::new();
        let mut session = |parents: Vec<ObjectId>, t: i64, conversation: Option<ObjectId>| {
            let mut s = Session::new_root(t);
            s.parents = parents;
            s.conversation = conversation;
            batch.session(&s).unwrap()
        };
        let mut ids: Vec<ObjectId> = Vec::new();
        for k in 0..main {
            // One session's clock runs backwards.
            let t = if k == main / 3 {
                t0
            } else {
                t0 + k as i64 * 1000
            };
            let parents = ids.last().map(|p| vec![*p]).unwrap_or_default();
            ids.push(session(parents, t, ids.first().copied()));
        }
        let mut forked: Vec<ObjectId> = Vec::new();
        for k in 0..fork {
            let parent = forked.last().copied().unwrap_or(ids[fork_at]);
            let t = t0 + (fork_at + 2 * k) as i64 * 1000 + 500;
            forked.push(session(vec![parent], t, forked.first().copied()));
        }
        let last = *ids.last().unwrap();
        let merge = session(
            vec![last, *forked.last().unwrap()],
            t0 + main as i64 * 1000,
            Some(ids[0]),
        );
        let mut after = vec![merge];
        for k in 0..tail {
            let t = t0 + (main + 1 + k) as i64 * 1000;
            after.push(session(vec![*after.last().unwrap()], t, Some(ids[0])));
        }
        after.remove(0);
        History {
            batch,
            main: ids,
            fork: forked,
            merge,
            tail: after,
        }
    }

    /// Writes it to `store` (one write) and tags its three tips.
    fn write(&self, store: &Store) {
        store.odb().write(&self.batch, Durability::Sync).unwrap();
        support::tag(
            store,
            [
                (0, self.tip()),
                (1, *self.main.last().unwrap()),
                (2, *self.fork.last().unwrap()),
            ],
        );
    }

    fn tip(&self) -> ObjectId {
        *self.tail.last().unwrap_or(&self.merge)
    }

    fn len(&self) -> usize {
        self.main.len() + self.fork.len() + 1 + self.tail.len()
    }
}

/// What the walks answer on one store, as `log`, `log --graph`,
/// `--first-parent`, `merge-base` and `merge-base --is-ancestor` use them.
#[derive(Debug, PartialEq, Eq)]
struct Answers {
    log: Vec<Node>,
    log_ids: Vec<ObjectId>,
    graph: Vec<Node>,
    first_parent: Vec<Node>,
    bases: Vec<ObjectId>,
    fork_base: Vec<ObjectId>,
    ancestry: [bool; 3],
}

/// Every session from `start` in log order, with its parents and time.
fn order(lineage: &(impl graph::Lineage + ?Sized), start: ObjectId, follow: Follow) -> Vec<Node> {
    graph::log_order(lineage, &[start], follow, None).unwrap()
}

fn log(store: &Store, h: &History) -> Vec<Node> {
    order(store, h.tip(), Follow::All)
}

fn merge_bases(store: &Store, h: &History) -> Vec<ObjectId> {
    graph::merge_bases_all(store, *h.main.last().unwrap(), *h.fork.last().unwrap()).unwrap()
}

fn answers(store: &Store, h: &History) -> Answers {
    let tip = h.tip();
    Answers {
        log: log(store, h),
        log_ids: LogIds::new(store, &[tip], Follow::All)
            .unwrap()
            .map(Result::unwrap)
            .collect(),
        graph: TopoWalk::new(store, &[tip], Follow::All)
            .unwrap()
            .map(Result::unwrap)
            .collect(),
        first_parent: order(store, tip, Follow::FirstParent),
        bases: merge_bases(store, h),
        fork_base: graph::merge_bases_all(store, h.fork[0], h.main[h.main.len() / 2]).unwrap(),
        ancestry: [
            graph::is_ancestor(store, h.fork[0], tip).unwrap(),
            graph::is_ancestor(store, h.fork[0], *h.main.last().unwrap()).unwrap(),
            graph::is_ancestor(store, h.main[0], h.merge).unwrap(),
        ],
    }
}

/// `log`, `log --graph`, `merge-base` and the like on a remote store give
/// the answers a local store with the same history gives, and a walk of
/// the whole conversation (a few thousand sessions, a fork and a merge)
/// runs a handful of statements, not one a session. The count is the
/// server's own (its statement log), so that a walk that went back to one
/// lookup a session (no rows, or no cache) fails it.
#[test]
fn walks_agree_with_a_local_store_in_a_bounded_number_of_statements() {
    let Some(r) = servers::remote() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    // More than one closure's worth (4,096 rows) in the main line.
    let h = History::new(4_500, 150, 40, 10);
    let dir = tempfile::tempdir().unwrap();
    let local = Store::init(dir.path()).unwrap();
    h.write(&local);
    let remote = open(&r);
    h.write(&remote);
    assert_eq!(
        sql(&r, "SELECT count(*) FROM sessctl.lineage"),
        h.len().to_string()
    );
    let expected = answers(&local, &h);
    assert_eq!(expected.log.len(), h.len());
    assert_eq!(expected.bases, [h.main[150]]);
    assert_eq!(answers(&remote, &h), expected);

    servers::StatementLog::enable(&r);
    // A whole log, on a handle that has walked nothing: the closure of the
    // tip, then of the one session past its bound, and nothing else.
    let fresh = open(&r);
    let count = servers::StatementLog::start(&r);
    assert_eq!(log(&fresh, &h), expected.log);
    let statements = count.since();
    assert!(
        (1..=3).contains(&statements.len()),
        "a log of {} sessions ran {} statements: {statements:#?}",
        h.len(),
        statements.len()
    );
    assert!(statements.iter().all(|s| s.contains("WITH RECURSIVE")));
    // Everything else on that handle: nothing more to fetch.
    let count = servers::StatementLog::start(&r);
    assert_eq!(answers(&fresh, &h), expected);
    assert_eq!(count.since(), Vec::<String>::new());
    // merge-base alone, on another fresh handle: one closure a side.
    let fresh = open(&r);
    let count = servers::StatementLog::start(&r);
    assert_eq!(merge_bases(&fresh, &h), expected.bases);
    let statements = count.since();
    assert!(
        (1..=3).contains(&statements.len()),
        "merge-base ran {} statements: {statements:#?}",
        statements.len()
    );
}

/// A store of schema version 4 (sessions, no lineage rows) opens: read
/// only, it walks as before; the first writable open adds the table, and
/// walks stay right with the rows of older sessions missing (each read from
/// its object), and with the rows of new ones; `sessctl reindex` writes
/// the missing rows, and a walk then needs one statement.
#[test]
fn a_store_without_lineage_rows_migrates_and_walks_correctly_with_rows_missing() {
    let Some(r) = servers::remote() else {
        return;
    };
    assert!(RemoteBackend::init_at_version(&r.url, &r.s3_settings(), 3).unwrap());
    assert_eq!(
        sql(&r, "SELECT max(version) FROM sessctl.schema_version"),
        "3"
    );
    // Sessions written at version 4: what this sessctl writes, less the
    // table (a version-4 sessctl writes no rows).
    {
        let ro = open_read_only(&r);
        assert_eq!(
            ro.odb()
                .backend()
                .lineage_closure(&ObjectId::from_bytes([1; 32]), 10)
                .unwrap(),
            None
        );
    }
    let h = History::new(300, 100, 20, 5);
    let store = open(&r);
    let latest = sessctl_store::odb::REMOTE_SCHEMA_VERSION.to_string();
    assert_eq!(
        sql(&r, "SELECT max(version) FROM sessctl.schema_version"),
        latest
    );
    h.write(&store);
    drop(store);
    // Back to version 4: migrations 7 (store identity), 6 (inline packs,
    // none written here) and 5 undone.
    r.servers.undo_identity(&r.name);
    r.servers.psql(
        &r.name,
        "ALTER TABLE sessctl.packs DROP COLUMN body;
         ALTER TABLE sessctl.chain_head DROP COLUMN inline_bytes;
         DROP TABLE sessctl.lineage; DELETE FROM sessctl.schema_version WHERE version >= 5",
    );
    let truth = {
        // The objects themselves, no index: the answer walks must give.
        let ro = open_read_only(&r);
        order(ro.odb(), h.tip(), Follow::All)
    };
    assert_eq!(truth.len(), h.len());

    let ro = open_read_only(&r);
    assert_eq!(log(&ro, &h), truth);
    assert_eq!(merge_bases(&ro, &h), [h.main[100]]);
    assert_eq!(
        sql(&r, "SELECT max(version) FROM sessctl.schema_version"),
        "4"
    );

    let rw = open(&r);
    assert_eq!(
        sql(&r, "SELECT max(version) FROM sessctl.schema_version"),
        latest
    );
    assert_eq!(sql(&r, "SELECT count(*) FROM sessctl.lineage"), "0");
    assert_eq!(log(&rw, &h), truth);
    assert_eq!(merge_bases(&rw, &h), [h.main[100]]);
    // A session written now has its row; its ancestors still have none.
    let mut b = WriteBatch::new();
    let mut s = Session::new_root(1_763_000_999_000);
    s.parents = vec![h.tip()];
    s.conversation = Some(h.main[0]);
    let next = b.session(&s).unwrap();
    rw.odb().write(&b, Durability::Sync).unwrap();
    assert_eq!(sql(&r, "SELECT count(*) FROM sessctl.lineage"), "1");
    let fresh = open(&r);
    let mut with_next = vec![Node {
        id: next,
        parents: s.parents.clone(),
        created_at: s.created_at,
    }];
    with_next.extend(truth.iter().cloned());
    assert_eq!(order(&fresh, next, Follow::All), with_next);
    assert_eq!(merge_bases(&fresh, &h), [h.main[100]]);

    // reindex writes the rows the older sessions lack.
    rw.reindex().unwrap();
    assert_eq!(
        sql(&r, "SELECT count(*) FROM sessctl.lineage"),
        (h.len() + 1).to_string()
    );
    servers::StatementLog::enable(&r);
    let fresh = open(&r);
    let count = servers::StatementLog::start(&r);
    assert_eq!(order(&fresh, next, Follow::All), with_next);
    assert_eq!(count.since().len(), 1, "{:#?}", count.since());
    let report = fresh
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// gc deletes the rows of the sessions it drops, in its transaction, and
/// repack leaves every row; fsck --full names a row whose parents or time
/// are not its session's, and one whose session is not stored; reindex
/// rewrites them and walks are right again.
#[test]
fn gc_drops_rows_fsck_names_wrong_ones_and_reindex_rewrites_them() {
    let Some(r) = servers::remote() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let store = open(&r);
    let h = History::new(50, 10, 5, 3);
    h.write(&store);
    // A session nothing reaches.
    let mut b = WriteBatch::new();
    let mut s = Session::new_root(1_763_000_000_500);
    s.parents = vec![h.main[3]];
    s.conversation = Some(h.main[0]);
    let lost = b.session(&s).unwrap();
    store.odb().write(&b, Durability::Sync).unwrap();
    let rows = || sql(&r, "SELECT count(*) FROM sessctl.lineage");
    assert_eq!(rows(), (h.len() + 1).to_string());
    let row_of = |id: &ObjectId| {
        sql(
            &r,
            &format!(
                "SELECT count(*) FROM sessctl.lineage WHERE id = '\\x{}'",
                id.to_hex()
            ),
        )
    };
    assert_eq!(row_of(&lost), "1");

    store.repack(&Default::default()).unwrap();
    assert_eq!(rows(), (h.len() + 1).to_string());
    store
        .gc(&sessctl_store::gc::GcOptions {
            prune: sessctl_store::gc::Prune::Now,
            ..sessctl_store::gc::GcOptions::default()
        })
        .unwrap();
    assert!(!store.odb().contains(&lost).unwrap());
    assert_eq!(row_of(&lost), "0");
    assert_eq!(rows(), h.len().to_string());
    let expected = log(&open(&r), &h);
    assert_eq!(expected.len(), h.len());
    let clean = |store: &Store| {
        let report = store
            .fsck(&FsckOptions { full: true }, &mut |_, _| {})
            .unwrap();
        report.problems
    };
    assert_eq!(clean(&store), Vec::<String>::new());

    // Damage: the merge loses its second parent, a session's time moves,
    // and a row names a session that is not stored.
    let merge = h.merge.to_hex();
    let moved = h.main[7].to_hex();
    r.servers.psql(
        &r.name,
        &format!(
            "UPDATE sessctl.lineage SET parents = parents[1:1] WHERE id = '\\x{merge}';
             UPDATE sessctl.lineage SET created_at = 5 WHERE id = '\\x{moved}';
             INSERT INTO sessctl.lineage VALUES ('\\x{}', '{{}}', 0)",
            lost.to_hex()
        ),
    );
    let problems = clean(&open(&r));
    assert_eq!(problems.len(), 3, "{problems:#?}");
    for (id, says) in [
        (&merge, "its lineage row"),
        (&moved, "its lineage row"),
        (&lost.to_hex(), "no such session is stored"),
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.contains(&format!("session {id}")) && p.contains(says)),
            "{id}: {problems:#?}"
        );
    }
    // The wrong row is what a walk reads: the fork is lost from the log.
    assert_ne!(log(&open(&r), &h), expected);

    store.reindex().unwrap();
    assert_eq!(rows(), h.len().to_string());
    assert_eq!(clean(&open(&r)), Vec::<String>::new());
    assert_eq!(log(&open(&r), &h), expected);
}

/// The table as objects-format.md ("Lineage rows") pins it: the rows of
/// the format's example sessions, byte for byte as PostgreSQL prints them
/// (`tests/fixtures/remote-lineage-v5/rows.txt`), and its columns.
#[test]
fn the_example_sessions_rows_match_the_golden_fixture() {
    let Some(r) = servers::remote() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let store = open(&r);
    let ex = support::examples();
    store
        .odb()
        .backend()
        .write_batch(&[ex.hello, ex.root, ex.reply, ex.cont], Durability::Sync)
        .unwrap();
    let rows = r.servers.psql(
        &r.name,
        "SELECT encode(id, 'hex'), parents, created_at FROM sessctl.lineage ORDER BY id",
    );
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/remote-lineage-v5/rows.txt");
    let fixture = std::fs::read_to_string(fixture).unwrap();
    assert_eq!(rows, fixture);
    // The spec shows the same rows and names the version that holds them.
    let spec = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../objects-format.md"),
    )
    .unwrap();
    for line in fixture.lines() {
        assert!(spec.contains(line), "objects-format.md lacks {line}");
    }
    assert!(spec.contains(&format!(
        "`odb::remote::SCHEMA_VERSION` | {}",
        sessctl_store::odb::remote::SCHEMA_VERSION
    )));
    assert_eq!(
        sql(
            &r,
            "SELECT string_agg(column_name || ' ' || udt_name || ' ' || is_nullable, ', '
                               ORDER BY ordinal_position)
             FROM information_schema.columns
             WHERE table_schema = 'sessctl' AND table_name = 'lineage'"
        ),
        "id bytea NO, parents _bytea NO, created_at int8 NO"
    );
}
