//! Blobs: one JSON value, stored as deterministic CBOR
//! (objects-format.md, "blob").

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::{cbor, DecodeError, EncodeError, EncodedObject, ObjectKind};

/// One JSON value: a message, a context state or an environment state.
///
/// Object keys are kept in canonical order, so two JSON texts that differ only
/// in whitespace or key order are the same blob.
#[derive(Debug, Clone, PartialEq)]
pub struct Blob {
    value: Value,
}

impl Blob {
    /// Wraps a JSON value. A `serde_json::Value` cannot hold NaN or
    /// duplicate keys; one built in code can nest deeper than the 256 levels
    /// a blob may have, which is refused here rather than when written.
    pub fn new(value: Value) -> Result<Self, EncodeError> {
        cbor::encode_json(&value)?;
        Ok(Blob { value })
    }

    /// Parses JSON text, refusing duplicate object keys (which would make
    /// the text mean two different things to two readers).
    pub fn from_json_str(text: &str) -> Result<Self, EncodeError> {
        Self::from_json_slice(text.as_bytes())
    }

    /// Parses JSON bytes (UTF-8), refusing duplicate object keys and nesting
    /// deeper than a blob may hold (256).
    pub fn from_json_slice(bytes: &[u8]) -> Result<Self, EncodeError> {
        parse_json_strict(bytes).map(|value| Blob { value })
    }

    pub fn value(&self) -> &Value {
        &self.value
    }

    pub fn into_value(self) -> Value {
        self.value
    }

    /// Canonical bytes and id.
    pub fn encode(&self) -> EncodedObject {
        let payload = cbor::encode_json(&self.value)
            .expect("checked when the blob was made: no NaN, depth within the limit");
        EncodedObject::new(ObjectKind::Blob, payload)
    }

    /// Strictly decodes a canonical payload.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        Ok(Blob {
            value: cbor::decode_json(payload)?,
        })
    }
}

/// Canonical CBOR of a JSON value; refuses values nested deeper than 256.
pub(crate) fn encode_value(value: &Value) -> Result<Vec<u8>, EncodeError> {
    Ok(cbor::encode_json(value)?)
}

/// Parses JSON text into a value, refusing duplicate keys.
pub(crate) fn parse_json_strict(bytes: &[u8]) -> Result<Value, EncodeError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // serde_json's own limit (128) is below the format's (256); ours is
    // checked by the visitor, so JSON out of any blob can come back in.
    de.disable_recursion_limit();
    let value = StrictValue { depth: 0 }
        .deserialize(&mut de)
        .map_err(|e| EncodeError::Json(e.to_string()))?;
    de.end().map_err(|e| EncodeError::Json(e.to_string()))?;
    Ok(value)
}

/// A `serde_json::Value` visitor that errors on a repeated object key and
/// on nesting deeper than a blob may hold.
struct StrictValue {
    depth: usize,
}

impl StrictValue {
    fn nested<E: de::Error>(&self) -> Result<StrictValue, E> {
        if self.depth >= cbor::MAX_DEPTH {
            return Err(E::custom(format_args!(
                "nesting deeper than {}",
                cbor::MAX_DEPTH
            )));
        }
        Ok(StrictValue {
            depth: self.depth + 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("NaN and infinity are not JSON numbers"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(StrictValue { depth: inner.depth })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate object key {key:?}"
                )));
            }
            let v = map.next_value_seed(StrictValue { depth: inner.depth })?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_and_key_order_do_not_change_the_id() {
        let a = Blob::from_json_str(r#"{"role":"user","content":"hi","n":[1,2.5,null]}"#).unwrap();
        let b = Blob::from_json_str(
            "{ \"n\" : [ 1 , 2.5 , null ] ,\n \"content\":\"hi\", \"role\" : \"user\" }",
        )
        .unwrap();
        assert_eq!(a.encode().id(), b.encode().id());
        assert_eq!(a.encode().payload(), b.encode().payload());
    }

    #[test]
    fn integers_and_floats_stay_apart() {
        let i = Blob::from_json_str("1").unwrap().encode();
        let f = Blob::from_json_str("1.0").unwrap().encode();
        assert_ne!(i.id(), f.id());
        let back = Blob::decode(f.payload()).unwrap();
        assert_eq!(serde_json::to_string(back.value()).unwrap(), "1.0");
        let back = Blob::decode(i.payload()).unwrap();
        assert_eq!(serde_json::to_string(back.value()).unwrap(), "1");
    }

    #[test]
    fn values_too_deep_for_a_blob_are_refused_not_a_panic() {
        let mut v = Value::Null;
        for _ in 0..300 {
            v = Value::Array(vec![v]);
        }
        let err = Blob::new(v.clone()).unwrap_err();
        assert!(err.to_string().contains("nesting deeper than 256"), "{err}");
        // Text follows the same limit: 256 levels in, 257 refused.
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let ok = Blob::from_json_str(&deep(256)).unwrap();
        let json = serde_json::to_string(ok.value()).unwrap();
        assert_eq!(Blob::from_json_str(&json).unwrap().encode(), ok.encode());
        let err = Blob::from_json_str(&deep(257)).unwrap_err();
        assert!(err.to_string().contains("nesting deeper than 256"), "{err}");
    }

    #[test]
    fn duplicate_keys_and_bad_json_are_refused() {
        let err = Blob::from_json_str(r#"{"a":1,"b":{"c":1,"c":2}}"#).unwrap_err();
        assert!(
            err.to_string().contains("duplicate object key \"c\""),
            "{err}"
        );
        assert!(Blob::from_json_str("NaN").is_err());
        assert!(Blob::from_json_str("1e400").is_err());
        assert!(Blob::from_json_str("{} {}").is_err());
        assert!(Blob::from_json_str("").is_err());
    }
}
