-- sessctl remote store, schema version 7 (objects-format.md, "Store
-- identity"): the database records which store it is and where its objects
-- are, so that a URL naming another bucket or prefix (a typo, or another
-- store's) is refused before anything is read, written or swept there.
-- Applied by `sessctl init --store postgres://...`, or by the first writable
-- open of an older store, in one transaction; the row is written by that
-- transaction too (not by this file), once the bucket's `sessctl-store`
-- object has been checked: a new store writes it with the store's id, an
-- older store's must already be there.

CREATE TABLE sessctl.store (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    id      text    NOT NULL CHECK (id ~ '^[0-9a-f]{32}$'),  -- random, made by init
    objects text    NOT NULL                                 -- s3://BUCKET[/PREFIX]
);
