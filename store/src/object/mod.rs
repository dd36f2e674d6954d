//! Objects: what they are (domain types), how they are named (identity) and
//! their exact bytes (the canonical payload).
//!
//! The domain types ([`Blob`], [`Session`]) know nothing of storage and carry
//! no serde; the only place their bytes are produced or parsed is the private
//! wire code beside them (`session::wire`, `cbor`). Every decoder here is
//! strict: it accepts exactly the canonical encoding of a value, so one value
//! has one id (objects-format.md, "Identity").

pub(crate) mod blob;
pub(crate) mod cbor;
pub(crate) mod id_batch;
pub mod raw;
mod session;
pub(crate) mod wire;

pub use blob::Blob;
pub use cbor::CborError;
pub use raw::Raw;
pub use session::{
    Compaction, MessageDelta, RunSummary, Session, SessionMetadata, SessionStatus, SessionType,
    Usage,
};

use crate::hash::ObjectId;

/// Version of the object encoding, hashed into every id
/// (objects-format.md, "Identity" and "Versioning").
pub const OBJECT_FORMAT_VERSION: u32 = 1;

/// The kinds of object (objects-format.md, "Object kinds").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// One JSON value: a message, a context state, an environment state.
    Blob,
    /// A session: the commit of the session DAG.
    Session,
    /// A message exactly as its source wrote it: the bytes of its line(s),
    /// read as the JSON value they parse to.
    Raw,
}

impl ObjectKind {
    /// The kind's code in journal entries and pack records.
    pub const fn code(self) -> u8 {
        match self {
            ObjectKind::Blob => 1,
            ObjectKind::Session => 2,
            ObjectKind::Raw => 3,
        }
    }

    /// The kind with this code, if any.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(ObjectKind::Blob),
            2 => Some(ObjectKind::Session),
            3 => Some(ObjectKind::Raw),
            _ => None,
        }
    }

    /// The kind's name, as hashed and as printed by `cat-object -t`.
    pub const fn name(self) -> &'static str {
        match self {
            ObjectKind::Blob => "blob",
            ObjectKind::Session => "session",
            ObjectKind::Raw => "raw",
        }
    }

    /// The kind with this name, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "blob" => Some(ObjectKind::Blob),
            "session" => Some(ObjectKind::Session),
            "raw" => Some(ObjectKind::Raw),
            _ => None,
        }
    }

    /// Whether objects of this kind read as a JSON value, so that a session
    /// may name one as a message, a state or a summary: a blob, or a raw
    /// message (objects-format.md, "raw").
    pub const fn is_value(self) -> bool {
        matches!(self, ObjectKind::Blob | ObjectKind::Raw)
    }

    /// Whether an object of this kind may stand where `wanted` is named: of
    /// that kind, or, where a blob is wanted (a value), a raw message.
    pub fn serves_as(self, wanted: ObjectKind) -> bool {
        self == wanted || (wanted == ObjectKind::Blob && self.is_value())
    }
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The id of an object of `kind` whose canonical payload is `payload`:
/// `blake3("<kind> <version> <payload length>\0" || payload)`
/// (objects-format.md, "Identity").
pub fn object_id(kind: ObjectKind, payload: &[u8]) -> ObjectId {
    let mut hasher = id_hasher(kind, payload.len());
    hasher.update(payload);
    ObjectId::from_bytes(*hasher.finalize().as_bytes())
}

/// A hasher that has taken the identity header of an object of `kind` whose
/// payload is `len` bytes long: feed it the payload, as it arrives, to get
/// the object's id without holding the payload.
pub fn id_hasher(kind: ObjectKind, len: usize) -> blake3::Hasher {
    let mut hasher = blake3::Hasher::new();
    let mut header = [0u8; ID_HEADER_MAX];
    let n = id_header(kind, len, &mut header);
    hasher.update(&header[..n]);
    hasher
}

/// Room for any identity header: a kind name, two 20-digit numbers, two
/// spaces and the NUL.
pub(crate) const ID_HEADER_MAX: usize = 64;

/// Writes the identity header of an object of `kind` with a `len`-byte
/// payload, `"<kind> <version> <len>\0"`, at the start of `out`; returns
/// its length. Formatted on the stack: this runs once per object read, and
/// two `to_string`s cost more than hashing a short message.
pub(crate) fn id_header(kind: ObjectKind, len: usize, out: &mut [u8; ID_HEADER_MAX]) -> usize {
    let name = kind.name().as_bytes();
    out[..name.len()].copy_from_slice(name);
    let mut at = name.len();
    out[at] = b' ';
    at += 1;
    at += write_decimal(&mut out[at..], u64::from(OBJECT_FORMAT_VERSION));
    out[at] = b' ';
    at += 1;
    at += write_decimal(&mut out[at..], len as u64);
    out[at] = 0;
    at + 1
}

/// Writes `v` in decimal at the start of `out` (which has room for 20
/// digits); returns how many bytes it took.
fn write_decimal(out: &mut [u8], mut v: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for (k, d) in digits[..n].iter().rev().enumerate() {
        out[k] = *d;
    }
    n
}

/// Checks that `payload`, as an object of `kind`, hashes to `id`; the
/// reason when it does not, which the caller turns into a
/// `Corrupt { id, reason }` error.
pub(crate) fn verify_id(id: &ObjectId, kind: ObjectKind, payload: &[u8]) -> Result<(), String> {
    let actual = object_id(kind, payload);
    if actual != *id {
        return Err(mismatch(&actual, kind, payload.len()));
    }
    Ok(())
}

/// Why an object whose bytes hash to `actual` is not the one asked for.
pub(crate) fn mismatch(actual: &ObjectId, kind: ObjectKind, len: usize) -> String {
    format!("content hashes to {actual} ({kind}, {len} bytes), not to its id")
}

/// An object as stored: its kind, its canonical payload and the id they hash
/// to. The constructor computes the id, so an `EncodedObject` held in memory
/// is always self-consistent; bytes read from disk go through
/// `EncodedObject::verified`.
#[derive(Clone, PartialEq, Eq)]
pub struct EncodedObject {
    id: ObjectId,
    kind: ObjectKind,
    payload: Vec<u8>,
}

impl EncodedObject {
    /// Wraps a canonical payload and computes its id.
    pub(crate) fn new(kind: ObjectKind, payload: Vec<u8>) -> Self {
        EncodedObject {
            id: object_id(kind, &payload),
            kind,
            payload,
        }
    }

    /// Re-hashes bytes read from storage and checks they are the object `id`.
    /// Returns the reason for a mismatch, which the caller turns into a
    /// `Corrupt { id, reason }` error.
    pub(crate) fn verified(
        id: ObjectId,
        kind: ObjectKind,
        payload: Vec<u8>,
    ) -> Result<Self, String> {
        verify_id(&id, kind, &payload)?;
        Ok(EncodedObject { id, kind, payload })
    }

    /// Wraps bytes already checked by [`verify_id`] against `id`.
    pub(crate) fn from_verified(id: ObjectId, kind: ObjectKind, payload: Vec<u8>) -> Self {
        EncodedObject { id, kind, payload }
    }

    pub fn id(&self) -> ObjectId {
        self.id
    }
    pub fn kind(&self) -> ObjectKind {
        self.kind
    }
    /// The canonical payload (deterministic CBOR; a raw object's exact
    /// bytes).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
    pub fn into_payload(self) -> Vec<u8> {
        self.payload
    }

    /// Decodes the payload into a domain object.
    pub fn decode(&self) -> Result<Object, DecodeError> {
        match self.kind {
            ObjectKind::Blob => Blob::decode(&self.payload).map(Object::Blob),
            ObjectKind::Session => {
                Session::decode(&self.payload).map(|s| Object::Session(Box::new(s)))
            }
            ObjectKind::Raw => Raw::decode(&self.payload).map(Object::Raw),
        }
    }
}

impl std::fmt::Debug for EncodedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodedObject")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("len", &self.payload.len())
            .finish()
    }
}

/// A decoded object.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Blob(Blob),
    Session(Box<Session>),
    Raw(Raw),
}

impl Object {
    pub fn kind(&self) -> ObjectKind {
        match self {
            Object::Blob(_) => ObjectKind::Blob,
            Object::Session(_) => ObjectKind::Session,
            Object::Raw(_) => ObjectKind::Raw,
        }
    }

    /// Canonical bytes and id.
    pub fn encode(&self) -> Result<EncodedObject, EncodeError> {
        match self {
            Object::Blob(b) => Ok(b.encode()),
            Object::Session(s) => s.encode(),
            Object::Raw(r) => Ok(r.encode()),
        }
    }
}

/// Why a payload is not a valid object of its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("not canonical CBOR: {0}")]
    Cbor(#[from] CborError),
    #[error("invalid session: {0}")]
    Session(String),
    #[error("invalid raw message: {0}")]
    Raw(String),
}

/// Why a value cannot become an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{0}")]
    Cbor(#[from] CborError),
    #[error("invalid session: {0}")]
    InvalidSession(String),
    #[error("invalid JSON: {0}")]
    Json(String),
}
