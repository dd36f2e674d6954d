//! Values spelled as SQL literals, for the simple queries that carry a
//! write's reads ahead and its rows (objects-format.md, "Remote writes"):
//! a simple query has no parameters, and it is what lets several
//! statements (`BEGIN` ... `COMMIT`) travel in one round trip.
//!
//! Every value is spelled so that no byte of it can end the literal or
//! change what the statement does: bytes in hex (`decode('...','hex')`),
//! text in an escape string with its quotes and backslashes doubled
//! (whatever `standard_conforming_strings` says), numbers as digits. Each
//! literal carries its type, so a prepared statement's `EXECUTE` receives
//! exactly the types it declared, NULLs and empty arrays included.

use std::fmt::Write;

/// A value that can be spelled as a typed SQL literal.
pub(super) trait Literal {
    /// Appends the literal to `out`.
    fn write_to(&self, out: &mut String);

    /// About how many bytes the literal takes, to decide before spelling
    /// it whether a write goes as text at all.
    fn size_hint(&self) -> usize;
}

fn hex_into(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

fn bytea_into(out: &mut String, bytes: &[u8]) {
    out.push_str("decode('");
    hex_into(out, bytes);
    out.push_str("','hex')");
}

fn text_into(out: &mut String, text: &str) {
    out.push_str("E'");
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

impl Literal for i64 {
    fn write_to(&self, out: &mut String) {
        let _ = write!(out, "({self})::int8");
    }
    fn size_hint(&self) -> usize {
        28
    }
}

impl Literal for Option<i64> {
    fn write_to(&self, out: &mut String) {
        match self {
            Some(v) => v.write_to(out),
            None => out.push_str("NULL::int8"),
        }
    }
    fn size_hint(&self) -> usize {
        28
    }
}

impl Literal for Option<&str> {
    fn write_to(&self, out: &mut String) {
        match self {
            Some(t) => {
                text_into(out, t);
                out.push_str("::text");
            }
            None => out.push_str("NULL::text"),
        }
    }
    fn size_hint(&self) -> usize {
        16 + self.map_or(0, |t| t.len() * 2)
    }
}

impl Literal for Option<&[u8]> {
    fn write_to(&self, out: &mut String) {
        match self {
            Some(b) => bytea_into(out, b),
            None => out.push_str("NULL::bytea"),
        }
    }
    fn size_hint(&self) -> usize {
        24 + self.map_or(0, |b| b.len() * 2)
    }
}

impl Literal for Option<Vec<u8>> {
    fn write_to(&self, out: &mut String) {
        self.as_deref().write_to(out)
    }
    fn size_hint(&self) -> usize {
        self.as_deref().size_hint()
    }
}

/// An element of an array literal: how it is spelled, and the array's
/// type.
pub(super) trait Element {
    const ARRAY: &'static str;
    fn element_into(&self, out: &mut String);
    fn element_size(&self) -> usize;
}

impl Element for String {
    const ARRAY: &'static str = "text[]";
    fn element_into(&self, out: &mut String) {
        text_into(out, self)
    }
    fn element_size(&self) -> usize {
        4 + self.len() * 2
    }
}

impl Element for Vec<u8> {
    const ARRAY: &'static str = "bytea[]";
    fn element_into(&self, out: &mut String) {
        bytea_into(out, self)
    }
    fn element_size(&self) -> usize {
        self.as_slice().element_size()
    }
}

impl Element for &[u8] {
    const ARRAY: &'static str = "bytea[]";
    fn element_into(&self, out: &mut String) {
        bytea_into(out, self)
    }
    fn element_size(&self) -> usize {
        16 + self.len() * 2
    }
}

impl Element for i16 {
    const ARRAY: &'static str = "int2[]";
    fn element_into(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
    fn element_size(&self) -> usize {
        7
    }
}

impl Element for i64 {
    const ARRAY: &'static str = "int8[]";
    fn element_into(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
    fn element_size(&self) -> usize {
        21
    }
}

impl<E: Element> Literal for Vec<E> {
    fn write_to(&self, out: &mut String) {
        out.push_str("ARRAY[");
        for (i, e) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            e.element_into(out);
        }
        out.push_str("]::");
        out.push_str(E::ARRAY);
    }
    fn size_hint(&self) -> usize {
        16 + self.iter().map(|e| e.element_size() + 1).sum::<usize>()
    }
}

/// `bytes` as an SQL `bytea[]` literal.
pub(super) fn bytea_array<'b>(bytes: impl Iterator<Item = &'b [u8]>) -> String {
    let mut out = String::new();
    bytes.collect::<Vec<&[u8]>>().write_to(&mut out);
    out
}

/// The bytes that `hex` (as `encode(..., 'hex')` writes it) spells, or
/// `None`.
pub(super) fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{bytea_array, hex_bytes, Literal};

    fn lit(v: &dyn Literal) -> String {
        let mut out = String::new();
        v.write_to(&mut out);
        assert!(
            out.len() <= v.size_hint().max(16),
            "{out}: over its size hint"
        );
        out
    }

    #[test]
    fn a_bytea_literal_spells_every_byte_in_hex() {
        let all: Vec<u8> = (0..=255).collect();
        let lit = bytea_array([b"".as_slice(), b"'\\".as_slice(), &all].into_iter());
        assert!(lit.starts_with("ARRAY[decode('','hex'),decode('275c','hex'),decode('0001"));
        assert!(lit.ends_with("feff','hex')]::bytea[]"));
        assert_eq!(bytea_array(std::iter::empty()), "ARRAY[]::bytea[]");
        assert_eq!(hex_bytes("00ff7f"), Some(vec![0, 255, 127]));
        assert_eq!(hex_bytes(""), Some(vec![]));
        assert_eq!(hex_bytes("0"), None);
        assert_eq!(hex_bytes("zz"), None);
        assert_eq!(hex_bytes("é0"), None);
    }

    #[test]
    fn text_cannot_end_its_literal() {
        let names = vec![
            "refs/heads/it's".to_string(),
            "a\\'); DROP TABLE x; --".to_string(),
            "é\u{1F600}".to_string(),
        ];
        assert_eq!(
            lit(&names),
            "ARRAY[E'refs/heads/it''s',E'a\\\\''); DROP TABLE x; --',E'é\u{1F600}']::text[]"
        );
        assert_eq!(lit(&Some("o'k")), "E'o''k'::text");
        assert_eq!(lit(&None::<&str>), "NULL::text");
    }

    #[test]
    fn numbers_and_nulls_carry_their_types() {
        assert_eq!(lit(&-5i64), "(-5)::int8");
        assert_eq!(lit(&None::<i64>), "NULL::int8");
        assert_eq!(lit(&vec![1i16, -2]), "ARRAY[1,-2]::int2[]");
        assert_eq!(lit(&Vec::<i64>::new()), "ARRAY[]::int8[]");
        assert_eq!(
            lit(&vec![i64::MIN, 0]),
            format!("ARRAY[{},0]::int8[]", i64::MIN)
        );
        let ids = vec![vec![0xabu8; 32], vec![0u8; 32], vec![]];
        assert!(lit(&ids).starts_with("ARRAY[decode('abab"));
        assert_eq!(lit(&Some(vec![0u8, 255])), "decode('00ff','hex')");
        assert_eq!(lit(&None::<Vec<u8>>), "NULL::bytea");
    }
}
