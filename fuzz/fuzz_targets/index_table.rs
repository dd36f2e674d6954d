//! An index table (objects-format.md, "Index tables"). The first byte is a
//! selector: odd, the table's trailing blake3 is recomputed first, so that
//! the checks `verify` makes behind the checksum are reached. Every read of
//! a table that opens stays in bounds; one that verifies answers as a linear
//! scan of its entries does: lookups, lower bounds, prefix scans both ways,
//! and its merge with itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessctl_store::fuzzing::fix_trailing_checksum;
use sessctl_store::index::table::{merge, Table};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, file)) = data.split_first() else {
        return;
    };
    let mut bytes = file.to_vec();
    if selector % 2 == 1 {
        fix_trailing_checksum(&mut bytes);
    }
    let Ok(table) = Table::from_bytes(bytes) else {
        return;
    };
    let verified = table.verify().is_ok();
    let n = table.len();
    assert!(
        n as u64 * 8 <= table.file_len(),
        "more entries than the file holds"
    );
    let entries: Vec<_> = (0..n).map(|i| table.entry(i)).collect();
    assert!(table.entry(n).is_err());

    // Probes: slices of the input, and (a bounded number of) keys, their
    // prefixes and their successors.
    let mut probes: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0xff; 3]];
    for at in [0, 1, 7, 64, data.len() / 2, data.len().saturating_sub(6)] {
        probes.push(
            data.get(at..(at + 5).min(data.len()))
                .unwrap_or_default()
                .to_vec(),
        );
    }
    for (k, _) in entries.iter().take(64).flatten() {
        probes.push(k.to_vec());
        probes.push(k[..k.len() / 2].to_vec());
        probes.push([*k, &[0]].concat());
    }

    // A verified table's entries: what every answer must agree with.
    let all: Option<Vec<_>> = verified.then(|| {
        let read = entries
            .iter()
            .map(|e| e.clone().expect("a verified entry reads"));
        read.collect()
    });
    for p in &probes {
        let got = table.get(p);
        let lower = table.lower_bound(p);
        let forward: Vec<_> = table.prefix(p).into_iter().flatten().collect();
        let backward: Vec<_> = table.prefix(p).into_iter().flat_map(|r| r.rev()).collect();
        assert!(forward.len() <= n && backward.len() <= n);
        if let Ok(i) = lower {
            assert!(i <= n, "lower bound {i} past the end");
        }
        let Some(all) = &all else { continue };
        let want = all
            .iter()
            .find(|(k, _)| *k == p.as_slice())
            .map(|&(_, v)| v);
        assert_eq!(got.expect("a verified table answers"), want);
        let before = all.iter().filter(|(k, _)| *k < p.as_slice()).count();
        assert_eq!(lower.expect("a verified table answers"), before);
        let scan: Vec<_> = all
            .iter()
            .filter(|(k, _)| k.starts_with(p))
            .cloned()
            .collect();
        let forward: Vec<_> = forward
            .into_iter()
            .map(|e| e.expect("a verified entry reads"))
            .collect();
        let mut backward: Vec<_> = backward
            .into_iter()
            .map(|e| e.expect("a verified entry reads"))
            .collect();
        backward.reverse();
        assert_eq!(forward, scan);
        assert_eq!(backward, scan);
    }

    let merged: Vec<_> = merge(&[&table, &table], false).collect();
    let live = merge(&[&table], true).count();
    assert!(merged.len() <= n && live <= n);
    if let Some(all) = all {
        let merged: Vec<_> = merged
            .into_iter()
            .map(|e| e.expect("a verified merge reads"))
            .collect();
        assert_eq!(merged, all);
        assert_eq!(live, all.iter().filter(|(_, v)| v.is_some()).count());
    }
});
