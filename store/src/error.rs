//! The store's error type. Every I/O error names its path, every object error
//! names its object.

use std::path::PathBuf;

use crate::hash::{IdParseError, ObjectId, Prefix};
use crate::object::{DecodeError, EncodeError, ObjectKind};

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An object's bytes do not hash to its id, or do not decode.
    #[error("object {id} is corrupt: {reason}")]
    Corrupt { id: ObjectId, reason: String },
    /// A file of the store is damaged where no single object can be blamed.
    #[error("{path} is corrupt at byte {offset}: {reason}")]
    CorruptFile {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A session a walk reached cannot be read: what it names is unknown,
    /// so nothing that depends on reachability (gc) may go on.
    #[error("session {id} is reachable but cannot be read ({source})")]
    UnreadableReachable {
        id: ObjectId,
        #[source]
        source: Box<Error>,
    },
    #[error("object {id} not found")]
    NotFound { id: ObjectId },
    #[error("no object id starts with {prefix}")]
    UnknownPrefix { prefix: Prefix },
    #[error("{prefix} is ambiguous: it could be {}", candidates.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "))]
    AmbiguousPrefix {
        prefix: Prefix,
        candidates: Vec<ObjectId>,
    },
    #[error("object {id} is a {actual}, not a {expected}")]
    WrongKind {
        id: ObjectId,
        expected: ObjectKind,
        actual: ObjectKind,
    },
    #[error(transparent)]
    BadId(#[from] IdParseError),
    #[error("{0}")]
    Encode(#[from] EncodeError),
    #[error("{path} is not a sessctl store{}", if *.exists { " (it exists but has no FORMAT file)" } else { "" })]
    NotAStore { path: PathBuf, exists: bool },
    #[error("{path} already holds a sessctl store")]
    AlreadyExists { path: PathBuf },
    #[error("{path} has store format {found}; this sessctl reads format {supported}")]
    UnsupportedFormat {
        path: PathBuf,
        found: String,
        supported: u32,
    },
    #[error("store {path} is in use by {}", match .pid { Some(p) => format!("pid {p}"), None => "another process".to_owned() })]
    Locked { path: PathBuf, pid: Option<u32> },
    #[error("the store is open read-only")]
    ReadOnly,
    /// A durable write failed; nothing written after it can be trusted to be
    /// on disk, so the store refuses further writes until it is reopened.
    #[error("the store stopped accepting writes after a failed sync: {0}")]
    Poisoned(String),
    #[error("{0}")]
    Invalid(String),
    /// A ref did not hold what a transaction expected (a lost compare-and-swap).
    #[error("{name} moved: expected {}, found {}", show_target(.expected), show_target(.actual))]
    RefOutOfDate {
        name: String,
        expected: Option<String>,
        actual: Option<String>,
    },
    /// Another run holds the conversation.
    #[error("conversation {conversation} is busy: run {run} of pid {pid} is in progress")]
    Busy {
        conversation: String,
        run: u64,
        pid: u32,
    },
    #[error(transparent)]
    BadName(#[from] crate::refs::NameError),
    /// A malformed revision (`fix~x`): a usage error, not a lookup failure.
    #[error(transparent)]
    BadRev(#[from] crate::rev::RevParseError),
    #[error("no conversation named {name}")]
    NoSuchConversation { name: String },
    #[error("a conversation named {name} exists already")]
    ConversationExists { name: String },
    #[error("HEAD names no session yet: give a conversation, or start one with --new")]
    NoHead,
    /// `HEAD` names a session, not a conversation, so there is nothing to continue.
    #[error("HEAD is detached at {}, not on a conversation: give a conversation, or start one with --new", .id.to_hex_prefix(12))]
    HeadDetached { id: ObjectId },
}

fn show_target(t: &Option<String>) -> String {
    match t {
        Some(t) => t.clone(),
        None => "nothing".to_owned(),
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(id: ObjectId, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            id,
            reason: reason.into(),
        }
    }

    pub(crate) fn decode(id: ObjectId, e: DecodeError) -> Self {
        Error::corrupt(id, e.to_string())
    }

    /// Whether this error means stored data is damaged (as opposed to a bad
    /// request or an environment problem). The CLI exits differently for it.
    pub fn is_corruption(&self) -> bool {
        match self {
            Error::Corrupt { .. } | Error::CorruptFile { .. } => true,
            Error::UnreadableReachable { source, .. } => source.is_corruption(),
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches a path to an I/O result.
pub(crate) trait IoResultExt<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoResultExt<T> for std::io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
