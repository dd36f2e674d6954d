//! Hostile input: files that lie about their sizes are refused with bounded
//! memory, measured on the real binary as a child process.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const GIB: usize = 1 << 30;
/// objects-format.md, "Bundles": kind, id, length.
const RECORD_HEADER: usize = 1 + 32 + 4;

/// A bundle (no refs, records or prerequisites; one object counted) whose one
/// zstd block inflates to `raw_len` bytes: `head`, then zeros. Its checksum is
/// valid, so every byte is the decoder's to judge.
fn bomb(path: &Path, head: &[u8], raw_len: usize) {
    let mut block = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    block.set_pledged_src_size(Some(raw_len as u64)).unwrap();
    block.include_contentsize(true).unwrap();
    block.write_all(head).unwrap();
    let zeros = vec![0u8; 1 << 20];
    let mut left = raw_len - head.len();
    while left > 0 {
        let n = left.min(zeros.len());
        block.write_all(&zeros[..n]).unwrap();
        left -= n;
    }
    let data = block.finish().unwrap();
    let mut out = Vec::new();
    out.extend_from_slice(b"SBDL");
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // refs
    out.extend_from_slice(&0u32.to_le_bytes()); // conversations
    out.extend_from_slice(&0u32.to_le_bytes()); // prerequisites
    out.extend_from_slice(&1u64.to_le_bytes()); // objects
    out.extend_from_slice(&1u32.to_le_bytes()); // blocks
    out.push(1); // zstd
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&(raw_len as u32).to_le_bytes());
    out.extend_from_slice(&data);
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    std::fs::write(path, out).unwrap();
}

/// Runs sessctl with `args`; returns its exit code, stderr and peak
/// resident memory in bytes (the kernel's count for this child alone).
#[allow(clippy::zombie_processes)] // reaped by wait4, which std cannot do
fn run_measured(args: &[&str]) -> (i32, String, u64) {
    let child = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stderr = child.stderr.unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it for a
    // child of this process that std has not reaped (it is never waited on).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child; status and usage point at live locals.
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status), "sessctl died: status {status}");
    // Linux reports ru_maxrss in KiB.
    (
        libc::WEXITSTATUS(status),
        err,
        usage.ru_maxrss as u64 * 1024,
    )
}

#[test]
fn a_one_gib_bundle_bomb_is_refused_in_a_few_megabytes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bomb.bundle");
    // A block of 1 GiB of zeros: its first record's kind byte is 0.
    bomb(&file, &[], GIB);
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size < 64 * 1024, "the bomb is {size} bytes");
    let f = file.to_str().unwrap();
    for args in [
        vec!["bundle", "verify", f],
        vec!["bundle", "verify", "--json", f],
    ] {
        let (code, err, peak) = run_measured(&args);
        assert_eq!(code, 3, "{args:?}: {err}");
        assert!(peak < 64 << 20, "{args:?}: peak RSS {} MiB", peak >> 20);
    }
    let (_, err, _) = run_measured(&["bundle", "verify", f]);
    assert!(err.contains("unknown object kind 0"), "{err}");
}

#[test]
fn a_record_that_claims_a_gib_is_hashed_as_it_streams_not_held() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("liar.bundle");
    // A blob record whose header claims the whole block: the bytes are
    // really there, so only their hash can refuse them.
    let len = GIB - 64 * 1024;
    let mut head = vec![1u8]; // a blob
    head.extend_from_slice(&[7u8; 32]);
    head.extend_from_slice(&(len as u32).to_le_bytes());
    bomb(&file, &head, RECORD_HEADER + len);
    let (code, err, peak) = run_measured(&["bundle", "verify", file.to_str().unwrap()]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not to its id"), "{err}");
    assert!(peak < 64 << 20, "peak RSS {} MiB", peak >> 20);
}
