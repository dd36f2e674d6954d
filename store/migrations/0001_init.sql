-- sessctl remote store, schema version 1 (objects-format.md, "Remote store").
-- Applied by `sessctl init --store postgres://...` in one transaction.

-- Every S3 object that holds objects: a remote pack, named by the blake3 of
-- its bytes. `id` grows in commit order (rows are inserted under the
-- chain-head row lock), so a reader catches up with `id > last seen`.
CREATE TABLE sessctl.packs (
    id         bigserial PRIMARY KEY,
    key        text   NOT NULL UNIQUE,
    bytes      bigint NOT NULL,
    created_at bigint NOT NULL            -- ms since the Unix epoch
);

-- Where each object lives: its pack and its payload's place in the pack's
-- inflated body. The payload re-hashes to `id` on every read.
CREATE TABLE sessctl.objects (
    id   bytea    PRIMARY KEY CHECK (length(id) = 32),
    pack bigint   NOT NULL REFERENCES sessctl.packs (id),
    kind smallint NOT NULL,
    off  bigint   NOT NULL,
    len  bigint   NOT NULL
);
CREATE INDEX objects_pack ON sessctl.objects (pack);

-- The operations (ref moves with their hash-chained ref-log entries,
-- conversation records, run events), each the canonical bytes the local
-- journal would hold; `hash` is the operation's hash, which the next one
-- names as `prev`.
CREATE TABLE sessctl.ops (
    seq  bigint PRIMARY KEY CHECK (seq > 0),
    hash bytea  NOT NULL CHECK (length(hash) = 32),
    body bytea  NOT NULL
);

-- The refs as the operations leave them, moved by compare-and-swap
-- (`UPDATE ... WHERE target = $expected`) in the transaction that appends
-- the operation. `target` is a session id in hex or `ref: NAME`.
CREATE TABLE sessctl.refs (
    name   text PRIMARY KEY,
    target text NOT NULL
);

-- The head of the operation chain: one row, locked (FOR UPDATE) by every
-- write for the length of its transaction, which orders writers.
CREATE TABLE sessctl.chain_head (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq  bigint  NOT NULL,
    hash bytea
);
INSERT INTO sessctl.chain_head (seq, hash) VALUES (0, NULL);
