//! Structural differences between JSON values, for `sessctl diff`: what
//! was added, removed or changed, at which JSON Pointer (RFC 6901) path.
//!
//! Objects are compared key by key; arrays position by position (an element
//! inserted in the middle shows as the elements after it changing, and the
//! last one added). Values compare as the store does: `1` and `1.0` differ.

use serde_json::{json, Value};

/// What happened at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp {
    /// Only the new value has it.
    Added,
    /// Only the old value has it.
    Removed,
    /// Both have it, with different values.
    Changed,
}

impl ChangeOp {
    pub const fn as_str(self) -> &'static str {
        match self {
            ChangeOp::Added => "added",
            ChangeOp::Removed => "removed",
            ChangeOp::Changed => "changed",
        }
    }
}

/// One difference. `old` is `None` for an addition, `new` for a removal.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// A JSON Pointer: `""` for the whole value, `/files/0`, `/a~1b` for
    /// the key `a/b`.
    pub path: String,
    pub op: ChangeOp,
    pub old: Option<Value>,
    pub new: Option<Value>,
}

impl Change {
    /// `{"path", "op", "old", "new"}`; `old` or `new` absent when there is
    /// none.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"path": self.path, "op": self.op.as_str()});
        if let Some(o) = &self.old {
            v["old"] = o.clone();
        }
        if let Some(n) = &self.new {
            v["new"] = n.clone();
        }
        v
    }
}

/// The changes that turn `old` into `new`, in document order (object keys
/// sorted). Empty when they are equal.
pub fn json_diff(old: &Value, new: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    diff_at(&mut String::new(), old, new, &mut out);
    out
}

fn diff_at(path: &mut String, old: &Value, new: &Value, out: &mut Vec<Change>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let len = path.len();
                push_token(path, k);
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff_at(path, x, y, out),
                    (Some(x), None) => out.push(removed(path, x)),
                    (None, Some(y)) => out.push(added(path, y)),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => diff_at(path, x, y, out),
                    (Some(x), None) => out.push(removed(path, x)),
                    (None, Some(y)) => out.push(added(path, y)),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        (a, b) if a != b => out.push(Change {
            path: path.clone(),
            op: ChangeOp::Changed,
            old: Some(a.clone()),
            new: Some(b.clone()),
        }),
        _ => {}
    }
}

fn added(path: &str, v: &Value) -> Change {
    Change {
        path: path.to_owned(),
        op: ChangeOp::Added,
        old: None,
        new: Some(v.clone()),
    }
}

fn removed(path: &str, v: &Value) -> Change {
    Change {
        path: path.to_owned(),
        op: ChangeOp::Removed,
        old: Some(v.clone()),
        new: None,
    }
}

/// Appends `/token`, escaped as RFC 6901 says (`~` as `~0`, `/` as `~1`).
fn push_token(path: &mut String, key: &str) {
    path.push('/');
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(old: Value, new: Value) -> Vec<Value> {
        json_diff(&old, &new).iter().map(Change::to_json).collect()
    }

    #[test]
    fn equal_values_have_no_changes() {
        let v = json!({"a": [1, {"b": null}], "c": "x"});
        assert!(json_diff(&v, &v.clone()).is_empty());
    }

    #[test]
    fn changes_are_reported_at_their_paths() {
        assert_eq!(
            ops(
                json!({"files": ["a.rs", "b.rs"], "cwd": "/src", "gone": 1}),
                json!({"files": ["a.rs", "c.rs", "d.rs"], "cwd": "/src", "new": {"k": true}})
            ),
            vec![
                json!({"path": "/files/1", "op": "changed", "old": "b.rs", "new": "c.rs"}),
                json!({"path": "/files/2", "op": "added", "new": "d.rs"}),
                json!({"path": "/gone", "op": "removed", "old": 1}),
                json!({"path": "/new", "op": "added", "new": {"k": true}}),
            ]
        );
    }

    #[test]
    fn a_change_of_type_is_one_change_and_numbers_keep_their_kind() {
        assert_eq!(
            ops(json!({"a": [1]}), json!({"a": {"0": 1}})),
            vec![json!({"path": "/a", "op": "changed", "old": [1], "new": {"0": 1}})]
        );
        assert_eq!(
            ops(json!(1), json!(1.0)),
            vec![json!({"path": "", "op": "changed", "old": 1, "new": 1.0})]
        );
        assert_eq!(
            ops(json!(null), json!({"a": 1})),
            vec![json!({"path": "", "op": "changed", "old": null, "new": {"a": 1}})]
        );
    }

    #[test]
    fn keys_are_escaped_as_json_pointers() {
        assert_eq!(
            ops(
                json!({"a/b": 1, "m~n": [true]}),
                json!({"a/b": 2, "m~n": []})
            ),
            vec![
                json!({"path": "/a~1b", "op": "changed", "old": 1, "new": 2}),
                json!({"path": "/m~0n/0", "op": "removed", "old": true}),
            ]
        );
    }

    #[test]
    fn a_removed_null_is_told_from_a_changed_one() {
        assert_eq!(
            ops(json!({"a": null}), json!({})),
            vec![json!({"path": "/a", "op": "removed", "old": null})]
        );
    }
}
