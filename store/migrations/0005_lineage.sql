-- sessctl remote store, schema version 5 (objects-format.md, "Remote store",
-- "Lineage rows"): each stored session's parents and creation time, so that
-- a walk (`log`, `merge-base`) reads a whole stretch of ancestry in one
-- query instead of one lookup a session. Applied by `sessctl init --store
-- postgres://...`, or by the first writable open of an older store, in one
-- transaction.

-- One row per stored session, written in the transaction that stores it,
-- deleted in the transaction in which gc drops it. A session id fixes its
-- parents and time, so a row never changes. Sessions stored before this
-- migration have no row until `sessctl reindex` writes them; a walk reads
-- such a session's object instead.
CREATE TABLE sessctl.lineage (
    id         bytea   PRIMARY KEY,        -- the session's id (32 bytes)
    parents    bytea[] NOT NULL,           -- its parents' ids, in order (first: lineage parent)
    created_at bigint  NOT NULL            -- its created_at, ms since the Unix epoch
);
