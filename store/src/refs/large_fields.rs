//! Large fields of a conversation record's metadata, kept as blobs.
//!
//! A record travels whole in every operation that sets it, in the index and
//! in every listing (`ls --json`); a source's system prompt (Codex
//! `session_meta.base_instructions`, ~20 KB) would be copied into each. So an
//! importer replaces each metadata value bigger than [`LARGE_FIELD_BYTES`]
//! (a top-level value, or one inside a top-level object) with a reference
//! `{"sessctl_blob": "<64 hex>", "bytes": N}` to a blob holding it
//! (objects-format.md, "Conversation records"). gc keeps the blobs the
//! records name, and transfers send them with the records.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::hash::ObjectId;

/// A metadata value whose compact JSON is longer than this is kept as a
/// blob (objects-format.md, "Conversation records").
pub const LARGE_FIELD_BYTES: usize = 4096;

/// The key of a blob reference.
pub const BLOB_REF_KEY: &str = "sessctl_blob";

/// The blob a value refers to, when it is a blob reference.
pub fn blob_ref(v: &Value) -> Option<ObjectId> {
    let o = v.as_object()?;
    if o.len() != 2 || !o.get("bytes").is_some_and(Value::is_u64) {
        return None;
    }
    ObjectId::from_hex(o.get(BLOB_REF_KEY)?.as_str()?).ok()
}

fn reference(id: ObjectId, bytes: usize) -> Value {
    json!({ BLOB_REF_KEY: id.to_hex(), "bytes": bytes })
}

/// Replaces the large values of `metadata` (see the module's documentation)
/// with references; returns the values taken out with their ids, for the
/// caller to store as blobs. `id_of` names a value's blob, `None` when the
/// value cannot be a blob (it is then left in place).
pub fn externalize(
    metadata: &mut BTreeMap<String, Value>,
    id_of: &mut dyn FnMut(&Value) -> Option<ObjectId>,
) -> Vec<(ObjectId, Value)> {
    let mut out = Vec::new();
    for v in metadata.values_mut() {
        take_large(v, 1, id_of, &mut out);
    }
    out
}

fn take_large(
    v: &mut Value,
    depth: usize,
    id_of: &mut dyn FnMut(&Value) -> Option<ObjectId>,
    out: &mut Vec<(ObjectId, Value)>,
) {
    let len = v.to_string().len();
    if len <= LARGE_FIELD_BYTES || blob_ref(v).is_some() {
        return;
    }
    if let (Value::Object(o), 1) = (&mut *v, depth) {
        // An object of small fields stays; its large ones go.
        let o: &mut Map<String, Value> = o;
        for child in o.values_mut() {
            take_large(child, depth + 1, id_of, out);
        }
        return;
    }
    if let Some(id) = id_of(v) {
        let taken = std::mem::replace(v, reference(id, len));
        out.push((id, taken));
    }
}

/// The blobs `metadata` refers to (top-level values and values inside
/// top-level objects, as [`externalize`] writes them).
pub fn metadata_blobs(metadata: &BTreeMap<String, Value>) -> Vec<ObjectId> {
    let mut out = Vec::new();
    for v in metadata.values() {
        if let Some(id) = blob_ref(v) {
            out.push(id);
        } else if let Value::Object(o) = v {
            out.extend(o.values().filter_map(blob_ref));
        }
    }
    out
}

/// Puts back the values [`externalize`] took out, those `load` finds
/// (a reference to a blob it does not find stays).
pub fn inline(
    metadata: &mut BTreeMap<String, Value>,
    load: &mut dyn FnMut(&ObjectId) -> Option<Value>,
) {
    let mut put = |v: &mut Value| {
        if let Some(value) = blob_ref(v).and_then(|id| load(&id)) {
            *v = value;
        }
    };
    for v in metadata.values_mut() {
        if blob_ref(v).is_some() {
            put(v);
        } else if let Value::Object(o) = v {
            o.values_mut().for_each(&mut put);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_values_become_references_and_are_found_again() {
        let big = "x".repeat(LARGE_FIELD_BYTES + 1);
        let mut m = BTreeMap::new();
        m.insert("small".to_owned(), json!("a"));
        m.insert("prompt".to_owned(), json!(big));
        m.insert(
            "meta".to_owned(),
            json!({"id": "s1", "base_instructions": big, "tools": [big]}),
        );
        let mut n = 0u8;
        let taken = externalize(&mut m, &mut |_| {
            n += 1;
            Some(ObjectId::from_bytes([n; 32]))
        });
        assert_eq!(taken.len(), 3);
        assert_eq!(m["small"], json!("a"));
        assert_eq!(m["meta"]["id"], json!("s1"));
        assert!(m.values().all(|v| v.to_string().len() < 400), "{m:?}");
        let mut found = metadata_blobs(&m);
        found.sort();
        let mut ids: Vec<ObjectId> = taken.iter().map(|t| t.0).collect();
        ids.sort();
        assert_eq!(found, ids);
        let mut back = m.clone();
        inline(&mut back, &mut |id| {
            taken.iter().find(|t| t.0 == *id).map(|t| t.1.clone())
        });
        assert_eq!(back["prompt"], json!(big));
        assert_eq!(back["meta"]["tools"], json!([big]));
        // Again: nothing more to take.
        assert!(externalize(&mut m, &mut |_| None).is_empty());
        // Not a reference: extra keys, a bad id.
        assert_eq!(blob_ref(&json!({"sessctl_blob": "zz", "bytes": 1})), None);
        assert_eq!(
            blob_ref(
                &json!({"sessctl_blob": ObjectId::from_bytes([1; 32]).to_hex(), "bytes": 1, "x": 1})
            ),
            None
        );
    }
}
