//! The library's errors. Every I/O error names its path, every object error
//! names its object.
//!
//! [`Error`] is what every public call returns. Each subsystem's own
//! failures are an enum of their own, kept here (below every module, so
//! that none imports upward) and wrapped by [`Error`]: [`IndexError`] (the
//! derived index), [`OdbError`] (limits of the object database),
//! [`RevParseError`] (revision syntax), and, beside their types,
//! `object::DecodeError`/`EncodeError`, `refs::NameError` and
//! `hash::IdParseError`. Messages speak the library's language: none names
//! a command-line flag or tells the reader to run a command; the CLI adds
//! that where it is the way out.

use std::path::PathBuf;

use crate::hash::{IdParseError, ObjectId, Prefix};
use crate::object::{DecodeError, EncodeError, ObjectKind};
use crate::refs::{NameError, PreviousValue, RefName, RefTarget};

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
    /// A table of a remote store holds rows no write leaves (a row the
    /// schema keeps is gone, a value is out of its range).
    #[error("{table} is damaged: {reason}")]
    CorruptTable { table: String, reason: String },
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
    /// The derived index failed (not the data it derives from).
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The object database refused a write or a read it cannot do.
    #[error(transparent)]
    Odb(#[from] OdbError),
    #[error("{0}")]
    Encode(#[from] EncodeError),
    #[error("{path} is not a sessctl store{}", if *.exists { " (it exists but has no FORMAT file)" } else { "" })]
    NotAStore { path: PathBuf, exists: bool },
    #[error("{path} exists and is not an empty directory")]
    NotEmpty { path: PathBuf },
    /// A `FORMAT` file that does not say `sessctl store format N`.
    #[error("{path} is damaged: it should say 'sessctl store format N', it says {found:?}")]
    BadFormatFile { path: PathBuf, found: String },
    #[error("{path} already holds a sessctl store")]
    AlreadyExists { path: PathBuf },
    #[error("{path} has store format {found}; this sessctl reads format {supported} and older")]
    UnsupportedFormat {
        path: PathBuf,
        found: String,
        supported: u32,
    },
    #[error("store {path} is in use by {}: it held the store's write lock for longer than this write waits (give it longer with OpenOptions::wait)", match .pid { Some(p) => format!("pid {p}"), None => "another process".to_owned() })]
    Locked { path: PathBuf, pid: Option<u32> },
    #[error("the store is open read-only")]
    ReadOnly,
    /// A remote store's server (PostgreSQL or the S3 bucket) failed or
    /// could not be reached: `what` names it (never with a password),
    /// `reason` says what it answered.
    #[error("{what}: {reason}")]
    Remote { what: String, reason: String },
    /// A durable write failed; nothing written after it can be trusted to be
    /// on disk, so the store refuses further writes until it is reopened.
    #[error("the store stopped accepting writes after a failed sync: {0}")]
    Poisoned(String),
    /// A request that names something the store holds, in a way that
    /// cannot be satisfied (a revision step past the root, a transfer onto
    /// itself, a bundle whose prerequisites are missing).
    #[error("{0}")]
    Invalid(String),
    /// A ref did not hold what a transaction expected (a lost compare-and-swap).
    #[error("{name} moved: expected {}, found {}", show_target(.expected), show_target(.actual))]
    RefOutOfDate {
        name: RefName,
        /// What the edit expected, as the ref log prints a target (`None`:
        /// nothing).
        expected: Option<String>,
        /// What the ref held (`None`: nothing).
        actual: Option<String>,
    },
    /// A conversation's record did not hold what a transaction expected
    /// (a lost compare-and-swap on the record: another process changed its
    /// title, metadata or conversation id meanwhile).
    #[error("the record of conversation {name} changed meanwhile")]
    RecordOutOfDate { name: String },
    /// gc swept, but the index rebuild that follows failed: `index/REBUILD`
    /// stays, and the next gc (or `reindex`) rebuilds it.
    #[error(
        "pruned {pruned} objects; index rebuild pending (the next gc or reindex does it): {source}"
    )]
    IndexRebuildPending { pruned: usize, source: Box<Error> },
    /// Only `HEAD` may be symbolic, and never pointing at itself.
    #[error("only HEAD may point at another ref, and not at itself ({name} -> {target})")]
    SymbolicRef { name: RefName, target: RefName },
    /// A new session names an object that is neither in the store nor in
    /// its transaction.
    #[error("session {session} names {named}, which the store does not have")]
    MissingObject { session: ObjectId, named: ObjectId },
    /// A conversation record names a large-field blob that is neither in the
    /// store nor in its transaction (gc pruned it since the writer looked).
    #[error("the record of conversation {conversation} names blob {named}, which the store does not have")]
    MissingRecordBlob {
        conversation: String,
        named: ObjectId,
    },
    /// An operation of the journal or op log does not decode.
    #[error("operation {seq} does not decode: {reason}")]
    CorruptOperation { seq: u64, reason: String },
    #[error("run {run} on {conversation} is not open (it ended, or the store was reopened)")]
    RunNotOpen { conversation: String, run: u64 },
    /// Another run holds the conversation.
    #[error("conversation {conversation} is busy: run {run} of pid {pid} is in progress")]
    Busy {
        conversation: String,
        run: u64,
        pid: u32,
    },
    #[error(transparent)]
    BadName(#[from] NameError),
    /// A malformed revision (`fix~x`): a usage error, not a lookup failure.
    #[error(transparent)]
    BadRev(#[from] RevParseError),
    /// A file handed to import is not in the format it was asked to read,
    /// or in none that import reads.
    #[error("{}: {}", path.display(), match expected {
        Some(f) => format!("not a {f} file: it looks like {found}"),
        None => format!("not a format sessctl imports: it looks like {found}"),
    })]
    ImportFormat {
        path: PathBuf,
        /// The format asked for (`None`: detection found none).
        expected: Option<String>,
        /// What the file looks like.
        found: String,
    },
    #[error("no conversation named {name}")]
    NoSuchConversation { name: String },
    #[error("conversation {name} has no head")]
    NoHeadYet { name: String },
    #[error("conversation {name} is archived; unarchive it to continue it")]
    ConversationArchived { name: String },
    #[error("conversation {name} is archived already")]
    AlreadyArchived { name: String },
    #[error("conversation {name} is active already")]
    NotArchived { name: String },
    #[error("unknown revision '{rev}': not a conversation, ref, tag or object id")]
    UnknownRevision { rev: String },
    #[error("{rev} names {id}, a {kind}, not a session")]
    NotASession {
        rev: String,
        id: ObjectId,
        kind: ObjectKind,
    },
    #[error("cannot cut at message {at}: session {session} has {messages} messages")]
    CutOutOfRange {
        at: u64,
        session: ObjectId,
        messages: u64,
    },
    #[error("message {message} is not in the history of session {session}")]
    NotInHistory {
        message: ObjectId,
        session: ObjectId,
    },
    #[error("a fork takes the messages it adds, not a full history")]
    ForkTakesAddedMessages,
    #[error("nothing to compact in {conversation}: its {messages} messages are all kept (keep-last {keep_last})")]
    NothingToCompact {
        conversation: String,
        messages: u64,
        keep_last: usize,
    },
    /// The summarizer failed or answered something that is not a summary;
    /// the conversation is as it was.
    #[error("cannot compact {conversation}: {reason}")]
    SummarizerFailed {
        conversation: String,
        reason: String,
    },
    #[error("a conversation named {name} exists already")]
    ConversationExists { name: String },
    /// A prune time that is none of: now, a date, an RFC 3339 time, or
    /// N.days.ago (also minutes, hours, weeks).
    #[error("not a prune time: '{text}'")]
    BadPruneTime { text: String },
    /// A time bound that is neither a date, a time nor a relative time
    /// (`search::parse_time`).
    #[error("not a time: '{text}'")]
    BadTime { text: String },
    /// A search pattern that is not a valid regular expression.
    #[error("invalid regular expression '{pattern}': {reason}")]
    BadPattern { pattern: String, reason: String },
    /// A size the format or a walk cannot hold.
    #[error("{what}")]
    LimitExceeded { what: &'static str },
    #[error("HEAD names no session yet")]
    NoHead,
    /// `HEAD` names a session, not a conversation, so there is nothing to continue.
    #[error("HEAD is detached at {}, not on a conversation", .id.to_hex_prefix(12))]
    HeadDetached { id: ObjectId },
    #[error("tag {name} exists already")]
    TagExists { name: String },
    #[error("no tag named {name}")]
    NoSuchTag { name: String },
    /// `NAME@{n}` past the oldest entry of the ref's log.
    #[error("{rev}: the ref log of {name} has only {entries} entries (@{{0}} to @{{{}}})", .entries.saturating_sub(1))]
    ReflogTooShort {
        rev: String,
        name: RefName,
        entries: usize,
    },
    /// `NAME@{n}` where the ref did not exist at that point of its log.
    #[error("{rev}: {name} did not exist then (it was deleted)")]
    RefGoneThen { rev: String, name: RefName },
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

    /// A lost compare-and-swap on `name`: it holds `actual`, and `expected`
    /// did not accept that.
    pub(crate) fn ref_out_of_date(
        name: &RefName,
        expected: &PreviousValue,
        actual: Option<&RefTarget>,
    ) -> Self {
        Error::RefOutOfDate {
            name: name.clone(),
            expected: expected.describe(),
            actual: actual.map(|t| t.to_string()),
        }
    }

    pub(crate) fn decode(id: ObjectId, e: DecodeError) -> Self {
        Error::corrupt(id, e.to_string())
    }

    /// Whether a remote store's server failed here (PostgreSQL or the
    /// bucket unreachable, refusing the credentials, or answering an
    /// error): such an error says nothing of the stored data, so a check or
    /// a walk that meets it stops with it, never reporting what it could not
    /// read as missing or damaged.
    pub fn is_server_failure(&self) -> bool {
        matches!(self, Error::Remote { .. })
    }

    /// Session `id`, reached by a walk, did not read because of `e`: a
    /// server's failure is itself (it is no fault of the session, and
    /// fsck would not find one), anything else is
    /// [`Error::UnreadableReachable`].
    pub(crate) fn unreadable_reachable(id: ObjectId, e: Error) -> Self {
        if e.is_server_failure() {
            return e;
        }
        Error::UnreadableReachable {
            id,
            source: Box::new(e),
        }
    }

    /// Whether this error means stored data is damaged (as opposed to a bad
    /// request or an environment problem). The CLI exits differently for it.
    pub fn is_corruption(&self) -> bool {
        match self {
            Error::Corrupt { .. }
            | Error::CorruptFile { .. }
            | Error::CorruptTable { .. }
            | Error::CorruptOperation { .. }
            | Error::BadFormatFile { .. } => true,
            Error::UnreadableReachable { source, .. } => source.is_corruption(),
            _ => false,
        }
    }
}

/// Why a revision is malformed (a usage error, not a lookup failure).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevParseError {
    #[error("a revision cannot be empty")]
    Empty,
    #[error("'{rev}' is not a revision: '{op}' needs a name or id before it")]
    NoName { rev: String, op: char },
    #[error(
        "'{rev}' is not a revision: after '{op}' expected a number, '~' or '^', found '{found}'"
    )]
    BadStep { rev: String, op: char, found: char },
    #[error("'{rev}' is not a revision: '@{{' takes a number and '}}' (NAME@{{N}})")]
    BadReflog { rev: String },
    #[error("'{rev}' is not a revision: {number} is too large a step")]
    TooLarge { rev: String, number: String },
    #[error("'{rev}' is not a revision: {reason}")]
    BadName { rev: String, reason: NameError },
}

/// The derived index's own failures. The index is rebuildable from the
/// objects and operations, so none of these loses data.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The key-value store under the index failed.
    #[error("index: {0}")]
    Backend(String),
    /// A conversation's record in the index does not decode.
    #[error("index: unreadable record of conversation {name}")]
    UnreadableRecord { name: String },
    /// An operation entry sits under another sequence number.
    #[error("operation entry {seq} holds operation {found}")]
    MisplacedOperation { seq: u64, found: u64 },
    /// A store's backend keeps the index keys, and they do not describe
    /// its operations yet (a store upgraded from an older schema, whose
    /// first writable open or `sessctl reindex` builds them).
    #[error("index: the store's index keys are not built yet (open it writable once, or run sessctl reindex)")]
    KeptNotBuilt,
}

/// What the object database will not do.
#[derive(Debug, thiserror::Error)]
pub enum OdbError {
    #[error("object {id} is {size} bytes; the limit is {limit} bytes")]
    ObjectTooLarge { id: ObjectId, size: u64, limit: u64 },
    #[error("a write batch of {size} bytes is larger than the {limit}-byte limit; split it")]
    BatchTooLarge { size: u64, limit: u64 },
    #[error("cannot retire the active journal segment")]
    ActiveSegment,
    /// The compressor could not be set up or failed.
    #[error("zstd: {0}")]
    Compression(String),
    /// A thread reading part of a long history panicked.
    #[error("a thread reading messages panicked")]
    ReaderPanicked,
    /// A backend's batch read handed back fewer objects than it was asked
    /// for, without an error (a bug in the backend, never a store's state).
    #[error("a batch read handed back {read} of the {asked} objects asked for")]
    IncompleteRead { asked: usize, read: usize },
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
