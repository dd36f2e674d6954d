-- sessctl remote store, schema version 4 (objects-format.md, "Remote gc").

-- gc's bucket sweeps, announced: an odd value while one may be deleting
-- packs (set, and committed, before it lists the bucket), the next even
-- value once it is done (in the transaction that ends its deletes). A
-- writer that saw an even value before it uploaded its pack, and finds the
-- same value under the write lock, knows no sweep can have deleted that
-- pack, and names it without checking the bucket.
ALTER TABLE sessctl.chain_head ADD COLUMN sweeps bigint NOT NULL DEFAULT 0;
