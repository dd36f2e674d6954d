//! Raw objects: a message exactly as its source wrote it, the bytes of its
//! line (or lines) kept verbatim (objects-format.md, "raw").
//!
//! A raw object is read two ways: as the exact bytes, for export (a session
//! file written back byte for byte), and as the JSON value they parse to,
//! wherever a message value is needed (replay, show, grep, stats, the
//! index's previews). The value is computed here, in one place, so that the
//! import that wrote the object and every reader agree on it.

use serde_json::{json, Value};

use super::{blob, DecodeError, EncodeError, EncodedObject, ObjectKind};

/// One message as its source wrote it: one line of a JSON-lines file, or
/// the several lines one message was written over (Claude Code writes each
/// content part of one API response on a line of its own).
///
/// Lines are kept without their terminating `\n` (a `\r` before it is part
/// of the line) and joined by `\n` in the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raw {
    payload: Vec<u8>,
}

impl Raw {
    /// The raw object of `lines`, checked as a reader checks it: each line
    /// holds no `\n` and parses strictly (no duplicate key, nesting within a
    /// blob's limit), and, for several lines, each is a JSON object.
    pub fn from_lines<S: AsRef<str>>(lines: &[S]) -> Result<Raw, EncodeError> {
        if lines.is_empty() {
            return Err(EncodeError::Json(
                "a raw object holds at least one line".into(),
            ));
        }
        let mut payload = Vec::with_capacity(lines.iter().map(|l| l.as_ref().len() + 1).sum());
        for (i, l) in lines.iter().enumerate() {
            if l.as_ref().contains('\n') {
                return Err(EncodeError::Json(format!("line {} holds a newline", i + 1)));
            }
            if i > 0 {
                payload.push(b'\n');
            }
            payload.extend_from_slice(l.as_ref().as_bytes());
        }
        let raw = Raw { payload };
        raw.value().map_err(|e| EncodeError::Json(e.to_string()))?;
        Ok(raw)
    }

    /// [`Raw::from_lines`] for lines the caller has parsed strictly already
    /// (an import): they are not parsed again, except in debug builds.
    pub(crate) fn from_parsed_lines<S: AsRef<str>>(lines: &[S]) -> Raw {
        let mut payload = Vec::with_capacity(lines.iter().map(|l| l.as_ref().len() + 1).sum());
        for (i, l) in lines.iter().enumerate() {
            if i > 0 {
                payload.push(b'\n');
            }
            payload.extend_from_slice(l.as_ref().as_bytes());
        }
        let raw = Raw { payload };
        debug_assert!(raw.value().is_ok(), "parsed lines make a raw object");
        raw
    }

    /// Strictly decodes a payload: what [`Raw::from_lines`] accepts.
    pub fn decode(payload: &[u8]) -> Result<Raw, DecodeError> {
        let raw = Raw {
            payload: payload.to_vec(),
        };
        raw.value()?;
        Ok(raw)
    }

    /// The exact bytes: the lines joined by `\n`.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The lines, each as the source wrote it, without its `\n`.
    pub fn lines(&self) -> impl Iterator<Item = &str> + '_ {
        // Checked UTF-8 when made or decoded.
        std::str::from_utf8(&self.payload)
            .unwrap_or_default()
            .split('\n')
    }

    /// The JSON value the lines read as (see [`value_of_lines`]).
    pub fn value(&self) -> Result<Value, DecodeError> {
        let text = std::str::from_utf8(&self.payload)
            .map_err(|e| DecodeError::Raw(format!("not UTF-8: {e}")))?;
        let lines: Vec<&str> = text.split('\n').collect();
        value_of_lines(&lines)
    }

    pub fn into_value(self) -> Result<Value, DecodeError> {
        self.value()
    }

    /// The object: its exact bytes and id.
    pub fn encode(&self) -> EncodedObject {
        EncodedObject::new(ObjectKind::Raw, self.payload.clone())
    }
}

/// The value of a raw object's lines (objects-format.md, "raw"): one line
/// reads as the JSON value it parses to; several lines, as the first line's
/// value whose `message.content` (when `message` is an object) is the
/// concatenation, in order, of every line's content parts, a string content
/// counting as one `text` part. Each line must parse strictly (as a blob's
/// JSON text); of several, each must be an object.
pub fn value_of_lines(lines: &[&str]) -> Result<Value, DecodeError> {
    let parse = |i: usize, l: &str| {
        blob::parse_json_strict(l.as_bytes()).map_err(|e| {
            DecodeError::Raw(if lines.len() == 1 {
                e.to_string()
            } else {
                format!("line {}: {e}", i + 1)
            })
        })
    };
    match lines {
        [] => Err(DecodeError::Raw("no line".into())),
        [one] => parse(0, one),
        many => {
            let mut values = Vec::with_capacity(many.len());
            for (i, l) in many.iter().enumerate() {
                let v = parse(i, l)?;
                if !v.is_object() {
                    return Err(DecodeError::Raw(format!(
                        "line {} of {} is not a JSON object",
                        i + 1,
                        many.len()
                    )));
                }
                values.push(v);
            }
            Ok(merge_lines(values))
        }
    }
}

/// Several lines of one message as one value: the first line's, with
/// `message.content` the concatenation of every line's content parts (see
/// [`value_of_lines`]). The Claude Code importer merges with it too, so the
/// value it computes and the one a raw object reads as are the same.
pub fn merge_lines(mut values: Vec<Value>) -> Value {
    if values.len() < 2 {
        return values.pop().unwrap_or(Value::Null);
    }
    let parts: Vec<Value> = values.iter().flat_map(content_parts).collect();
    let mut first = values.swap_remove(0);
    if let Some(m) = first.get_mut("message").and_then(Value::as_object_mut) {
        m.insert("content".into(), Value::Array(parts));
    }
    first
}

/// A line's content parts: `message.content` as a list (a string is one
/// `text` part; anything else, none).
pub fn content_parts(line: &Value) -> Vec<Value> {
    match line.get("message").and_then(|m| m.get("content")) {
        Some(Value::Array(a)) => a.clone(),
        Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_reads_as_its_value_and_keeps_its_bytes() {
        let line = r#"{"z":1, "a" :[1.0,2]}"#;
        let raw = Raw::from_lines(&[line]).unwrap();
        assert_eq!(raw.payload(), line.as_bytes());
        assert_eq!(raw.value().unwrap(), json!({"a": [1.0, 2], "z": 1}));
        assert_eq!(raw.lines().collect::<Vec<_>>(), vec![line]);
        // Another spelling of the same value is another object.
        let other = Raw::from_lines(&[r#"{"a":[1.0,2],"z":1}"#]).unwrap();
        assert_ne!(raw.encode().id(), other.encode().id());
        assert_eq!(raw.value().unwrap(), other.value().unwrap());
        // And never the blob of that value.
        let blob = super::super::Blob::new(raw.value().unwrap())
            .unwrap()
            .encode();
        assert_ne!(blob.id(), raw.encode().id());
    }

    #[test]
    fn several_lines_read_as_one_message() {
        let a = r#"{"uuid":"1","message":{"id":"m","content":[{"type":"thinking"}]}}"#;
        let b = r#"{"uuid":"2","message":{"id":"m","content":"hi"}}"#;
        let raw = Raw::from_lines(&[a, b]).unwrap();
        assert_eq!(raw.payload(), format!("{a}\n{b}").as_bytes());
        assert_eq!(
            raw.value().unwrap(),
            json!({"uuid": "1", "message": {"id": "m", "content": [
                {"type": "thinking"}, {"type": "text", "text": "hi"}]}})
        );
        assert_eq!(raw.lines().collect::<Vec<_>>(), vec![a, b]);
    }

    #[test]
    fn a_line_that_does_not_parse_strictly_is_refused() {
        assert!(Raw::from_lines(&[r#"{"a":1,"a":2}"#]).is_err());
        assert!(Raw::from_lines(&["{"]).is_err());
        assert!(Raw::from_lines::<&str>(&[]).is_err());
        assert!(Raw::from_lines(&["{}", "[]"]).is_err());
        let err = Raw::decode(b"{}\n{\"a\":1,\"a\":1}").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert!(Raw::decode(b"{}\n").is_err(), "an empty line");
        assert!(Raw::decode(b"\xff").is_err());
        // A \r before a newline is part of the line, and JSON whitespace.
        let raw = Raw::decode(b"{\"a\":1}\r").unwrap();
        assert_eq!(raw.value().unwrap(), json!({"a": 1}));
    }
}
