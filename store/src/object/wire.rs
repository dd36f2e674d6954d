//! Readers shared by the wire encodings of sessions and operations: maps
//! with a fixed, canonical key list, and raw 32-byte ids.

use super::cbor::Decoder;
use super::CborError;
use crate::hash::ObjectId;

/// Reads a map whose keys must be a subsequence of `allowed` (which is in
/// canonical order), calling `field` for each; canonical order of the
/// allowed list makes "strictly increasing" and "no duplicates" one check.
pub(crate) fn map<'a>(
    d: &mut Decoder<'a>,
    what: &str,
    allowed: &[&'static str],
    mut field: impl FnMut(&mut Decoder<'a>, &'static str) -> Result<(), CborError>,
) -> Result<(), CborError> {
    let n = d.map()?;
    let mut next = 0usize;
    for _ in 0..n {
        let key = d.text()?;
        let Some(pos) = allowed.iter().position(|k| *k == key) else {
            return Err(d.error(format!("unknown {what} field {key:?}")));
        };
        if pos < next {
            return Err(d.error(format!(
                "{what} field {key:?} is repeated or out of canonical order"
            )));
        }
        next = pos + 1;
        field(d, allowed[pos])?;
    }
    Ok(())
}

pub(crate) fn id(d: &mut Decoder<'_>) -> Result<ObjectId, CborError> {
    let b = d.bytes()?;
    ObjectId::from_slice(b)
        .ok_or_else(|| d.error(format!("an object id is 32 bytes, not {}", b.len())))
}

pub(crate) fn id_list(d: &mut Decoder<'_>) -> Result<Vec<ObjectId>, CborError> {
    let n = d.array()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(id(d)?);
    }
    Ok(out)
}
