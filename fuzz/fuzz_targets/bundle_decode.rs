#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sessctl_store::fuzzing::bundle_decode(data));
