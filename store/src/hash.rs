//! Object ids and id prefixes.
//!
//! An [`ObjectId`] is the 32-byte blake3 digest that names an object (see
//! objects-format.md, "Identity"); it prints as 64 lowercase hex digits. A
//! [`Prefix`] is what a person types: 4 to 64 hex digits, resolved against the
//! store by the object database. This module never touches storage.

use std::fmt;
use std::str::FromStr;

/// Length of an object id in bytes.
pub const ID_LEN: usize = 32;
/// Length of an object id in hex digits.
pub const HEX_LEN: usize = 2 * ID_LEN;

/// The first index in `lo..hi` whose id is not below `key`, over ids sorted
/// ascending and read through `id_at` (`hi` when every id is below it).
///
/// Ids are blake3 hashes, uniform over their range, so the search first
/// interpolates on the 8 bytes after the first: each probe narrows the
/// range to about the square root of what it was, and a lookup among
/// millions of ids touches a few of them (and a few pages of a freshly
/// mapped file) instead of the twenty-odd of a binary search. Each probe
/// keeps the bounds of a binary search (the answer stays in `lo..=hi`);
/// after a few rounds, or once the range is small, a binary search ends
/// it. Ids that are not uniform (a damaged file) cost a few probes more,
/// never a wrong bound; an id `id_at` cannot read counts as not below
/// `key`, and the caller checks what it finds.
pub(crate) fn interpolated_lower_bound<'a>(
    mut lo: usize,
    mut hi: usize,
    key: &[u8; ID_LEN],
    id_at: impl Fn(usize) -> Option<&'a [u8]>,
) -> usize {
    let value = |id: &[u8]| -> u64 {
        id.get(1..9)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_be_bytes)
    };
    let target = value(&key[..]);
    // Every id below `lo` is < key and every id from `hi` on is >= key;
    // `vlo` and `vhi` bound the values of the ids in between.
    let (mut vlo, mut vhi) = (0u64, u64::MAX);
    for _ in 0..4 {
        let len = hi.saturating_sub(lo);
        if len <= 16 {
            break;
        }
        let t = target.clamp(vlo, vhi);
        let span = u128::from(vhi - vlo) + 1;
        let guess = lo + ((u128::from(t - vlo) * len as u128) / span) as usize;
        let g = guess.min(hi - 1);
        match id_at(g) {
            Some(id) if id < &key[..] => {
                lo = g + 1;
                // Clamped: in a damaged file an id in this fan-out range
                // may start with another byte, and its value says nothing
                // (the bounds must stay ordered).
                vlo = value(id).clamp(vlo, vhi);
            }
            // Found: with ids each held once (what every caller's file
            // promises and checks), this is the lower bound.
            Some(id) if id == &key[..] => return g,
            Some(id) => {
                hi = g;
                vhi = value(id).min(vhi).max(vlo);
            }
            None => break,
        }
    }
    let mut len = hi.saturating_sub(lo);
    while len > 0 {
        let half = len / 2;
        if id_at(lo + half).is_some_and(|id| id < &key[..]) {
            lo += half + 1;
            len -= half + 1;
        } else {
            len = half;
        }
    }
    lo
}
/// The shortest prefix a person may type (objects-format.md, "Identity").
pub const MIN_PREFIX_LEN: usize = 4;

/// The blake3 digest of an object's kind, format version and canonical payload.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId([u8; ID_LEN]);

impl ObjectId {
    /// Wraps 32 raw bytes.
    pub const fn from_bytes(bytes: [u8; ID_LEN]) -> Self {
        ObjectId(bytes)
    }

    /// Reads an id from a slice that must be exactly 32 bytes long.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(ObjectId)
    }

    /// The raw digest.
    pub const fn as_bytes(&self) -> &[u8; ID_LEN] {
        &self.0
    }

    /// Lowercase hex, 64 digits.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(HEX_LEN);
        for b in self.0 {
            s.push(HEX_DIGITS[(b >> 4) as usize] as char);
            s.push(HEX_DIGITS[(b & 0xf) as usize] as char);
        }
        s
    }

    /// The first `len` hex digits (for short display).
    pub fn to_hex_prefix(&self, len: usize) -> String {
        let mut s = self.to_hex();
        s.truncate(len.min(HEX_LEN));
        s
    }

    /// Parses exactly 64 hex digits (either case).
    pub fn from_hex(hex: &str) -> Result<Self, IdParseError> {
        if hex.len() != HEX_LEN {
            return Err(IdParseError::Length {
                input: hex.to_owned(),
            });
        }
        let mut out = [0u8; ID_LEN];
        let bytes = hex.as_bytes();
        for (i, slot) in out.iter_mut().enumerate() {
            let hi = hex_value(bytes[2 * i]);
            let lo = hex_value(bytes[2 * i + 1]);
            match (hi, lo) {
                (Some(h), Some(l)) => *slot = (h << 4) | l,
                _ => {
                    return Err(IdParseError::NotHex {
                        input: hex.to_owned(),
                    })
                }
            }
        }
        Ok(ObjectId(out))
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.to_hex_prefix(16))
    }
}

impl FromStr for ObjectId {
    type Err = IdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ObjectId::from_hex(s)
    }
}

/// Why a string is not an id or prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdParseError {
    #[error("'{input}' is not an object id: expected {HEX_LEN} hex digits")]
    Length { input: String },
    #[error("'{input}' is not an object id: only the hex digits 0-9 and a-f may appear")]
    NotHex { input: String },
    #[error("'{input}' is too short to name an object: give at least {MIN_PREFIX_LEN} hex digits")]
    PrefixTooShort { input: String },
    #[error("'{input}' is too long to be an object id prefix: at most {HEX_LEN} hex digits")]
    PrefixTooLong { input: String },
}

/// A hex prefix of an id, 4 to 64 digits, as a person types it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The prefix digits packed as bytes; an odd trailing digit sits in the high nibble.
    bytes: [u8; ID_LEN],
    /// Number of hex digits.
    hex_len: u8,
}

impl Prefix {
    /// Parses 4 to 64 hex digits (either case).
    pub fn from_hex(hex: &str) -> Result<Self, IdParseError> {
        if hex.len() < MIN_PREFIX_LEN {
            return Err(IdParseError::PrefixTooShort {
                input: hex.to_owned(),
            });
        }
        if hex.len() > HEX_LEN {
            return Err(IdParseError::PrefixTooLong {
                input: hex.to_owned(),
            });
        }
        let mut bytes = [0u8; ID_LEN];
        for (i, c) in hex.bytes().enumerate() {
            let v = hex_value(c).ok_or_else(|| IdParseError::NotHex {
                input: hex.to_owned(),
            })?;
            if i % 2 == 0 {
                bytes[i / 2] = v << 4;
            } else {
                bytes[i / 2] |= v;
            }
        }
        Ok(Prefix {
            bytes,
            hex_len: hex.len() as u8,
        })
    }

    /// Number of hex digits.
    pub fn hex_len(&self) -> usize {
        self.hex_len as usize
    }

    /// The first byte of every id this prefix matches (for fan-out tables).
    pub fn first_byte(&self) -> u8 {
        self.bytes[0]
    }

    /// The smallest id this prefix matches; every match sorts at or after it.
    pub fn lower_bound(&self) -> ObjectId {
        ObjectId(self.bytes)
    }

    /// Whether `id` starts with this prefix.
    pub fn matches(&self, id: &ObjectId) -> bool {
        let full = self.hex_len() / 2;
        if id.0[..full] != self.bytes[..full] {
            return false;
        }
        if self.hex_len() % 2 == 1 {
            return id.0[full] & 0xf0 == self.bytes[full];
        }
        true
    }

    /// The full id, when all 64 digits were given.
    pub fn as_full_id(&self) -> Option<ObjectId> {
        (self.hex_len() == HEX_LEN).then_some(ObjectId(self.bytes))
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&ObjectId(self.bytes).to_hex()[..self.hex_len()])
    }
}

impl fmt::Debug for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Prefix({self})")
    }
}

impl FromStr for Prefix {
    type Err = IdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Prefix::from_hex(s)
    }
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Lowercase hex of arbitrary bytes (for dumps and checksums in messages).
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(HEX_DIGITS[(b >> 4) as usize] as char);
        s.push(HEX_DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

/// Hashes [`ObjectId`]s for the sets and maps that hold a whole store's ids
/// (gc, fsck): an id is a blake3 digest already, so two of its words folded
/// through one keyed 128-bit multiply spread it, where SipHash would hash
/// all 32 bytes again. The keys are random per process, so ids chosen to
/// collide in a table's low bits (cheap to grind for a few bits) collide in
/// no one's table but the grinder's guess.
#[derive(Clone, Copy, Debug)]
pub struct IdBuildHasher {
    k0: u64,
    k1: u64,
}

impl Default for IdBuildHasher {
    fn default() -> Self {
        static KEYS: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();
        let (k0, k1) = *KEYS.get_or_init(|| {
            use std::hash::BuildHasher;
            let s = std::collections::hash_map::RandomState::new();
            (s.hash_one(0x05e5_5c71_u64), s.hash_one(0x01d5_u64) | 1)
        });
        IdBuildHasher { k0, k1 }
    }
}

impl std::hash::BuildHasher for IdBuildHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher {
            k0: self.k0,
            k1: self.k1,
            acc: 0,
        }
    }
}

/// The hasher of [`IdBuildHasher`].
#[derive(Clone, Copy, Debug)]
pub struct IdHasher {
    k0: u64,
    k1: u64,
    acc: u64,
}

impl IdHasher {
    fn fold(&mut self, a: u64, b: u64) {
        let p = u128::from((a ^ self.k0) ^ self.acc).wrapping_mul(u128::from(b ^ self.k1));
        self.acc = (p as u64) ^ ((p >> 64) as u64);
    }
}

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        // An id: its first 16 bytes. Anything else, 16 bytes at a time.
        let mut chunks = bytes.chunks(16);
        for c in chunks.by_ref() {
            let mut w = [0u8; 16];
            w[..c.len()].copy_from_slice(c);
            let a = u64::from_le_bytes(w[..8].try_into().expect("8 bytes"));
            let b = u64::from_le_bytes(w[8..].try_into().expect("8 bytes"));
            self.fold(a, b);
            if bytes.len() == ID_LEN {
                return;
            }
        }
    }
    // The slice's length prefix: every id has the same.
    fn write_usize(&mut self, _: usize) {}
    fn finish(&self) -> u64 {
        self.acc
    }
}

/// A set of ids hashed with [`IdBuildHasher`].
pub type IdSet = std::collections::HashSet<ObjectId, IdBuildHasher>;
/// A map from ids hashed with [`IdBuildHasher`].
pub type IdMap<V> = std::collections::HashMap<ObjectId, V, IdBuildHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let id = ObjectId::from_bytes(*blake3::hash(b"x").as_bytes());
        let hex = id.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(hex, hex.to_lowercase());
        assert_eq!(ObjectId::from_hex(&hex).unwrap(), id);
        assert_eq!(ObjectId::from_hex(&hex.to_uppercase()).unwrap(), id);
    }

    #[test]
    fn bad_ids_are_refused_with_a_reason() {
        assert!(matches!(
            ObjectId::from_hex("abc"),
            Err(IdParseError::Length { .. })
        ));
        let bad = "g".repeat(64);
        assert!(matches!(
            ObjectId::from_hex(&bad),
            Err(IdParseError::NotHex { .. })
        ));
        assert!(matches!(
            Prefix::from_hex("abc"),
            Err(IdParseError::PrefixTooShort { .. })
        ));
        assert!(matches!(
            Prefix::from_hex(&"a".repeat(65)),
            Err(IdParseError::PrefixTooLong { .. })
        ));
        assert!(matches!(
            Prefix::from_hex("abcz"),
            Err(IdParseError::NotHex { .. })
        ));
    }

    #[test]
    fn prefixes_match_odd_and_even_lengths() {
        let id = ObjectId::from_hex(&format!("abcdef{}", "0".repeat(58))).unwrap();
        for p in ["abcd", "abcde", "ABCDEF", "abcdef0"] {
            assert!(Prefix::from_hex(p).unwrap().matches(&id), "{p}");
        }
        for p in ["abce", "abcdf", "abcdef1"] {
            assert!(!Prefix::from_hex(p).unwrap().matches(&id), "{p}");
        }
        let p = Prefix::from_hex("abcde").unwrap();
        assert!(p.lower_bound() <= id);
        assert_eq!(p.to_string(), "abcde");
        assert_eq!(
            Prefix::from_hex(&id.to_hex()).unwrap().as_full_id(),
            Some(id)
        );
    }
}
