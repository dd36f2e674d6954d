//! Remote packs: the one S3 object a write uploads (objects-format.md,
//! "Remote store", "Remote pack"). Immutable and named by the blake3 of its
//! bytes, so that uploading one twice is harmless and a cached copy can
//! never be stale. Decoding never panics: every length is checked.

use crate::hash::ObjectId;
use crate::object::{EncodedObject, ObjectKind};

/// The first four bytes of a remote pack.
/// objects-format.md, "Remote pack".
pub(super) const MAGIC: &[u8; 4] = b"SRPK";
/// The remote pack version this sessctl writes and reads.
pub(super) const VERSION: u8 = 1;
/// Magic, version, three zero bytes, count (u32), body length (u64).
const HEADER_LEN: usize = 20;
/// Each entry's fixed part: id (32), kind (1), payload length (u64).
const ENTRY_LEN: usize = 32 + 1 + 8;
/// The largest inflated body a reader accepts (a write never makes one
/// anywhere near as large: one transaction's objects).
const MAX_BODY: u64 = 1 << 32;
/// zstd level: a pack is written once per commit, on the commit's path.
const LEVEL: i32 = 3;

/// Where an object's payload is in a pack's inflated body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub id: ObjectId,
    pub kind: ObjectKind,
    pub off: u64,
    pub len: u64,
}

/// A pack ready to upload.
#[derive(Debug)]
pub(super) struct Built {
    /// The blake3 of `bytes`, in hex: the pack's name.
    pub name: String,
    pub bytes: Vec<u8>,
    pub entries: Vec<Entry>,
    /// The inflated body, as a reader of `bytes` gets it.
    pub body: Vec<u8>,
}

/// Packs `objects` (distinct ids) into one remote pack.
pub(super) fn build(objects: &[&EncodedObject]) -> std::io::Result<Built> {
    let mut body = Vec::with_capacity(objects.iter().map(|o| ENTRY_LEN + o.payload().len()).sum());
    let mut entries = Vec::with_capacity(objects.len());
    for o in objects {
        body.extend_from_slice(o.id().as_bytes());
        body.push(o.kind().code());
        body.extend_from_slice(&(o.payload().len() as u64).to_le_bytes());
        let off = body.len() as u64;
        body.extend_from_slice(o.payload());
        entries.push(Entry {
            id: o.id(),
            kind: o.kind(),
            off,
            len: o.payload().len() as u64,
        });
    }
    let count = u32::try_from(objects.len())
        .map_err(|_| std::io::Error::other("too many objects for one remote pack"))?;
    let deflated = zstd::bulk::compress(&body, LEVEL)?;
    let mut bytes = Vec::with_capacity(HEADER_LEN + deflated.len());
    bytes.extend_from_slice(MAGIC);
    bytes.push(VERSION);
    bytes.extend_from_slice(&[0; 3]);
    bytes.extend_from_slice(&count.to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&deflated);
    Ok(Built {
        name: blake3::hash(&bytes).to_hex().to_string(),
        bytes,
        entries,
        body,
    })
}

/// Checks a fetched pack against its name and inflates its body; the
/// reason when it is not the pack named `name`.
pub(super) fn open(name: &str, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let actual = blake3::hash(bytes).to_hex();
    if actual.as_str() != name {
        return Err(format!("its bytes hash to {actual}, not its name"));
    }
    if bytes.len() < HEADER_LEN || &bytes[..4] != MAGIC {
        return Err("not a remote pack (bad magic)".into());
    }
    if bytes[4] != VERSION {
        return Err(format!(
            "remote pack version {} (this sessctl reads {VERSION})",
            bytes[4]
        ));
    }
    let field = |at: usize, n: usize| {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&bytes[at..at + n]);
        u64::from_le_bytes(b)
    };
    let body_len = field(12, 8);
    if body_len > MAX_BODY {
        return Err(format!(
            "a body of {body_len} bytes is larger than any pack"
        ));
    }
    let body = zstd::bulk::decompress(&bytes[HEADER_LEN..], body_len as usize)
        .map_err(|e| format!("its body does not inflate: {e}"))?;
    if body.len() as u64 != body_len {
        return Err(format!(
            "its body inflates to {} bytes, not the {body_len} its header says",
            body.len()
        ));
    }
    Ok(body)
}

/// Every entry of an inflated body, in order (fsck and tests; reads go
/// by the offsets PostgreSQL keeps).
pub(super) fn entries(body: &[u8]) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < body.len() {
        if body.len() - at < ENTRY_LEN {
            return Err(format!("an entry at {at} is cut short"));
        }
        let id = ObjectId::from_slice(&body[at..at + 32]).expect("32 bytes");
        let kind = ObjectKind::from_code(body[at + 32])
            .ok_or_else(|| format!("unknown object kind {} at {at}", body[at + 32]))?;
        let mut len = [0u8; 8];
        len.copy_from_slice(&body[at + 33..at + 41]);
        let len = u64::from_le_bytes(len);
        let off = (at + ENTRY_LEN) as u64;
        if len > (body.len() as u64 - off) {
            return Err(format!("the payload of {id} runs past the body"));
        }
        out.push(Entry { id, kind, off, len });
        at = (off + len) as usize;
    }
    Ok(out)
}

/// The payload of `entry` in `body`, or why it is not there.
pub(super) fn payload(body: &[u8], off: u64, len: u64) -> Result<&[u8], String> {
    let end = off
        .checked_add(len)
        .filter(|&e| e <= body.len() as u64)
        .ok_or_else(|| {
            format!(
                "its place in the pack ({off}+{len}) is past the pack's {} bytes",
                body.len()
            )
        })?;
    Ok(&body[off as usize..end as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pack_round_trips_and_a_flipped_byte_is_refused() {
        let a = EncodedObject::new(ObjectKind::Blob, b"\x61a".to_vec());
        let b = EncodedObject::new(ObjectKind::Raw, b"{\"x\":1}".to_vec());
        let built = build(&[&a, &b]).unwrap();
        let body = open(&built.name, &built.bytes).unwrap();
        assert_eq!(entries(&body).unwrap(), built.entries);
        let e = built.entries[1];
        assert_eq!(payload(&body, e.off, e.len).unwrap(), b.payload());
        let mut bad = built.bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(open(&built.name, &bad).unwrap_err().contains("hash"));
        assert!(payload(&body, e.off, e.len + 1).is_err());
    }
}

/// The golden remote pack (objects-format.md, "Golden fixtures"): a pack a
/// sessctl of remote pack version 1 wrote still opens, its header and body
/// are what this code writes for the same objects, byte for byte, and its
/// objects verify.
#[cfg(test)]
mod golden {
    use super::*;

    const NAME: &str = include_str!("../../../../tests/fixtures/remote-pack-v1/NAME");
    const PACK: &[u8] = include_bytes!("../../../../tests/fixtures/remote-pack-v1/pack.srpk");

    fn objects() -> Vec<EncodedObject> {
        let hello = serde_json::json!({"role": "user", "content": "hello"});
        vec![
            EncodedObject::new(
                ObjectKind::Blob,
                crate::object::blob::encode_value(&hello).unwrap(),
            ),
            EncodedObject::new(
                ObjectKind::Raw,
                br#"{"role": "assistant", "content": "hi"}"#.to_vec(),
            ),
        ]
    }

    #[test]
    fn the_golden_remote_pack_opens_and_matches_what_is_written() {
        let objects = objects();
        let body = open(NAME.trim(), PACK).unwrap();
        let built = build(&objects.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(&PACK[..20], &built.bytes[..20], "header");
        assert_eq!(body, open(&built.name, &built.bytes).unwrap(), "body");
        let listed = entries(&body).unwrap();
        assert_eq!(listed.len(), objects.len());
        for (e, o) in listed.iter().zip(&objects) {
            let p = payload(&body, e.off, e.len).unwrap().to_vec();
            assert_eq!(
                EncodedObject::verified(e.id, e.kind, p).unwrap().id(),
                o.id()
            );
        }
    }
}
