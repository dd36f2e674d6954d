//! Shared by the integration tests: a seeded generator of realistic agent
//! messages (OpenAI chat style, with tool calls), and store helpers.
#![allow(dead_code)]

use serde_json::{json, Value};
use sessctl_store::{Durability, MessageDelta, ObjectId, Odb, Session, WriteBatch};

/// xorshift64*: deterministic and dependency-free.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "the",
    "test",
    "fails",
    "because",
    "parser",
    "returns",
    "an",
    "error",
    "when",
    "input",
    "is",
    "empty",
    "let",
    "me",
    "check",
    "file",
    "src/lib.rs",
    "function",
    "fixed",
    "run",
    "cargo",
    "build",
    "assert",
    "value",
    "expected",
    "found",
    "line",
    "module",
    "import",
    "config",
    "should",
    "handle",
    "case",
    "now",
    "passes",
    "update",
    "struct",
    "field",
];

fn text(rng: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 16);
    while s.len() < bytes {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    s
}

/// Message `i` of a conversation: user, assistant with a tool call, tool
/// result, assistant answer, repeating; 0.3-4 KB, about 1.7 KB on average.
pub fn message(rng: &mut Rng, i: usize) -> Value {
    let size = 300 + rng.below(2800) as usize;
    match i % 4 {
        0 => json!({"role": "user", "content": text(rng, size)}),
        1 => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": format!("call_{i}_{}", rng.next() % 100_000),
                "type": "function",
                "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/m{}.rs\"}}", rng.below(50))},
            }],
        }),
        2 => {
            json!({"role": "tool", "tool_call_id": format!("call_{}", i - 1), "content": text(rng, size)})
        }
        _ => json!({"role": "assistant", "content": text(rng, size / 2)}),
    }
}

/// Writes a conversation of `turns` sessions, each adding `per_turn`
/// messages; returns the session ids, root first.
pub fn write_chain(
    odb: &Odb,
    seed: u64,
    turns: usize,
    per_turn: usize,
    durability: Durability,
) -> Vec<ObjectId> {
    let mut rng = Rng::new(seed);
    let mut ids = Vec::with_capacity(turns);
    let mut len = 0u64;
    let mut conversation = None;
    for t in 0..turns {
        let mut b = WriteBatch::new();
        let mut s = Session::new_root(1_763_000_000_000 + t as i64 * 1000);
        let added: Vec<ObjectId> = (0..per_turn)
            .map(|k| b.blob(&message(&mut rng, t * per_turn + k)).unwrap())
            .collect();
        if let Some(&parent) = ids.last() {
            s.parents = vec![parent];
            s.conversation = conversation;
        }
        s.messages = MessageDelta { base: len, added };
        s.run.usage.total_tokens = 100 + t as u64;
        len = s.messages.len();
        let id = b.session(&s).unwrap();
        odb.write(&b, durability).unwrap();
        if conversation.is_none() {
            conversation = Some(id);
        }
        ids.push(id);
    }
    ids
}

/// The object examples of objects-format.md: a message, the root session
/// naming it, a reply, and the continuation naming both.
pub struct Examples {
    pub hello: sessctl_store::EncodedObject,
    pub root: sessctl_store::EncodedObject,
    pub reply: sessctl_store::EncodedObject,
    pub cont: sessctl_store::EncodedObject,
}

pub fn examples() -> Examples {
    let hello = sessctl_store::Blob::from_json_str(r#"{"role": "user", "content": "Hello"}"#)
        .unwrap()
        .encode();
    let mut s = Session::new_root(1_763_000_000_000);
    s.title = Some("Greeting".into());
    s.messages.added = vec![hello.id()];
    s.display_messages.added = vec![hello.id()];
    s.metadata.transport = Some("cli".into());
    let root = s.encode().unwrap();
    let reply = sessctl_store::Blob::from_json_str(r#"{"role": "assistant", "content": "Hi!"}"#)
        .unwrap()
        .encode();
    let mut c = Session::new_root(1_763_000_001_500);
    c.parents = vec![root.id()];
    c.conversation = Some(root.id());
    c.messages = MessageDelta {
        base: 1,
        added: vec![reply.id()],
    };
    c.display_messages = c.messages.clone();
    c.run.duration_ms = 1500;
    c.run.usage = sessctl_store::Usage {
        total_tokens: 42,
        prompt_tokens: 30,
        completion_tokens: 12,
        requests: 1,
    };
    let cont = c.encode().unwrap();
    Examples {
        hello,
        root,
        reply,
        cont,
    }
}

/// The bundle of objects-format.md's example: the four example objects,
/// `refs/heads/greeting` at the continuation, and the record of
/// "Operations" (updated at 1763000001500).
pub fn example_bundle() -> sessctl_store::bundle::Bundle {
    use sessctl_store::refs::{ConversationRecord, ConversationStatus};
    let Examples {
        hello,
        root,
        reply,
        cont,
    } = examples();
    let record = ConversationRecord {
        conversation_id: Some(root.id()),
        title: Some("Greeting".into()),
        default_preset_id: None,
        metadata: Default::default(),
        status: ConversationStatus::Active,
        created_at: 1_763_000_000_000,
        updated_at: 1_763_000_001_500,
    };
    sessctl_store::bundle::Bundle::new(
        vec![(
            sessctl_store::RefName::conversation("greeting").unwrap(),
            cont.id(),
        )],
        vec![("greeting".into(), record)],
        vec![],
        vec![hello, root, reply, cont],
    )
}

/// The operation of objects-format.md's example: the first of a store, by
/// `alice`, creating conversation `greeting` at the example's root.
pub fn example_operation() -> sessctl_store::refs::Operation {
    use sessctl_store::refs::{
        ConversationRecord, ConversationStatus, ConversationUpdate, Operation, RefTarget, RefUpdate,
    };
    use sessctl_store::RefName;
    let root = examples().root.id();
    let greeting = RefName::conversation("greeting").unwrap();
    Operation {
        seq: 1,
        prev: None,
        time: 1_763_000_000_000,
        actor: "alice".into(),
        reason: "create".into(),
        refs: vec![
            RefUpdate {
                name: greeting.clone(),
                old: None,
                new: Some(RefTarget::Session(root)),
                prev: None,
            },
            RefUpdate {
                name: RefName::Head,
                old: None,
                new: Some(RefTarget::Symbolic(greeting)),
                prev: None,
            },
        ],
        conversations: vec![ConversationUpdate {
            name: "greeting".into(),
            record: Some(ConversationRecord {
                conversation_id: Some(root),
                title: Some("Greeting".into()),
                default_preset_id: None,
                metadata: Default::default(),
                status: ConversationStatus::Active,
                created_at: 1_763_000_000_000,
                updated_at: 1_763_000_000_000,
            }),
        }],
        runs: vec![],
        expire: vec![],
    }
}

/// objects-format.md, the text the golden tests compare with.
pub fn spec() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    std::fs::read_to_string(root.join("objects-format.md")).unwrap()
}

/// The hex dump format the spec uses (`hexdump -C` style).
pub fn dump(b: &[u8]) -> String {
    let mut out = String::new();
    for (i, c) in b.chunks(16).enumerate() {
        let hex: Vec<String> = c.iter().map(|x| format!("{x:02x}")).collect();
        let asc: String = c
            .iter()
            .map(|&x| {
                if (0x20..0x7f).contains(&x) {
                    x as char
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!(
            "{:08x}  {:<48} |{}|\n",
            i * 16,
            hex.join(" "),
            asc
        ));
    }
    out
}

/// Tags each session `t<k>` (the given number and id), in one transaction
/// that names them all, so that walks and gc see them as roots.
pub fn tag(store: &sessctl_store::Store, tags: impl IntoIterator<Item = (usize, ObjectId)>) {
    use sessctl_store::refs::{PreviousValue, RefEdit};
    use sessctl_store::{RefName, RefTarget, Transaction};
    let edits = tags
        .into_iter()
        .map(|(k, id)| RefEdit {
            name: RefName::tag(&format!("t{k}")).unwrap(),
            expected: PreviousValue::MustNotExist,
            new: Some(RefTarget::Session(id)),
        })
        .collect();
    store
        .transact(
            Transaction {
                reason: "test".into(),
                edits,
                ..Transaction::default()
            },
            Durability::NoSync,
        )
        .unwrap();
}

/// `hexdump -C` with its `*` for repeated lines, and the final offset.
pub fn dump_squeezed(b: &[u8]) -> String {
    let full = dump(b);
    let mut out = String::new();
    let mut prev: Option<&str> = None;
    let mut starred = false;
    for line in full.lines() {
        let body = &line[10..];
        if prev == Some(body) {
            if !starred {
                out.push_str("*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        prev = Some(body);
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!("{:08x}\n", b.len()));
    out
}

/// The real agent files of `../shared/data` (beside the project's root).
pub const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data");

/// The data folder or file `sub`, or `None` (with a note on stderr) when it
/// is absent: a test that reads the real files skips, saying why.
pub fn data(sub: &str) -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(DATA).join(sub);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("note: {} is absent; skipping", p.display());
        None
    }
}

/// Copies the directory `from` (a store, say) to `to`, recursively.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The starts of the frames in a journal segment file's bytes, up to the
/// zeros written ahead (objects-format.md, "Frames").
pub fn frame_starts(bytes: &[u8]) -> Vec<usize> {
    use sessctl_store::odb::journal::{FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};
    let mut starts = Vec::new();
    let mut pos = SEGMENT_HEADER_LEN as usize;
    while pos + FRAME_HEADER_LEN <= bytes.len()
        && bytes[pos..pos + FRAME_HEADER_LEN].iter().any(|b| *b != 0)
    {
        starts.push(pos);
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        pos += FRAME_HEADER_LEN + len;
    }
    starts
}
