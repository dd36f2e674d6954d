-- sessctl remote store, schema version 2 (objects-format.md, "Remote store"):
-- the derived index's keys in PostgreSQL, so that opening a store replays
-- no operation. Applied by `sessctl init --store postgres://...`, or by the
-- first writable open of a version-1 store, in one transaction.

-- The index's keys and values, encoded as the local index encodes them
-- (objects-format.md, "Index"). Written in the transaction that appends the
-- operation changing them, under the chain-head row lock.
CREATE TABLE sessctl.index_keys (
    key   bytea PRIMARY KEY,
    value bytea NOT NULL
);

-- The operation the keys describe: the chain head's `seq` once built.
-- NULL (a version-1 store with operations, upgraded): not built yet; the
-- first writable open builds them from the operations, under the lock.
ALTER TABLE sessctl.chain_head ADD COLUMN index_seq bigint;
UPDATE sessctl.chain_head SET index_seq = CASE WHEN seq = 0 THEN 0 END;
