//! An index table (objects-format.md, "Index tables"). The first byte is a
//! selector: odd, the table's trailing blake3 is recomputed first, so that
//! the checks `verify` makes behind the checksum are reached. Every read of
//! a table that opens stays in bounds; one that verifies answers as a linear
//! scan of its entries does: lookups, lower bounds, prefix scans both ways,
//! and its merge with itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sessctl_store::fuzzing::index_table(data));
