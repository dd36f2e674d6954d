-- sessctl remote store, schema version 3 (objects-format.md, "Remote gc").
-- Version 2 is another change's; a store may go from 1 to 3 directly.

-- Packs whose `packs` row gc (or repack) dropped, and when: their S3 object
-- stays in the bucket until it is past the grace period counted from here
-- (a reader that found an object's old place before the row went may still
-- fetch it), then gc deletes the object and this row. gc never deletes a
-- pack a `packs` row names, whatever this table says (a write may name the
-- same bytes again).
CREATE TABLE sessctl.retired_packs (
    key        text   PRIMARY KEY,
    retired_at bigint NOT NULL            -- ms since the Unix epoch
);
