//! `sessctl._native`: the store as Python sees it.
//!
//! A thin layer over `sessctl-store`: arguments become the library's types
//! (JSON values through pythonize), every store call runs with the GIL
//! released, and the library's errors become the exceptions under
//! `sessctl.SessctlError`, sorted the way the CLI sorts its exit codes.
//! What the calls mean is the library's and the CLI's; `sessctl/_native.pyi`
//! documents each one for Python.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyMapping;
use serde_json::Value;
use sessctl_store::fsck::FsckOptions;
use sessctl_store::gc::{parse_prune, GcOptions};
use sessctl_store::graph::{self, Follow, TopoWalk};
use sessctl_store::import::{import_paths, Format, ImportOptions};
use sessctl_store::odb::OpenOptions;
use sessctl_store::refs::{validate_name, PreviousValue, RefEdit, RefName, RefTarget, ReflogEntry};
use sessctl_store::resume::{self, Seed};
use sessctl_store::{
    Cut, Durability, Error, Expect, ForkOptions, Messages, ObjectId, Put, PutConversation,
    RunSummary, SessionMetadata, Store as Inner, Transaction, Turn, Usage,
};

create_exception!(
    sessctl,
    SessctlError,
    PyException,
    "Every error the store raises; `exit_code` is the CLI's for it."
);
create_exception!(
    sessctl,
    RefOutOfDate,
    SessctlError,
    "A compare-and-swap lost: a ref was not at the expected value."
);
create_exception!(
    sessctl,
    NotFound,
    SessctlError,
    "No such conversation, ref, revision or object."
);
create_exception!(
    sessctl,
    Corrupt,
    SessctlError,
    "Stored bytes fail their hash or do not decode; names the object."
);
create_exception!(
    sessctl,
    StoreBusy,
    SessctlError,
    "Another process held the store's write lock for longer than `wait`."
);
create_exception!(
    sessctl,
    InvalidInput,
    SessctlError,
    "A bad name, revision, argument or message (nothing was written)."
);

/// The expected value meaning "whatever the ref holds".
const ANY: &str = "*";

/// The library's error as the exception Python code catches.
fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    if e.is_corruption() {
        return Corrupt::new_err(msg);
    }
    match e {
        Error::RefOutOfDate { .. } => RefOutOfDate::new_err(msg),
        Error::Locked { .. } | Error::Busy { .. } => StoreBusy::new_err(msg),
        Error::NotFound { .. }
        | Error::UnknownPrefix { .. }
        | Error::NoSuchConversation { .. }
        | Error::UnknownRevision { .. }
        | Error::NotAStore { .. }
        | Error::NoHead
        | Error::NoHeadYet { .. } => NotFound::new_err(msg),
        Error::BadId(_)
        | Error::BadName(_)
        | Error::BadRev(_)
        | Error::Invalid(_)
        | Error::AmbiguousPrefix { .. }
        | Error::WrongKind { .. }
        | Error::NotASession { .. }
        | Error::CutOutOfRange { .. }
        | Error::NotInHistory { .. }
        | Error::ForkTakesAddedMessages
        | Error::ConversationExists { .. }
        | Error::ConversationArchived { .. }
        | Error::AlreadyArchived { .. }
        | Error::NotArchived { .. }
        | Error::HeadDetached { .. }
        | Error::SymbolicRef { .. }
        | Error::BadPruneTime { .. }
        | Error::LimitExceeded { .. }
        | Error::NothingToCompact { .. } => InvalidInput::new_err(msg),
        _ => SessctlError::new_err(msg),
    }
}

fn invalid(msg: impl Into<String>) -> PyErr {
    InvalidInput::new_err(msg.into())
}

/// A Python value as JSON; anything JSON cannot hold is `InvalidInput`.
fn json_of(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    pythonize::depythonize::<Strict>(v)
        .map(|s| s.0)
        .map_err(|e| invalid(format!("{what} is not a JSON value: {e}")))
}

/// A JSON value read from Python that refuses what JSON cannot hold: NaN
/// and the infinities (which would silently become `null`), bytes, and
/// dict keys that are not `str`.
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value (dict with str keys, list, str, int, finite float, bool, None)")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a JSON number")))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<Value, E> {
        Err(E::custom(
            "bytes are not JSON (decode or base64 them first)",
        ))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

fn py_of<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| SessctlError::new_err(e.to_string()))
}

fn messages_of(v: &Bound<'_, PyAny>) -> PyResult<Vec<Value>> {
    match json_of("messages", v)? {
        Value::Array(a) => Ok(a),
        other => Err(invalid(format!(
            "messages must be a list of JSON values, not {}",
            kind(&other)
        ))),
    }
}

fn object_of(what: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<BTreeMap<String, Value>> {
    match v {
        None => Ok(BTreeMap::new()),
        Some(v) if v.is_none() => Ok(BTreeMap::new()),
        Some(v) => match json_of(what, v)? {
            Value::Object(m) => Ok(m.into_iter().collect()),
            other => Err(invalid(format!(
                "{what} must be a dict, not {}",
                kind(&other)
            ))),
        },
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "None",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a str",
        Value::Array(_) => "a list",
        Value::Object(_) => "a dict",
    }
}

/// An optional int argument that must fit `T` (a count, an index, a time):
/// anything else is `InvalidInput`, never a bare `OverflowError`.
fn int_of<'a, 'py, T: FromPyObject<'a, 'py>>(
    what: &str,
    v: Option<&'a Bound<'py, PyAny>>,
    ok: impl Fn(&T) -> bool,
    expected: &str,
) -> PyResult<Option<T>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => match v.extract::<T>() {
            Ok(n) if ok(&n) => Ok(Some(n)),
            _ => Err(invalid(format!("{what} must be {expected}, not {v}"))),
        },
    }
}

/// The items of a mapping argument (a dict or any `collections.abc.Mapping`).
fn items_of<'py>(
    what: &str,
    v: &Bound<'py, PyAny>,
) -> PyResult<Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    let m = v
        .cast::<PyMapping>()
        .map_err(|_| invalid(format!("{what} must be a mapping, not {}", v.get_type())))?;
    m.items()?
        .iter()
        .map(|kv| kv.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>())
        .collect()
}

fn id_of(text: &str) -> PyResult<ObjectId> {
    ObjectId::from_hex(text).map_err(|e| invalid(format!("'{text}' is not a session id: {e}")))
}

/// `"*"`, `None` or an id, as what a ref must hold.
fn expect_of(v: Option<&str>) -> PyResult<Expect> {
    match v {
        None => Ok(Expect::Missing),
        Some(ANY) => Ok(Expect::Any),
        Some(id) => Ok(Expect::Is(id_of(id)?)),
    }
}

/// `prompt_tokens`/`completion_tokens`/`total_tokens`/`requests`, or
/// Anthropic's `input_tokens`/`output_tokens`.
fn usage_of(v: Option<&Bound<'_, PyAny>>) -> PyResult<RunSummary> {
    let m = object_of("usage", v)?;
    let mut u = Usage::default();
    let mut total = None;
    for (k, v) in &m {
        let n = v
            .as_u64()
            .ok_or_else(|| invalid(format!("usage['{k}'] must be a non-negative int")))?;
        match k.as_str() {
            "prompt_tokens" | "input_tokens" => u.prompt_tokens = n,
            "completion_tokens" | "output_tokens" => u.completion_tokens = n,
            "total_tokens" => total = Some(n),
            "requests" => u.requests = n,
            other => {
                return Err(invalid(format!(
                    "usage has an unknown key '{other}' (expected prompt_tokens, \
                     completion_tokens, total_tokens, requests, input_tokens, output_tokens)"
                )))
            }
        }
    }
    u.total_tokens = total.unwrap_or(u.prompt_tokens + u.completion_tokens);
    if !m.is_empty() && u.requests == 0 && !m.contains_key("requests") {
        u.requests = 1;
    }
    Ok(RunSummary {
        usage: u,
        ..RunSummary::default()
    })
}

fn full_ref(text: &str) -> PyResult<RefName> {
    let name = if text.starts_with("refs/") || text == "HEAD" {
        RefName::parse(text)
    } else {
        RefName::conversation(text)
    };
    name.map_err(|e| to_py(e.into()))
}

/// The full names of the refs at each session, `HEAD` first (as `log`
/// decorates).
fn ref_names(store: &Inner) -> Result<HashMap<ObjectId, Vec<String>>, Error> {
    let refs = store.refs()?;
    let head = refs
        .iter()
        .find(|(n, _)| *n == RefName::Head)
        .map(|(_, t)| t.clone());
    let mut by_id: HashMap<ObjectId, Vec<String>> = HashMap::new();
    if let Some(RefTarget::Session(id)) = &head {
        by_id.entry(*id).or_default().push("HEAD".into());
    }
    for (name, target) in &refs {
        let RefTarget::Session(id) = target else {
            continue;
        };
        if *name == RefName::Head {
            continue;
        }
        let list = by_id.entry(*id).or_default();
        if head.as_ref() == Some(&RefTarget::Symbolic(name.clone())) {
            list.push("HEAD".into());
        }
        list.push(name.to_string());
    }
    for list in by_id.values_mut() {
        list.sort_by_key(|r| (r != "HEAD", r.clone()));
        list.dedup();
    }
    Ok(by_id)
}

/// A sessctl store. See `sessctl/_native.pyi`.
#[pyclass(module = "sessctl._native", frozen)]
struct Store {
    inner: Arc<Inner>,
    path: Option<PathBuf>,
    durability: Durability,
}

impl Store {
    /// Runs `f` on the store with the GIL released.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Inner, Durability) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        let inner = &self.inner;
        let d = self.durability;
        py.detach(|| f(inner, d)).map_err(to_py)
    }
}

#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (path, create = true, *, wait = 5.0, durable = true))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        create: bool,
        wait: f64,
        durable: bool,
    ) -> PyResult<Self> {
        if !(wait.is_finite() && wait >= 0.0) {
            return Err(invalid(format!(
                "wait must be a non-negative number of seconds, not {wait}"
            )));
        }
        let wait = Duration::try_from_secs_f64(wait)
            .map_err(|_| invalid(format!("wait={wait} seconds is out of range")))?;
        let opts = OpenOptions {
            wait: Some(wait),
            ..OpenOptions::default()
        };
        let p = path.clone();
        let inner = py
            .detach(move || -> Result<Inner, Error> {
                // Missing, empty, or being made a store by another process
                // right now (which then wins: `AlreadyExists`).
                if create && sessctl_store::odb::may_init(&p) {
                    match Inner::init(&p) {
                        Ok(_) => {}
                        // Another process created it first.
                        Err(Error::AlreadyExists { .. } | Error::NotEmpty { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Inner::open(&p, &opts)
            })
            .map_err(to_py)?;
        // No write waits for the packing or the index table its
        // predecessors made due (an adapter's appends are latency-bound).
        inner.set_background_upkeep(true);
        Ok(Store {
            inner: Arc::new(inner),
            path: Some(path),
            durability: if durable {
                Durability::Sync
            } else {
                Durability::NoSync
            },
        })
    }

    #[staticmethod]
    fn memory() -> PyResult<Self> {
        Ok(Store {
            inner: Arc::new(Inner::in_memory().map_err(to_py)?),
            path: None,
            durability: Durability::Sync,
        })
    }

    #[getter]
    fn path(&self) -> Option<String> {
        self.path.as_ref().map(|p| p.display().to_string())
    }

    fn __repr__(&self) -> String {
        match &self.path {
            Some(p) => format!("sessctl.Store({:?})", p.display().to_string()),
            None => "sessctl.Store.memory()".into(),
        }
    }

    // ---- conversations ----

    #[pyo3(signature = (conversation, messages, *, new = false, title = None, usage = None,
                        metadata = None, expected_head = None))]
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &self,
        py: Python<'_>,
        conversation: String,
        messages: &Bound<'_, PyAny>,
        new: bool,
        title: Option<String>,
        usage: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        expected_head: Option<String>,
    ) -> PyResult<String> {
        let turn = Turn {
            messages: Messages::Added(messages_of(messages)?),
            title,
            run: usage_of(usage)?,
            metadata: SessionMetadata {
                extra: object_of("metadata", metadata)?,
                ..SessionMetadata::default()
            },
            ..Turn::default()
        };
        let expected = expected_head.as_deref().map(id_of).transpose()?;
        if new && expected.is_some() {
            return Err(invalid(
                "expected_head names the head of an existing conversation; new=True starts one",
            ));
        }
        let id = self.run(py, move |s, d| {
            if new {
                s.create(Some(&conversation), turn, d).map(|(_, id)| id)
            } else {
                s.commit(&conversation, expected, turn, d)
            }
        })?;
        Ok(id.to_hex())
    }

    #[pyo3(signature = (rev, *, at_message = None, name = None))]
    fn fork(
        &self,
        py: Python<'_>,
        rev: String,
        at_message: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
    ) -> PyResult<(String, String)> {
        let at_message = int_of::<u64>("at_message", at_message, |_| true, "a non-negative int")?;
        let (name, id) = self.run(py, move |s, d| {
            let from = s.resolve_rev(&rev)?;
            s.fork(
                from,
                ForkOptions {
                    name,
                    cut: at_message.map(Cut::AtMessage),
                    turn: None,
                },
                d,
            )
        })?;
        Ok((name, id.to_hex()))
    }

    fn history<'py>(&self, py: Python<'py>, rev: String) -> PyResult<Bound<'py, PyAny>> {
        let msgs = self.run(py, move |s, _| {
            let id = s.resolve_rev(&rev)?;
            s.load_messages(&id)
        })?;
        py_of(py, &Value::Array(msgs))
    }

    #[pyo3(signature = (rev, start = None, end = None))]
    fn messages<'py>(
        &self,
        py: Python<'py>,
        rev: String,
        start: Option<&Bound<'py, PyAny>>,
        end: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let start = int_of::<i64>("start", start, |_| true, "an int")?.unwrap_or(0);
        let end = int_of::<i64>("end", end, |_| true, "an int or None")?;
        let msgs = self.run(py, move |s, _| {
            let id = s.resolve_rev(&rev)?;
            let len = s.odb().session(&id)?.messages.len() as i64;
            let at = |i: i64| (if i < 0 { len + i } else { i }).clamp(0, len) as u64;
            let ids = s
                .odb()
                .history_range(&id, at(start), at(end.unwrap_or(len)))?;
            s.odb().blobs(&ids)
        })?;
        py_of(py, &Value::Array(msgs))
    }

    fn message_count(&self, py: Python<'_>, rev: String) -> PyResult<u64> {
        self.run(py, move |s, _| {
            let id = s.resolve_rev(&rev)?;
            Ok(match s.session_info(&id)? {
                Some(i) => i.messages,
                None => s.odb().session(&id)?.messages.len(),
            })
        })
    }

    #[pyo3(signature = (rev = None, *, all = false, limit = None))]
    fn log(
        &self,
        py: Python<'_>,
        rev: Option<String>,
        all: bool,
        limit: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<LogIterator> {
        let limit = int_of::<usize>("limit", limit, |_| true, "a non-negative int or None")?;
        let (ids, refs) = self.run(py, move |s, _| {
            let mut starts = Vec::new();
            if let Some(r) = &rev {
                starts.push(s.resolve_rev(r)?);
            }
            if all {
                for (_, t) in s.refs()? {
                    if let RefTarget::Session(id) = t {
                        starts.push(id);
                    }
                }
                if let Ok(h) = s.resolve_rev("HEAD") {
                    starts.push(h);
                }
            } else if rev.is_none() {
                starts.push(s.resolve_rev("HEAD")?);
            }
            starts.sort();
            starts.dedup();
            // Only ids are held; each entry is read when asked for.
            let ids = TopoWalk::new(s, &starts, Follow::All)?
                .take(limit.unwrap_or(usize::MAX))
                .map(|n| n.map(|n| n.id))
                .collect::<Result<Vec<_>, Error>>()?;
            Ok((ids, ref_names(s)?))
        })?;
        Ok(LogIterator {
            store: Arc::clone(&self.inner),
            ids,
            refs,
            next: 0,
        })
    }

    #[pyo3(signature = (limit = None, archived = false))]
    fn conversations<'py>(
        &self,
        py: Python<'py>,
        limit: Option<&Bound<'py, PyAny>>,
        archived: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let limit = int_of::<usize>("limit", limit, |_| true, "a non-negative int or None")?;
        use sessctl_store::refs::ConversationStatus;
        let list = self.run(py, move |s, _| {
            s.conversations_where(limit, |c| {
                (c.record.status == ConversationStatus::Archived) == archived
            })
        })?;
        let v: Vec<Value> = list.iter().map(|c| c.to_json()).collect();
        py_of(py, &Value::Array(v))
    }

    fn conversation<'py>(
        &self,
        py: Python<'py>,
        name: String,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let c = self.run(py, move |s, _| s.conversation(&name))?;
        c.map(|c| py_of(py, &c.to_json())).transpose()
    }

    #[pyo3(signature = (rev, *, messages = false))]
    fn show<'py>(
        &self,
        py: Python<'py>,
        rev: String,
        messages: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let v = self.run(py, move |s, _| {
            let id = s.resolve_rev(&rev)?;
            let sess = s.odb().session(&id)?;
            let history = s.odb().history(&id)?;
            let from = if messages {
                0
            } else {
                (sess.messages.base as usize).min(history.len())
            };
            let values = s.odb().blobs(&history[from..])?;
            let name = s.index().conversation_name(&sess.conversation_id(id))?;
            let mut v = sess.to_json(id);
            v["conversation_name"] = serde_json::json!(name);
            v["refs"] = serde_json::json!(ref_names(s)?.remove(&id).unwrap_or_default());
            v["history_length"] = serde_json::json!(history.len());
            v["shown_messages"] = Value::Array(
                history[from..]
                    .iter()
                    .zip(values)
                    .enumerate()
                    .map(|(k, (m, value))| {
                        serde_json::json!({"index": from + k, "id": m.to_hex(), "value": value})
                    })
                    .collect(),
            );
            Ok(v)
        })?;
        py_of(py, &v)
    }

    fn archive(&self, py: Python<'_>, name: String) -> PyResult<String> {
        Ok(self.run(py, move |s, d| s.archive(&name, d))?.to_hex())
    }

    fn unarchive(&self, py: Python<'_>, name: String) -> PyResult<String> {
        Ok(self.run(py, move |s, d| s.unarchive(&name, d))?.to_hex())
    }

    fn delete(&self, py: Python<'_>, name: String) -> PyResult<String> {
        Ok(self.run(py, move |s, d| s.delete(&name, d))?.to_hex())
    }

    fn checkout<'py>(
        &self,
        py: Python<'py>,
        rev: String,
        directory: PathBuf,
    ) -> PyResult<Bound<'py, PyAny>> {
        let v = self.run(py, move |s, d| {
            // The seed is written first: if that fails, HEAD has not moved.
            let (_, target) = resume::checkout_target(s, &rev)?;
            let [state, display] = Seed::load(s, &target.session)?.write(&directory)?;
            let out = resume::checkout(s, &rev, d)?;
            Ok(serde_json::json!({
                "session": out.session.to_hex(),
                "conversation": out.conversation,
                "state": state.display().to_string(),
                "display_messages": display.display().to_string(),
            }))
        })?;
        py_of(py, &v)
    }

    fn resolve(&self, py: Python<'_>, rev: String) -> PyResult<String> {
        Ok(self.run(py, move |s, _| s.resolve_rev(&rev))?.to_hex())
    }

    fn merge_base(&self, py: Python<'_>, a: String, b: String) -> PyResult<Option<String>> {
        let base = self.run(py, move |s, _| {
            let (a, b) = (s.resolve_rev(&a)?, s.resolve_rev(&b)?);
            graph::merge_base(s, a, b)
        })?;
        Ok(base.map(|b| b.to_hex()))
    }

    fn is_ancestor(&self, py: Python<'_>, a: String, b: String) -> PyResult<bool> {
        self.run(py, move |s, _| {
            let (a, b) = (s.resolve_rev(&a)?, s.resolve_rev(&b)?);
            graph::is_ancestor(s, a, b)
        })
    }

    #[pyo3(signature = (name = None))]
    fn reflog<'py>(&self, py: Python<'py>, name: Option<String>) -> PyResult<Bound<'py, PyAny>> {
        let wanted = name.as_deref().map(full_ref).transpose()?;
        let entries = self.run(py, move |s, _| {
            let mut e: Vec<ReflogEntry> = s
                .live_reflog_entries()?
                .into_iter()
                .filter(|e| wanted.as_ref().is_none_or(|w| e.name == *w))
                .collect();
            e.reverse();
            Ok(e)
        })?;
        let v: Vec<Value> = entries.iter().map(ReflogEntry::to_json).collect();
        py_of(py, &Value::Array(v))
    }

    #[pyo3(signature = (dry_run = false, *, prune = None))]
    fn gc<'py>(
        &self,
        py: Python<'py>,
        dry_run: bool,
        prune: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut opts = GcOptions {
            dry_run,
            ..GcOptions::default()
        };
        if let Some(p) = &prune {
            opts.prune = parse_prune(p).map_err(to_py)?;
        }
        let r = self.run(py, move |s, _| s.gc(&opts))?;
        py_of(py, &r.to_json())
    }

    #[pyo3(signature = (*, full = false))]
    fn fsck<'py>(&self, py: Python<'py>, full: bool) -> PyResult<Bound<'py, PyAny>> {
        let r = self.run(py, move |s, _| {
            s.fsck(&FsckOptions { full }, &mut |_, _| {})
        })?;
        py_of(py, &r.to_json())
    }

    fn import_files<'py>(
        &self,
        py: Python<'py>,
        fmt: String,
        paths: Vec<PathBuf>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let format = Format::parse(&fmt).ok_or_else(|| {
            invalid(format!(
                "unknown format '{fmt}' (expected claude-code, codex, openai or swe-agent)"
            ))
        })?;
        let no_sync = self.durability == Durability::NoSync;
        let r = self.run(py, move |s, _| {
            import_paths(
                s,
                format,
                &paths,
                &ImportOptions {
                    no_sync,
                    ..ImportOptions::default()
                },
            )
        })?;
        py_of(py, &r.to_json())
    }

    // ---- building blocks for adapters ----

    #[pyo3(signature = (*, reason, parent = None, keep = None, messages = None, state = None,
                        title = None, metadata = None, created_at = None, conversation = None,
                        expected_head = Some(ANY.to_owned()), tags = None,
                        conversation_metadata = None))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        reason: String,
        parent: Option<String>,
        keep: Option<&Bound<'_, PyAny>>,
        messages: Option<&Bound<'_, PyAny>>,
        state: Option<&Bound<'_, PyAny>>,
        title: Option<String>,
        metadata: Option<&Bound<'_, PyAny>>,
        created_at: Option<&Bound<'_, PyAny>>,
        conversation: Option<String>,
        expected_head: Option<String>,
        tags: Option<&Bound<'_, PyAny>>,
        conversation_metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let keep = int_of::<u64>("keep", keep, |_| true, "a non-negative int or None")?;
        let created_at = int_of::<i64>(
            "created_at",
            created_at,
            |t| *t >= 0,
            "milliseconds since 1970 (a non-negative int)",
        )?;
        let messages = match messages {
            Some(m) if !m.is_none() => messages_of(m)?,
            _ => Vec::new(),
        };
        let context_state = match state {
            Some(v) if !v.is_none() => Some(json_of("state", v)?),
            _ => None,
        };
        let mut tag_edits = Vec::new();
        if let Some(t) = tags.filter(|t| !t.is_none()) {
            for (k, v) in items_of("tags", t)? {
                let name: String = k.extract().map_err(|_| invalid("tag names must be str"))?;
                let expected: Option<String> = v
                    .extract()
                    .map_err(|_| invalid("a tag's expected value is an id, None or \"*\""))?;
                tag_edits.push((name, expect_of(expected.as_deref())?));
            }
        }
        let conversation = match conversation {
            Some(name) => Some(PutConversation {
                name,
                expected: expect_of(expected_head.as_deref())?,
                metadata: object_of("conversation_metadata", conversation_metadata)?,
            }),
            None => None,
        };
        let put = Put {
            reason,
            parent: parent.as_deref().map(id_of).transpose()?,
            keep,
            turn: Turn {
                messages: Messages::Added(messages),
                context_state,
                title,
                metadata: SessionMetadata {
                    extra: object_of("metadata", metadata)?,
                    ..SessionMetadata::default()
                },
                created_at,
                ..Turn::default()
            },
            conversation,
            tags: tag_edits,
        };
        Ok(self.run(py, move |s, d| s.put(put, d))?.to_hex())
    }

    /// `put` of `messages` on top of `expected_head` (`None`: a new
    /// conversation) that also returns each message as JSON text, as the
    /// store now returns it.
    #[pyo3(signature = (conversation, messages, *, expected_head, reason = "commit".to_owned(),
                        conversation_metadata = None))]
    fn append(
        &self,
        py: Python<'_>,
        conversation: String,
        messages: &Bound<'_, PyAny>,
        expected_head: Option<String>,
        reason: String,
        conversation_metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(String, Vec<String>)> {
        let messages = messages_of(messages)?;
        let parent = expected_head.as_deref().map(id_of).transpose()?;
        let put = Put {
            reason,
            parent,
            keep: None,
            turn: Turn {
                messages: Messages::Added(messages),
                ..Turn::default()
            },
            conversation: Some(PutConversation {
                name: conversation,
                expected: parent.map_or(Expect::Missing, Expect::Is),
                metadata: object_of("conversation_metadata", conversation_metadata)?,
            }),
            tags: Vec::new(),
        };
        let (id, texts) = self.run(py, move |s, d| {
            // The values as the store keeps them: what reading the new
            // session back would give (objects-format.md, "The JSON
            // mapping": a value reads back as written, keys in bytewise
            // order, which a serde_json map keeps).
            let texts = match &put.turn.messages {
                Messages::Added(m) => m.iter().map(Value::to_string).collect(),
                Messages::History(_) => Vec::new(),
            };
            s.put(put, d).map(|id| (id, texts))
        })?;
        Ok((id.to_hex(), texts))
    }

    fn update_refs(
        &self,
        py: Python<'_>,
        reason: String,
        edits: Vec<(String, Option<String>, Option<String>)>,
    ) -> PyResult<()> {
        let mut out = Vec::new();
        for (name, expected, new) in &edits {
            let r = RefName::parse(name).map_err(|e| to_py(e.into()))?;
            match &r {
                RefName::Tag(_) | RefName::Conversation(_) => {}
                _ => {
                    return Err(invalid(format!(
                        "update_refs moves refs/tags/NAME and refs/heads/NAME, not {name}"
                    )))
                }
            }
            if let (RefName::Conversation(n), None) = (&r, new) {
                return Err(invalid(format!(
                    "a conversation's ref is not deleted alone: use delete('{n}')"
                )));
            }
            out.push(RefEdit {
                name: r,
                expected: match expect_of(expected.as_deref())? {
                    Expect::Any => PreviousValue::Any,
                    Expect::Missing => PreviousValue::MustNotExist,
                    Expect::Is(id) => PreviousValue::MustMatch(RefTarget::Session(id)),
                },
                new: new
                    .as_deref()
                    .map(id_of)
                    .transpose()?
                    .map(RefTarget::Session),
            });
        }
        self.run(py, move |s, d| {
            for e in &out {
                if let RefName::Conversation(n) = &e.name {
                    if s.conversation(n)?.is_none() {
                        return Err(Error::NoSuchConversation { name: n.clone() });
                    }
                }
                if let Some(RefTarget::Session(id)) = &e.new {
                    // A ref names only what the store holds.
                    s.odb().session(id)?;
                }
            }
            s.transact(
                Transaction {
                    reason,
                    edits: out,
                    ..Transaction::default()
                },
                d,
            )
            .map(|_| ())
        })
    }

    #[pyo3(signature = (prefix = String::new()))]
    fn refs(&self, py: Python<'_>, prefix: String) -> PyResult<Vec<(String, String)>> {
        let list = self.run(py, move |s, _| s.refs_with_prefix(&prefix))?;
        Ok(list
            .into_iter()
            .map(|(n, t)| {
                let target = match t {
                    RefTarget::Session(id) => id.to_hex(),
                    t => t.to_string(),
                };
                (n.to_string(), target)
            })
            .collect())
    }

    fn session<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyAny>> {
        let id = id_of(&id)?;
        let v = self.run(py, move |s, _| {
            let sess = s.odb().session(&id)?;
            let state = match sess.context_state {
                Some(b) => s.odb().blob(&b)?,
                None => Value::Null,
            };
            Ok(serde_json::json!({
                "id": id.to_hex(),
                "parents": sess.parents.iter().map(ObjectId::to_hex).collect::<Vec<_>>(),
                "conversation": sess.conversation_id(id).to_hex(),
                "created_at": sess.created_at,
                "title": sess.title,
                "status": sess.status.as_str(),
                "messages": sess.messages.len(),
                "added": sess.messages.added.len(),
                "metadata": Value::Object(sess.metadata.extra.into_iter().collect()),
                "state": state,
            }))
        })?;
        py_of(py, &v)
    }

    fn set_metadata(
        &self,
        py: Python<'_>,
        name: String,
        metadata: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        validate_name(&name).map_err(|e| to_py(e.into()))?;
        let mut changes = BTreeMap::new();
        for (k, v) in items_of("metadata", metadata)? {
            let k: String = k
                .extract()
                .map_err(|_| invalid("metadata keys must be str"))?;
            let v = if v.is_none() {
                None
            } else {
                Some(json_of("metadata", &v)?)
            };
            changes.insert(k, v);
        }
        self.run(py, move |s, d| {
            s.set_conversation_metadata(&name, changes, d)
        })
    }
}

/// `Store.log`'s iterator: the walk's ids, each entry read when asked for.
#[pyclass(module = "sessctl._native")]
struct LogIterator {
    store: Arc<Inner>,
    ids: Vec<ObjectId>,
    refs: HashMap<ObjectId, Vec<String>>,
    next: usize,
}

#[pymethods]
impl LogIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(id) = self.ids.get(self.next).copied() else {
            return Ok(None);
        };
        self.next += 1;
        let refs = self.refs.get(&id).cloned().unwrap_or_default();
        let store = &self.store;
        let v = py
            .detach(|| store.log_entry_json(&id, refs))
            .map_err(to_py)?;
        py_of(py, &v).map(Some)
    }

    fn __len__(&self) -> usize {
        self.ids.len() - self.next
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Store>()?;
    m.add_class::<LogIterator>()?;
    m.add("ANY", ANY)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FORMAT_VERSION", sessctl_store::STORE_FORMAT_VERSION)?;
    for (name, ty, code) in [
        ("SessctlError", py.get_type::<SessctlError>(), 1),
        ("RefOutOfDate", py.get_type::<RefOutOfDate>(), 1),
        ("NotFound", py.get_type::<NotFound>(), 1),
        ("Corrupt", py.get_type::<Corrupt>(), 3),
        ("StoreBusy", py.get_type::<StoreBusy>(), 4),
        ("InvalidInput", py.get_type::<InvalidInput>(), 2),
    ] {
        ty.setattr("exit_code", code)?;
        m.add(name, ty)?;
    }
    Ok(())
}
