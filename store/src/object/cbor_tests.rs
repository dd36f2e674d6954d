// Over 600 lines on purpose: the codec's unit tests (RFC 8949 vectors, proptest round trips), kept out of cbor.rs.
use super::*;
use proptest::prelude::*;
use serde_json::json;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(s.len().is_multiple_of(2), "odd hex {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex is valid"))
        .collect()
}

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Equality that also tells floats from integers and -0.0 from 0.0, which
/// `Value == Value` does not.
fn strict_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if x.is_f64() || y.is_f64() {
                x.is_f64()
                    && y.is_f64()
                    && x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits)
            } else {
                x == y
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| strict_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, va)| y.get(k).is_some_and(|vb| strict_eq(va, vb)))
        }
        _ => a == b,
    }
}

fn reason_of(bytes: &[u8]) -> String {
    match decode_json(bytes) {
        Ok(v) => panic!("{} decoded to {v} but should be rejected", to_hex(bytes)),
        Err(e) => e.reason.to_string(),
    }
}

fn assert_rejected(hexstr: &str, reason: &str) {
    let bytes = hex(hexstr);
    assert_eq!(reason_of(&bytes), reason, "input {hexstr}");
}

fn f(v: f64) -> Value {
    Value::Number(Number::from_f64(v).expect("finite test float"))
}

fn rfc_vectors() -> Vec<(Value, &'static str)> {
    vec![
        (json!(0), "00"),
        (json!(1), "01"),
        (json!(10), "0a"),
        (json!(23), "17"),
        (json!(24), "1818"),
        (json!(25), "1819"),
        (json!(100), "1864"),
        (json!(1000), "1903e8"),
        (json!(1000000), "1a000f4240"),
        (json!(1000000000000u64), "1b000000e8d4a51000"),
        (json!(18446744073709551615u64), "1bffffffffffffffff"),
        (json!(-1), "20"),
        (json!(-10), "29"),
        (json!(-100), "3863"),
        (json!(-1000), "3903e7"),
        (f(0.0), "f90000"),
        (f(-0.0), "f98000"),
        (f(1.0), "f93c00"),
        (f(1.1), "fb3ff199999999999a"),
        (f(1.5), "f93e00"),
        (f(65504.0), "f97bff"),
        (f(100000.0), "fa47c35000"),
        (f(3.4028234663852886e+38), "fa7f7fffff"),
        (f(1.0e+300), "fb7e37e43c8800759c"),
        (f(5.960464477539063e-8), "f90001"),
        (f(0.00006103515625), "f90400"),
        (f(-4.0), "f9c400"),
        (f(-4.1), "fbc010666666666666"),
        (json!(false), "f4"),
        (json!(true), "f5"),
        (json!(null), "f6"),
        (json!(""), "60"),
        (json!("a"), "6161"),
        (json!("IETF"), "6449455446"),
        (json!("\"\\"), "62225c"),
        (json!("\u{00fc}"), "62c3bc"),
        (json!("\u{6c34}"), "63e6b0b4"),
        (json!("\u{10151}"), "64f0908591"),
        (json!([]), "80"),
        (json!([1, 2, 3]), "83010203"),
        (json!([1, [2, 3], [4, 5]]), "8301820203820405"),
        (
            Value::Array((1..=25).map(Value::from).collect()),
            "98190102030405060708090a0b0c0d0e0f101112131415161718181819",
        ),
        (json!({}), "a0"),
        (json!({"a": 1, "b": [2, 3]}), "a26161016162820203"),
        (json!(["a", {"b": "c"}]), "826161a161626163"),
        (
            json!({"a": "A", "b": "B", "c": "C", "d": "D", "e": "E"}),
            "a56161614161626142616361436164614461656145",
        ),
    ]
}

#[test]
fn rfc8949_appendix_a_vectors_both_ways() {
    for (value, expected) in rfc_vectors() {
        let bytes = encode_json(&value).expect("vector encodes");
        assert_eq!(to_hex(&bytes), expected, "encoding {value}");
        let back = decode_json(&hex(expected)).expect("vector decodes");
        assert!(
            strict_eq(&back, &value),
            "decoding {expected}: {back} != {value}"
        );
    }
}

#[test]
fn rfc_float_vectors_are_floats_not_integers() {
    // 1.0 and 0.0 must come back as JSON floats, or re-encoding would differ.
    let v = decode_json(&hex("f93c00")).expect("valid");
    assert!(v.as_number().is_some_and(Number::is_f64));
    assert_eq!(v.as_f64(), Some(1.0));
    let z = decode_json(&hex("f98000")).expect("valid");
    assert_eq!(z.as_f64().map(f64::to_bits), Some((-0.0f64).to_bits()));
}

#[test]
fn object_keys_are_in_canonical_order() {
    let v = json!({"b": 1, "aa": 2});
    assert_eq!(
        to_hex(&encode_json(&v).expect("encodes")),
        "a2616201626161 02".replace(' ', "")
    );
    // Lexicographic order ("aa" before "b") is not canonical.
    assert_rejected("a2 626161 02 6162 01", "map keys out of canonical order");
    // Same length: bytewise.
    assert_eq!(
        to_hex(&encode_json(&json!({"b": 1, "a": 2, "ab": 3, "aa": 4})).expect("encodes")),
        "a4 6161 02 6162 01 626161 04 626162 03".replace(' ', "")
    );
    assert_rejected("a2 6162 01 6161 02", "map keys out of canonical order");
}

#[test]
fn canonical_key_cmp_is_length_then_bytes() {
    assert_eq!(canonical_key_cmp("b", "aa"), Ordering::Less);
    assert_eq!(canonical_key_cmp("aa", "b"), Ordering::Greater);
    assert_eq!(canonical_key_cmp("ab", "aa"), Ordering::Greater);
    assert_eq!(canonical_key_cmp("", "a"), Ordering::Less);
    assert_eq!(canonical_key_cmp("role", "role"), Ordering::Equal);
    // Byte length, not char count: "é" is 2 bytes, so it sorts after "z".
    assert_eq!(canonical_key_cmp("\u{e9}", "z"), Ordering::Greater);
    assert_eq!(canonical_key_cmp("\u{e9}", "zz"), Ordering::Greater);
    assert_eq!(canonical_key_cmp("\u{e9}", "zzz"), Ordering::Less);
}

#[test]
fn canonical_key_cmp_matches_encoded_key_order() {
    let keys = [
        "",
        "a",
        "b",
        "zz",
        "\u{e9}",
        "aaa",
        &"x".repeat(23),
        &"x".repeat(24),
        &"a".repeat(255),
        &"a".repeat(256),
    ];
    for a in keys {
        for b in keys {
            let mut ea = Encoder::new();
            ea.text(a);
            let mut eb = Encoder::new();
            eb.text(b);
            assert_eq!(
                canonical_key_cmp(a, b),
                ea.as_bytes().cmp(eb.as_bytes()),
                "{a:?} vs {b:?}"
            );
        }
    }
}

// ---- rejection, one rule at a time -----------------------------------------

#[test]
fn rejects_non_shortest_integers() {
    for h in [
        "1817",
        "190017",
        "1900ff",
        "1a0000ffff",
        "1b00000000ffffffff",
        "3817",
        "3900ff",
        "1b0000000000000000",
    ] {
        assert_rejected(h, "integer not in shortest form");
    }
    let err = decode_json(&hex("1817")).expect_err("non-shortest");
    assert_eq!(err.to_string(), "integer not in shortest form at byte 0");
    // Boundaries just above each threshold are fine.
    for h in ["1818", "190100", "1a00010000", "1b0000000100000000"] {
        decode_json(&hex(h)).expect("shortest form");
    }
}

#[test]
fn rejects_non_shortest_lengths() {
    assert_rejected("780161", "length not in shortest form");
    assert_rejected("790000", "length not in shortest form");
    assert_rejected("9800", "length not in shortest form");
    assert_rejected("b800", "length not in shortest form");
    assert_rejected("81 9800", "length not in shortest form");
}

#[test]
fn rejects_indefinite_lengths_and_reserved_info() {
    assert_rejected("9fff", "indefinite length not allowed");
    assert_rejected("bfff", "indefinite length not allowed");
    assert_rejected("7f6161ff", "indefinite length not allowed");
    // Byte strings are refused as a type before their head is examined, but
    // the low-level reader still refuses indefinite ones.
    assert_rejected("5f4161ff", "byte string is not a JSON value");
    let bytes = hex("5f4161ff");
    assert_eq!(
        Decoder::new(&bytes).bytes().map_err(|e| e.reason),
        Err(CborErrorReason::IndefiniteLength)
    );
    assert_rejected("1f", "indefinite length not allowed");
    assert_rejected("1c", "reserved additional information 28");
    assert_rejected("3d", "reserved additional information 29");
    assert_rejected("9e", "reserved additional information 30");
    assert_rejected("fc", "reserved additional information 28");
    assert_rejected("fe", "reserved additional information 30");
    assert_rejected("ff", "unexpected break stop code");
    assert_rejected("8101ff", "trailing bytes after the value");
}

#[test]
fn rejects_tags() {
    assert_rejected(
        "c074323031332d30332d32315432303a30343a30305a",
        "tags are not allowed",
    );
    assert_rejected("c11a514b67b0", "tags are not allowed");
    assert_rejected("d8206161", "tags are not allowed");
    assert_rejected("81c000", "tags are not allowed");
}

#[test]
fn rejects_undefined_and_other_simple_values() {
    assert_rejected("f7", "undefined is not a JSON value");
    assert_rejected("e0", "simple value 0 is not allowed");
    assert_rejected("f0", "simple value 16 is not allowed");
    assert_rejected("f3", "simple value 19 is not allowed");
    assert_rejected("f820", "simple value 32 is not allowed");
    assert_rejected("f8ff", "simple value 255 is not allowed");
    // false/true/null smuggled through the two-byte form.
    assert_rejected("f814", "simple value not in shortest form");
    assert_rejected("f816", "simple value not in shortest form");
    assert_rejected("f8", "truncated input");
}

#[test]
fn rejects_byte_strings() {
    assert_rejected("40", "byte string is not a JSON value");
    assert_rejected("4401020304", "byte string is not a JSON value");
    assert_rejected("a1616140", "byte string is not a JSON value");
}

#[test]
fn rejects_nan_and_infinity() {
    for h in [
        "f97e00",
        "f97c01",
        "fa7fc00000",
        "fb7ff8000000000000",
        "fbfff8000000000001",
    ] {
        assert_rejected(h, "NaN is not a JSON number");
    }
    for h in [
        "f97c00",
        "f9fc00",
        "fa7f800000",
        "faff800000",
        "fb7ff0000000000000",
        "fbfff0000000000000",
    ] {
        assert_rejected(h, "infinity is not a JSON number");
    }
    let mut enc = Encoder::new();
    assert_eq!(
        enc.float(f64::NAN).map_err(|e| e.reason.to_string()),
        Err("NaN is not a JSON number".into())
    );
    assert_eq!(
        enc.float(f64::NEG_INFINITY)
            .map_err(|e| e.reason.to_string()),
        Err("infinity is not a JSON number".into())
    );
    assert!(enc.as_bytes().is_empty(), "failed float writes nothing");
}

#[test]
fn rejects_floats_not_in_shortest_form() {
    for h in [
        "fa3f800000",         // 1.0 as single
        "fb3ff0000000000000", // 1.0 as double
        "fa00000000",         // 0.0 as single
        "fa80000000",         // -0.0 as single
        "fb8000000000000000", // -0.0 as double
        "fb3e70000000000000", // smallest half subnormal as double
        "fa33800000",         // smallest half subnormal as single
        "fb47c3500000000000", // 100000.0 as double (fits single)
        "fb3ff19999a0000000", // 1.1f32 widened, fits single
    ] {
        assert_rejected(h, "float not in shortest form");
    }
}

#[test]
fn rejects_negative_integers_below_i64_min() {
    assert_rejected("3bffffffffffffffff", "negative integer below i64::MIN");
    assert_rejected("3b8000000000000000", "negative integer below i64::MIN");
    let min = decode_json(&hex("3b7fffffffffffffff")).expect("i64::MIN is fine");
    assert_eq!(min, json!(i64::MIN));
    assert_eq!(
        to_hex(&encode_json(&json!(i64::MIN)).expect("encodes")),
        "3b7fffffffffffffff"
    );
}

#[test]
fn rejects_invalid_utf8() {
    // Bad continuation, overlong, surrogate, stray byte, above U+10FFFF.
    for h in ["62c328", "62c080", "63eda080", "61ff", "64f4908080"] {
        assert_rejected(h, "invalid UTF-8 in text string");
    }
    let err = decode_json(&hex("8263616263 62c328")).expect_err("bad utf-8");
    assert_eq!(err.offset, 6, "points at the offending byte");
    // A key is a text string too.
    assert_rejected("a161ff01", "invalid UTF-8 in text string");
}

#[test]
fn rejects_non_text_keys() {
    assert_rejected("a10102", "map key is not a text string");
    assert_rejected("a1416101", "map key is not a text string");
    assert_rejected("a1f601", "map key is not a text string");
    assert_rejected("a1800102", "map key is not a text string");
}

#[test]
fn rejects_duplicate_keys_with_their_own_reason() {
    assert_rejected("a2 6161 01 6161 02", "duplicate map key \"a\"");
    assert_rejected(
        "a2 64726f6c65 01 6462726f6c 02",
        "map keys out of canonical order",
    );
    assert_rejected(
        "a2 64726f6c65 01 64726f6c65 02",
        "duplicate map key \"role\"",
    );
    let err = decode_json(&hex("a2 6161 01 6161 02")).expect_err("duplicate");
    assert_eq!(err.offset, 4);
    assert_eq!(err.to_string(), "duplicate map key \"a\" at byte 4");
}

#[test]
fn rejects_trailing_bytes() {
    assert_rejected("0000", "trailing bytes after the value");
    assert_rejected("f6f6", "trailing bytes after the value");
    let err = decode_json(&hex("83010203 00")).expect_err("trailing");
    assert_eq!(err.offset, 4);
    // The low-level decoder leaves them for the caller, until finish().
    let bytes = hex("0102");
    let mut dec = Decoder::new(&bytes);
    assert_eq!(dec.json().expect("first"), json!(1));
    assert!(!dec.is_empty());
    assert_eq!(dec.clone().finish().map_err(|e| e.offset), Err(1));
    assert_eq!(dec.json().expect("second"), json!(2));
    dec.finish().expect("consumed");
}

#[test]
fn rejects_truncated_input() {
    assert_rejected("", "truncated input");
    assert_rejected("18", "truncated input");
    assert_rejected("1901", "truncated input");
    assert_rejected("1b00000000", "truncated input");
    assert_rejected("fb3ff1", "truncated input");
    assert_rejected("a16161", "truncated input");
    assert_rejected("6261", "declared length exceeds remaining input");
    assert_rejected("8201", "declared length exceeds remaining input");
    assert_rejected("a2616101", "declared length exceeds remaining input");
}

#[test]
fn json_text_orders_keys_as_serde_json_does_and_keeps_number_forms() {
    let v: Value = serde_json::from_str(
        r#"{"role":"tool","content":"a\"b\\c\n\u0001\u00e9\ud83d\ude00","zz":[1,-1,1.0,0.1,-0.0,1e300,5e-324,18446744073709551615,-9223372036854775808,null,true,false,{},[]],"a":{"bb":1,"a":2,"c":{"dd":[],"d":{}}},"":0}"#,
    )
    .expect("parses");
    let bytes = encode_json(&v).expect("encodes");
    let mut text = Vec::new();
    write_json_text(&bytes, &mut text).expect("transcodes");
    assert_eq!(
        String::from_utf8(text).expect("UTF-8"),
        serde_json::to_string(&v).expect("serializes")
    );
}

#[test]
fn json_text_refuses_what_the_decoder_refuses() {
    let mut out = Vec::new();
    // Keys out of canonical order: {"bb": 1, "a": 2}.
    let unsorted = [0xa2, 0x62, b'b', b'b', 0x01, 0x61, b'a', 0x02];
    assert_eq!(
        write_json_text(&unsorted, &mut out).map_err(|e| e.reason),
        Err(CborErrorReason::KeyOrder)
    );
    // A non-shortest integer inside a value that a map steps over.
    let long_int = [0xa1, 0x61, b'a', 0x18, 0x01];
    assert_eq!(
        write_json_text(&long_int, &mut out).map_err(|e| e.reason),
        Err(CborErrorReason::IntegerNotShortest)
    );
    assert_eq!(
        write_json_text(&[0x01, 0x02], &mut out).map_err(|e| e.reason),
        Err(CborErrorReason::TrailingBytes)
    );
    let mut deep = [0xa1u8, 0x61, b'k'].repeat(MAX_DEPTH);
    deep.push(0xa0);
    assert_eq!(
        write_json_text(&deep, &mut out).map_err(|e| e.reason),
        Err(CborErrorReason::TooDeep)
    );
    let mut ok = [0xa1u8, 0x61, b'k'].repeat(MAX_DEPTH);
    ok.push(0xf6);
    out.clear();
    write_json_text(&ok, &mut out).expect("256 levels");
    let want = serde_json::to_string(&decode_json(&ok).expect("decodes")).expect("serializes");
    assert_eq!(out, want.as_bytes());
}

#[test]
fn rejects_nesting_deeper_than_max_depth() {
    let mut ok = vec![0x81u8; MAX_DEPTH - 1];
    ok.push(0x80);
    let v = decode_json(&ok).expect("256 levels are allowed");
    assert_eq!(encode_json(&v).expect("re-encodes"), ok);

    let mut deep = vec![0x81u8; MAX_DEPTH];
    deep.push(0x80);
    let err = decode_json(&deep).expect_err("257 levels");
    assert_eq!(err.reason.to_string(), "nesting deeper than 256");
    assert_eq!(err.offset, MAX_DEPTH);

    // Maps count too.
    let mut maps = Vec::new();
    for _ in 0..MAX_DEPTH {
        maps.extend_from_slice(&[0xa1, 0x60]);
    }
    maps.push(0xa0);
    assert_eq!(reason_of(&maps), "nesting deeper than 256");

    // The encoder refuses what the decoder would refuse.
    let mut value = json!([]);
    for _ in 0..MAX_DEPTH {
        value = Value::Array(vec![value]);
    }
    let err = encode_json(&value).expect_err("too deep to encode");
    assert_eq!(err.reason, CborErrorReason::TooDeep);
    if let Value::Array(mut inner) = value {
        let v = inner.pop().expect("one item");
        encode_json(&v).expect("256 levels encode");
    }
}

#[test]
fn huge_declared_lengths_fail_fast_without_allocating() {
    for h in [
        "9b8000000000000000",
        "9bffffffffffffffff",
        "bbffffffffffffffff",
        "bb8000000000000000",
        "7bffffffffffffffff",
        "5bffffffffffffffff",
        "9a7fffffff00",
        "a20101",
        "8183",
    ] {
        let reason = reason_of(&hex(h));
        assert!(
            reason == "declared length exceeds remaining input"
                || (h.starts_with('5') && reason == "byte string is not a JSON value"),
            "{h}: {reason}"
        );
    }
    let bytes = hex("9b8000000000000000");
    let mut dec = Decoder::new(&bytes);
    assert_eq!(
        dec.array().map_err(|e| e.reason),
        Err(CborErrorReason::LengthExceedsInput)
    );
    assert_eq!(dec.position(), 0, "a failed read leaves the item in place");
    let bytes = hex("5bffffffffffffffff00");
    assert_eq!(
        Decoder::new(&bytes).bytes().map_err(|e| e.reason),
        Err(CborErrorReason::LengthExceedsInput)
    );
}

#[test]
fn map_head_needs_two_bytes_per_entry() {
    let bytes = hex("a2 6161 01");
    assert_eq!(
        Decoder::new(&bytes).map().map_err(|e| e.reason),
        Err(CborErrorReason::LengthExceedsInput)
    );
    let bytes = hex("a2 6161 01 60");
    assert_eq!(Decoder::new(&bytes).map(), Ok(2));
}

// ---- structural properties on fixed samples ----------------------------------

fn samples() -> Vec<Vec<u8>> {
    let values = [
        json!({
            "role": "assistant",
            "content": [{"type": "text", "text": "h\u{e9}llo \u{1f600}"}],
            "n": -300,
            "t": 1.5,
            "x": 1.1,
            "big": 18446744073709551615u64,
            "ok": true,
            "none": null
        }),
        json!([
            0,
            -1,
            24,
            255,
            256,
            65535,
            65536,
            4294967296u64,
            -4294967297i64,
            100000.0,
            -0.0,
            5.960464477539063e-8
        ]),
        json!({"": "", "a": {"b": [[], {}]}}),
    ];
    values
        .iter()
        .map(|v| encode_json(v).expect("sample encodes"))
        .collect()
}

#[test]
fn truncation_at_every_offset_is_an_error() {
    for bytes in samples() {
        decode_json(&bytes).expect("full sample decodes");
        for cut in 0..bytes.len() {
            assert!(
                decode_json(&bytes[..cut]).is_err(),
                "prefix {cut} of {}",
                to_hex(&bytes)
            );
        }
    }
}

#[test]
fn every_single_bit_flip_is_rejected_or_canonical() {
    let mut accepted = 0;
    for bytes in samples() {
        for i in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[i / 8] ^= 1 << (i % 8);
            if let Ok(v) = decode_json(&flipped) {
                accepted += 1;
                assert_eq!(
                    encode_json(&v).expect("decoded values encode"),
                    flipped,
                    "flip {i} decoded to {v} but re-encodes differently"
                );
            }
        }
    }
    // Flips inside string payloads and integers stay valid; make sure the
    // property was actually exercised.
    assert!(accepted > 50, "only {accepted} flips accepted");
}

// ---- half precision ---------------------------------------------------------

#[test]
fn f16_conversion_is_exact_for_every_finite_half() {
    let mut finite = 0;
    for h in 0..=u16::MAX {
        let v = f16_to_f64(h);
        if (h >> 10) & 0x1f == 0x1f {
            assert!(!v.is_finite(), "{h:#06x}");
            continue;
        }
        finite += 1;
        assert_eq!(f64_to_f16_exact(v), Some(h), "{h:#06x} -> {v:e}");
        // Neighbouring doubles are never halves.
        assert_eq!(
            f64_to_f16_exact(f64::from_bits(v.to_bits() + 1)),
            None,
            "{h:#06x}+1ulp"
        );
        if v != 0.0 {
            assert_eq!(
                f64_to_f16_exact(f64::from_bits(v.to_bits() - 1)),
                None,
                "{h:#06x}-1ulp"
            );
        }
    }
    assert_eq!(finite, 63488);
    // Spot checks against known values.
    assert_eq!(f16_to_f64(0x0001), 5.960464477539063e-8);
    assert_eq!(f16_to_f64(0x03ff), 6.097555160522461e-5);
    assert_eq!(f16_to_f64(0x0400), 6.103515625e-5);
    assert_eq!(f16_to_f64(0x7bff), 65504.0);
    assert_eq!(f16_to_f64(0xc400), -4.0);
    assert_eq!(f64_to_f16_exact(65505.0), None);
    assert_eq!(f64_to_f16_exact(65536.0), None);
    assert_eq!(
        f64_to_f16_exact(2.980232238769531e-8),
        None,
        "half of the smallest subnormal"
    );
    assert_eq!(f64_to_f16_exact(f64::MIN_POSITIVE), None);
    assert_eq!(f64_to_f16_exact(5e-324), None);
    assert_eq!(f64_to_f16_exact(1.0 + 1.0 / 1024.0), Some(0x3c01));
    assert_eq!(f64_to_f16_exact(1.0 + 1.0 / 2048.0), None);
}

#[test]
fn float_encoding_matches_ciborium_on_every_half() {
    for h in 0..=u16::MAX {
        let v = f16_to_f64(h);
        if !v.is_finite() {
            continue;
        }
        let next_single = f64::from(f32::from_bits((v as f32).to_bits() + 1));
        for x in [v, f64::from_bits(v.to_bits() + 1), next_single] {
            if !x.is_finite() {
                continue;
            }
            let mut enc = Encoder::new();
            enc.float(x).expect("finite");
            let mut theirs = Vec::new();
            ciborium::into_writer(&x, &mut theirs).expect("ciborium writes");
            assert_eq!(enc.as_bytes(), theirs.as_slice(), "{x:e}");
        }
    }
}

// ---- serde_json quirks that decide which encoding a text gets ----------------

#[test]
fn serde_json_number_parsing_quirks() {
    // "-0" has no integer representation in serde_json: it becomes float -0.0.
    let v: Value = serde_json::from_str("-0").expect("parses");
    assert_eq!(to_hex(&encode_json(&v).expect("encodes")), "f98000");
    let v: Value = serde_json::from_str("0").expect("parses");
    assert_eq!(to_hex(&encode_json(&v).expect("encodes")), "00");
    // Integer literals beyond u64/i64 arrive as floats.
    let v: Value = serde_json::from_str("18446744073709551616").expect("parses");
    assert_eq!(to_hex(&encode_json(&v).expect("encodes")), "fa5f800000");
    let v: Value = serde_json::from_str("-9223372036854775809").expect("parses");
    assert_eq!(to_hex(&encode_json(&v).expect("encodes")), "fadf000000");
    // Non-negative i64 values are stored as u64 and encode as major 0.
    assert_eq!(to_hex(&encode_json(&json!(5i64)).expect("encodes")), "05");
    // 1.0 stays a float; the text decides.
    let v: Value = serde_json::from_str("1.0").expect("parses");
    assert_eq!(to_hex(&encode_json(&v).expect("encodes")), "f93c00");
    let v: Value = serde_json::from_str("1e2").expect("parses");
    assert_eq!(to_hex(&encode_json(&v).expect("encodes")), "f95640");
}

// ---- low-level encoder/decoder ----------------------------------------------

#[test]
fn low_level_roundtrip() {
    let mut enc = Encoder::with_capacity(64);
    enc.map(9);
    enc.text("a");
    enc.uint(u64::MAX);
    enc.text("b");
    enc.int(i64::MIN);
    enc.text("c");
    enc.int(-24);
    enc.text("d");
    enc.bytes(&[1, 2, 3]);
    enc.text("e");
    enc.array(2);
    enc.bool(true);
    enc.null();
    enc.text("f");
    enc.float(-4.1).expect("finite");
    enc.text("g");
    enc.int(i64::MAX);
    enc.text("h");
    enc.bool(false);
    enc.text("i");
    enc.json(&json!({"z": [1], "yy": null})).expect("encodes");
    let bytes = enc.into_bytes();

    let mut dec = Decoder::new(&bytes);
    assert_eq!(dec.peek_major(), Ok(MAJOR_MAP));
    assert_eq!(dec.map(), Ok(9));
    assert_eq!(dec.text(), Ok("a"));
    assert_eq!(dec.uint(), Ok(u64::MAX));
    assert_eq!(dec.text(), Ok("b"));
    assert_eq!(dec.int(), Ok(i64::MIN));
    assert_eq!(dec.text(), Ok("c"));
    assert_eq!(dec.peek_major(), Ok(MAJOR_NINT));
    assert_eq!(dec.int(), Ok(-24));
    assert_eq!(dec.text(), Ok("d"));
    assert_eq!(dec.bytes(), Ok(&[1u8, 2, 3][..]));
    assert_eq!(dec.text(), Ok("e"));
    assert_eq!(dec.array(), Ok(2));
    assert_eq!(dec.bool(), Ok(true));
    assert!(dec.peek_is_null());
    assert_eq!(dec.null(), Ok(()));
    assert_eq!(dec.text(), Ok("f"));
    assert_eq!(dec.float().map(f64::to_bits), Ok((-4.1f64).to_bits()));
    assert_eq!(dec.text(), Ok("g"));
    assert_eq!(dec.int(), Ok(i64::MAX));
    assert_eq!(dec.text(), Ok("h"));
    assert_eq!(dec.bool(), Ok(false));
    assert_eq!(dec.text(), Ok("i"));
    assert_eq!(dec.json(), Ok(json!({"yy": null, "z": [1]})));
    assert!(dec.is_empty());
    assert!(!dec.peek_is_null());
    assert_eq!(
        dec.peek_major().map_err(|e| e.reason),
        Err(CborErrorReason::Truncated)
    );
    dec.finish().expect("all consumed");
}

#[test]
fn low_level_type_errors_name_both_sides() {
    let bytes = hex("01");
    let mut dec = Decoder::new(&bytes);
    let err = dec.text().expect_err("not text");
    assert_eq!(
        err.to_string(),
        "expected text string, found unsigned integer at byte 0"
    );
    assert_eq!(dec.position(), 0);
    assert_eq!(
        dec.bool().map_err(|e| e.reason.to_string()),
        Err("expected boolean, found unsigned integer".into())
    );
    assert_eq!(
        dec.null().map_err(|e| e.reason.to_string()),
        Err("expected null, found unsigned integer".into())
    );
    assert_eq!(
        dec.float().map_err(|e| e.reason.to_string()),
        Err("expected float, found unsigned integer".into())
    );
    assert_eq!(
        dec.array().map_err(|e| e.reason.to_string()),
        Err("expected array, found unsigned integer".into())
    );
    assert_eq!(
        dec.map().map_err(|e| e.reason.to_string()),
        Err("expected map, found unsigned integer".into())
    );
    assert_eq!(
        dec.bytes().map_err(|e| e.reason.to_string()),
        Err("expected byte string, found unsigned integer".into())
    );
    assert_eq!(dec.uint(), Ok(1));

    let bytes = hex("f6");
    assert_eq!(
        Decoder::new(&bytes).int().map_err(|e| e.reason.to_string()),
        Err("expected integer, found null".into())
    );
    let bytes = hex("20");
    assert_eq!(
        Decoder::new(&bytes)
            .uint()
            .map_err(|e| e.reason.to_string()),
        Err("expected unsigned integer, found negative integer".into())
    );
    let bytes = hex("1b8000000000000000");
    assert_eq!(
        Decoder::new(&bytes).int().map_err(|e| e.reason.to_string()),
        Err("integer above i64::MAX".into())
    );
    let bytes = hex("1817");
    assert_eq!(
        Decoder::new(&bytes).uint().map_err(|e| e.reason),
        Err(CborErrorReason::IntegerNotShortest)
    );
    let bytes = hex("fa3f800000");
    assert_eq!(
        Decoder::new(&bytes).float().map_err(|e| e.reason),
        Err(CborErrorReason::FloatNotShortest)
    );
}

#[test]
fn caller_errors_carry_position_and_reason() {
    let bytes = hex("a1 6178 01");
    let mut dec = Decoder::new(&bytes);
    assert_eq!(dec.map(), Ok(1));
    let key = dec.text().expect("key");
    let err = dec.error(format!("unknown session field {key:?}"));
    assert_eq!(err.offset, 3);
    assert_eq!(err.to_string(), "unknown session field \"x\" at byte 3");
    let err = dec.error("plain str");
    assert_eq!(err.reason, CborErrorReason::Custom("plain str".into()));
}

// ---- property tests -----------------------------------------------------------

fn arb_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        any::<u64>().prop_map(f64::from_bits),
        any::<u16>().prop_map(f16_to_f64),
        any::<u32>().prop_map(|b| f64::from(f32::from_bits(b))),
        (0u64..1 << 52).prop_map(f64::from_bits), // subnormal doubles
        Just(-0.0),
        Just(0.0),
        Just(f64::MAX),
        Just(f64::MIN),
        Just(f64::MIN_POSITIVE),
        Just(5e-324),
    ]
}

fn arb_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(0u64),
            Just(23),
            Just(24),
            Just(255),
            Just(256),
            Just(65535),
            Just(65536),
            Just(u64::MAX)
        ]
        .prop_map(Value::from),
        prop_oneof![
            Just(i64::MIN),
            Just(i64::MAX),
            Just(-1),
            Just(-24),
            Just(-25),
            Just(-256),
            Just(-257)
        ]
        .prop_map(Value::from),
        arb_f64().prop_filter_map("not a JSON number", |x| Number::from_f64(x)
            .map(Value::Number)),
    ]
}

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof!["[a-c]{0,3}", any::<String>(), "\\PC{0,30}"]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        any::<String>().prop_map(Value::String),
        "[a-z]{20,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 96, 10, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..10).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..10)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// JSON text of `v` with object entries in reverse canonical-ish order and
/// extra whitespace, to show the encoding does not depend on the source text.
fn scrambled_text(v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,\n ");
                }
                scrambled_text(item, out);
            }
            out.push_str("\t]");
        }
        Value::Object(map) => {
            out.push_str("{\n");
            for (i, (k, v)) in map.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(",\r\n");
                }
                out.push_str(&serde_json::to_string(k).expect("string serializes"));
                out.push_str(" :  ");
                scrambled_text(v, out);
            }
            out.push_str(" }");
        }
        other => out.push_str(&serde_json::to_string(other).expect("scalar serializes")),
    }
}

fn from_ciborium(v: ciborium::Value) -> Value {
    match v {
        ciborium::Value::Null => Value::Null,
        ciborium::Value::Bool(b) => Value::Bool(b),
        ciborium::Value::Integer(i) => {
            let i = i128::from(i);
            match u64::try_from(i) {
                Ok(u) => Value::from(u),
                Err(_) => Value::from(i64::try_from(i).expect("ciborium integer in i64 range")),
            }
        }
        ciborium::Value::Float(x) => f(x),
        ciborium::Value::Text(s) => Value::String(s),
        ciborium::Value::Array(items) => {
            Value::Array(items.into_iter().map(from_ciborium).collect())
        }
        ciborium::Value::Map(entries) => {
            let mut map = Map::new();
            for (k, v) in entries {
                match k {
                    ciborium::Value::Text(k) => {
                        let prior = map.insert(k, from_ciborium(v));
                        assert!(prior.is_none(), "ciborium saw a duplicate key");
                    }
                    other => panic!("non-text key {other:?}"),
                }
            }
            Value::Object(map)
        }
        other => panic!("ciborium produced a non-JSON item {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn prop_roundtrip_is_exact(v in arb_json()) {
        let bytes = encode_json(&v).expect("proptest values are encodable");
        let back = decode_json(&bytes).expect("own output decodes");
        prop_assert!(strict_eq(&back, &v), "{back} != {v}");
        prop_assert_eq!(encode_json(&back).expect("re-encodes"), bytes);
    }

    #[test]
    fn prop_source_text_does_not_matter(v in arb_json()) {
        let plain = serde_json::to_string(&v).expect("serializes");
        let mut scrambled = String::new();
        scrambled_text(&v, &mut scrambled);
        let a: Value = serde_json::from_str(&plain).expect("plain parses");
        let b: Value = serde_json::from_str(&scrambled).expect("scrambled parses");
        prop_assert_eq!(encode_json(&a).expect("encodes"), encode_json(&b).expect("encodes"));
        prop_assert_eq!(encode_json(&a).expect("encodes"), encode_json(&v).expect("encodes"));
    }

    #[test]
    fn prop_ciborium_agrees(v in arb_json()) {
        let bytes = encode_json(&v).expect("encodes");
        let theirs: ciborium::Value =
            ciborium::from_reader(bytes.as_slice()).expect("ciborium decodes our output");
        let theirs = from_ciborium(theirs);
        prop_assert!(strict_eq(&theirs, &v), "{theirs} != {v}");
    }

    #[test]
    fn prop_float_width_matches_ciborium(x in arb_f64()) {
        let mut enc = Encoder::new();
        if x.is_finite() {
            enc.float(x).expect("finite");
            let mut theirs = Vec::new();
            ciborium::into_writer(&x, &mut theirs).expect("ciborium writes");
            prop_assert_eq!(enc.as_bytes(), theirs.as_slice());
            let mut dec = Decoder::new(enc.as_bytes());
            prop_assert_eq!(dec.float().map(f64::to_bits), Ok(x.to_bits()));
        } else {
            prop_assert!(enc.float(x).is_err());
        }
    }

    #[test]
    fn prop_json_text_is_what_serde_json_writes_for_the_value(v in arb_json()) {
        let bytes = encode_json(&v).expect("encodes");
        let mut text = Vec::new();
        write_json_text(&bytes, &mut text).expect("own output transcodes");
        let want = serde_json::to_string(&decode_json(&bytes).expect("decodes")).expect("serializes");
        prop_assert_eq!(String::from_utf8(text).expect("UTF-8"), want);
    }

    #[test]
    fn prop_json_text_accepts_exactly_what_the_decoder_accepts(
        v in arb_json(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode_json(&v).expect("encodes");
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let mut text = Vec::new();
        match (decode_json(&bytes), write_json_text(&bytes, &mut text)) {
            (Ok(w), Ok(())) => prop_assert_eq!(
                String::from_utf8(text).expect("UTF-8"),
                serde_json::to_string(&w).expect("serializes")
            ),
            (Err(_), Err(_)) => {}
            (a, b) => prop_assert!(false, "decoder {a:?}, transcoder {b:?}"),
        }
    }

    #[test]
    fn prop_random_bytes_never_panic_and_accepted_ones_are_canonical(
        bytes in prop::collection::vec(any::<u8>(), 0..64)
    ) {
        if let Ok(v) = decode_json(&bytes) {
            prop_assert_eq!(encode_json(&v).expect("re-encodes"), bytes);
        }
    }

    #[test]
    fn prop_mutations_of_valid_encodings_are_rejected_or_canonical(
        v in arb_json(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode_json(&v).expect("encodes");
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        if let Ok(w) = decode_json(&bytes) {
            prop_assert_eq!(encode_json(&w).expect("re-encodes"), bytes);
        }
    }
}
