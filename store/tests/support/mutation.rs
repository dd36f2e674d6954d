//! Byte edits of valid encodings, shared by the fuzzing oracles' proptests
//! (`fuzz_entry.rs`, `fuzz_foreign.rs`, `index_table.rs`); each adds edits
//! of its own formats. And their configuration.

use proptest::prelude::*;
use proptest::sample::Index;

/// One format-blind edit.
#[derive(Debug, Clone)]
pub enum Edit {
    FlipBit(Index, u8),
    SetByte(Index, u8),
    Truncate(Index),
    Delete(Index, Index),
    /// Copies a range of the input to another place (inserted).
    Duplicate(Index, Index, Index),
    /// Inserts a range of another seed.
    Splice(Index, Index, Index, Index),
    Insert(Index, Vec<u8>),
}

/// Edits, bit flips twice as likely as the others.
pub fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        2 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Edit::FlipBit(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| Edit::SetByte(i, v)),
        1 => any::<Index>().prop_map(Edit::Truncate),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Edit::Delete(a, b)),
        1 => (any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(a, b, c)| Edit::Duplicate(a, b, c)),
        1 => (any::<Index>(), any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(a, b, c, d)| Edit::Splice(a, b, c, d)),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, v)| Edit::Insert(i, v)),
    ]
}

/// Applies `e` to `bytes`, splicing from `others`; ranges are capped so an
/// input never grows or shrinks by more than 256 bytes an edit.
pub fn apply_edit(bytes: &mut Vec<u8>, e: &Edit, others: &[&[u8]]) {
    let len = bytes.len();
    let upto = |i: &Index| i.index(len + 1);
    match e {
        Edit::FlipBit(i, bit) if len > 0 => bytes[i.index(len)] ^= 1 << bit,
        Edit::SetByte(i, v) if len > 0 => bytes[i.index(len)] = *v,
        Edit::Truncate(i) => bytes.truncate(upto(i)),
        Edit::Delete(a, b) => {
            let (a, b) = (upto(a), upto(b));
            bytes.drain(a.min(b)..a.max(b).min(a.min(b) + 64));
        }
        Edit::Duplicate(a, b, to) => {
            let (a, b) = (upto(a), upto(b));
            let range = bytes[a.min(b)..a.max(b).min(a.min(b) + 256)].to_vec();
            let to = upto(to);
            bytes.splice(to..to, range);
        }
        Edit::Splice(which, a, b, to) if !others.is_empty() => {
            let other = others[which.index(others.len())];
            let (a, b) = (a.index(other.len() + 1), b.index(other.len() + 1));
            let range = &other[a.min(b)..a.max(b).min(a.min(b) + 256)];
            let to = upto(to);
            bytes.splice(to..to, range.iter().copied());
        }
        Edit::Insert(i, v) => {
            let to = upto(i);
            bytes.splice(to..to, v.iter().copied());
        }
        _ => {}
    }
}

/// Writes `value` at `pos`, as much of it as fits.
pub fn overwrite(bytes: &mut [u8], pos: usize, value: &[u8]) {
    for (k, b) in value.iter().enumerate() {
        if let Some(slot) = bytes.get_mut(pos + k) {
            *slot = *b;
        }
    }
}

/// `cases` proptest cases, bounded so that each file runs in a few seconds
/// in debug mode; `SESSCTL_FUZZ_SCALE=N` runs N times as many, for a longer
/// hunt.
pub fn config(cases: u32) -> ProptestConfig {
    let scale = std::env::var("SESSCTL_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1);
    ProptestConfig {
        cases: cases.saturating_mul(scale),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}
