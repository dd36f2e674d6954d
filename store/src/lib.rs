//! sessctl-store: content-addressed, log-structured storage for AI-agent
//! sessions.
//!
//! Sessions are immutable objects named by the blake3 hash of their
//! canonical bytes; each names its parents, so sessions form a DAG the way
//! git commits do. A session stores its messages as a delta on its first
//! parent's, so a long conversation or a fork costs only its new turns.
//! Objects are appended to a journal (one `fdatasync` per write batch,
//! shared between concurrent writers) and repacked into zstd-compressed,
//! memory-mapped packs. Every read re-hashes what it returns.
//!
//! The exact bytes are specified in `objects-format.md` at the repository's
//! root.
//!
//! ```
//! use sessctl_store::{Durability, MessageDelta, Odb, Session, WriteBatch};
//! use serde_json::json;
//!
//! let odb = Odb::in_memory(); // or Odb::init(path) / Odb::open(path, &opts)
//! let mut batch = WriteBatch::new();
//! let hello = batch.blob(&json!({"role": "user", "content": "hello"}))?;
//! let mut root = Session::new_root(1_763_000_000_000);
//! root.messages.added.push(hello);
//! let root_id = batch.session(&root)?;
//! odb.write(&batch, Durability::Sync)?;
//!
//! // Continue: keep the parent's messages, add the reply.
//! let mut batch = WriteBatch::new();
//! let reply = batch.blob(&json!({"role": "assistant", "content": "hi!"}))?;
//! let mut next = Session::new_root(1_763_000_001_000);
//! next.parents = vec![root_id];
//! next.conversation = Some(root_id);
//! next.messages = MessageDelta { base: 1, added: vec![reply] };
//! let next_id = batch.session(&next)?;
//! odb.write(&batch, Durability::Sync)?;
//!
//! let history = odb.load_messages(&next_id)?;
//! assert_eq!(history[1]["content"], "hi!");
//! # Ok::<(), sessctl_store::Error>(())
//! ```

//! A runtime embeds the [`Store`]: conversations, runs and forks, with every
//! write journaled and every ref move compare-and-swapped (this is the
//! README's example, compiled):
//!
//! ```
//! use sessctl_store::{Cut, Durability, ForkOptions, Messages, Store, Turn};
//! use serde_json::json;
//!
//! let store = Store::in_memory()?; // or Store::open(path, &OpenOptions::default())
//! let turn = |m: serde_json::Value| Turn { messages: Messages::Added(vec![m]), ..Turn::default() };
//! let (name, _root) = store.create(Some("fix"), turn(json!({"role": "user", "content": "hi"})), Durability::Sync)?;
//! let run = store.begin_run(&name)?;
//! let reply = store.commit_run(&run, turn(json!({"role": "assistant", "content": "hello"})), false, Durability::Sync)?;
//! let (retry, _) = store.fork(
//!     reply,
//!     ForkOptions {
//!         name: Some("retry".into()),
//!         cut: Some(Cut::AtMessage(1)),
//!         turn: Some(turn(json!({"role": "user", "content": "again"}))),
//!     },
//!     Durability::Sync,
//! )?;
//! let history = store.odb().load_messages(&store.resolve_rev(&retry)?)?;
//! assert_eq!(history[1]["content"], "again");
//! assert_eq!(store.conversations(Some(20))?.len(), 2);
//! # Ok::<(), sessctl_store::Error>(())
//! ```
//!
//! # Where each verb lives
//!
//! Every piece has one room; a room imports only from the rooms listed
//! before it (`.ci/module-cycles.py` keeps the module graph free of
//! cycles).
//!
//! | verb | room |
//! |---|---|
//! | ids, prefixes; times | [`hash`], [`time`] |
//! | what a message's JSON says (roles, text, tool calls) | [`message`] |
//! | blobs and sessions, their canonical bytes, what a session names | [`object`] |
//! | ref names, compare-and-swap expectations, operations, the ref log | [`refs`] |
//! | errors: [`Error`] and the subsystems' own | [`error`] |
//! | journal, packs, reading and verifying objects, `Durability` | [`odb`] |
//! | what sessions reach (gc's marking, what transfers send) | [`reach`] |
//! | the lineage-index file (commit-graph) | [`lineage_index`] |
//! | the derived index (refs, conversations, session summaries, run claims) | [`index`] |
//! | `log`, ancestors, count, merge-base, is-ancestor, `graph` | [`graph`] (walks over the [`graph::Lineage`] trait) |
//! | open, catch up with other processes, repack, reindex | [`store`] (`store/mod.rs`) |
//! | transactions | `store/transaction.rs` ([`Store::transact`]) |
//! | create, commit, merge, fork, archive, unarchive, delete | `store/conversation.rs`, sessions built by `store/builder.rs` |
//! | begin, commit and fail a run | `store/run.rs` |
//! | work after a commit | `store/hook.rs` ([`store::AfterCommit`]) |
//! | revisions (`fix~2^2`), what a name means | [`rev`] |
//! | compaction, auto-compaction | [`compact`] (implements [`store::AfterCommit`]) |
//! | gc | [`gc`] |
//! | fsck, the ref-log chain audit | [`fsck`] |
//! | checkout, resume | [`resume`] |
//! | replay and cassettes | [`replay`] |
//! | diff | [`diff`] |
//! | grep, the filters of `log` and `ls`, usage reports (`stats`) | [`search`] |
//! | import, export | [`import`], [`export`] |
//! | bundles; clone, push, pull | [`bundle`]; [`remote`] |

#![deny(unsafe_code)]

pub mod bundle;
pub mod compact;
pub mod diff;
pub mod error;
pub mod export;
pub mod fsck;
#[doc(hidden)]
pub mod fuzzing;
pub mod gc;
pub mod graph;
pub mod hash;
pub mod import;
pub mod index;
pub mod lineage_index;
pub mod message;
pub mod object;
#[allow(unsafe_code)] // memmap2, in odb::pack only
pub mod odb;
pub mod progress;
pub mod purge;
pub mod reach;
pub mod refs;
pub mod remote;
pub mod replay;
pub mod resume;
pub mod rev;
pub mod search;
pub mod store;
pub mod time;
pub mod url;

pub use error::{Error, Result};
pub use hash::{ObjectId, Prefix};
pub use object::{
    object_id, Blob, Compaction, EncodedObject, MessageDelta, Object, ObjectKind, RunSummary,
    Session, SessionMetadata, SessionStatus, SessionType, Usage, OBJECT_FORMAT_VERSION,
};
pub use odb::{
    Durability, MemoryBackend, MessageBytes, ObjectBackend, Odb, OdbStats, OpenOptions, RawMessage,
    RepackOptions, RepackStats, WriteBatch, STORE_FORMAT_VERSION,
};
pub use refs::{RefName, RefTarget};
pub use store::{
    Committed, Cut, Expect, ForkOptions, Messages, Put, PutConversation, Run, Store, Transaction,
    Turn,
};
