-- sessctl remote store, schema version 6 (objects-format.md, "Inline
-- packs"): a write's pack may be kept in PostgreSQL instead of the bucket,
-- when the store URL asks for it (`inline=BYTES`) and the pack is no larger:
-- the write then makes no S3 request. The compactor (a writer's upkeep once
-- `inline_bytes` passes the seal size, and gc and repack) merges inline
-- packs into one pack in the bucket and deletes their rows, as it merges
-- small packs. Applied by `sessctl init --store postgres://...`, or by the
-- first writable open of an older store, in one transaction.

-- The pack's bytes, exactly as they would be in the bucket (its key is
-- still the blake3 of them); NULL for a pack in the bucket. Already zstd:
-- stored out of line without PostgreSQL's own compression.
ALTER TABLE sessctl.packs ADD COLUMN body bytea;
ALTER TABLE sessctl.packs ALTER COLUMN body SET STORAGE EXTERNAL;
-- The compactor finds the inline packs without reading every pack row.
CREATE INDEX packs_inline ON sessctl.packs (id) WHERE body IS NOT NULL;

-- The bytes of the inline packs, kept by the writers under the write lock
-- (each adds its pack's) and set again from the table by the compactor.
ALTER TABLE sessctl.chain_head ADD COLUMN inline_bytes bigint NOT NULL DEFAULT 0;
