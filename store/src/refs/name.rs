//! Ref names: `HEAD`, `refs/heads/<conversation>`, `refs/archive/<conversation>`,
//! `refs/tags/<name>` (objects-format.md, "Refs").

use std::fmt;

/// The longest conversation or tag name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Why a conversation or tag name was refused: each variant is one rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a name cannot be empty")]
    Empty,
    #[error("name '{name}' is {len} bytes long; at most {MAX_NAME_LEN} are allowed")]
    TooLong { name: String, len: usize },
    #[error(
        "name '{name}' contains {found:?}; only letters, digits, '.', '_' and '-' are allowed"
    )]
    BadChar { name: String, found: char },
    #[error("name '{name}' contains '..'")]
    DotDot { name: String },
    #[error("name '{name}' starts with '{first}'; a name cannot start with a dot or a dash")]
    BadStart { name: String, first: char },
    #[error("name '{name}' is reserved")]
    Reserved { name: String },
    #[error("'{name}' is not a ref: expected HEAD, refs/heads/NAME, refs/archive/NAME or refs/tags/NAME")]
    NotARef { name: String },
}

/// Names no conversation or tag may take: our own words, and the Windows
/// device names (with or without an extension, in any case), so that a
/// store can be copied to any file system and exported by name.
const RESERVED: &[&str] = &["head", "index", "metadata", "con", "prn", "aux", "nul"];

/// Checks a conversation or tag name.
pub fn validate_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong {
            name: name.to_owned(),
            len: name.len(),
        });
    }
    if let Some(found) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(NameError::BadChar {
            name: name.to_owned(),
            found,
        });
    }
    let first = name.chars().next().expect("not empty");
    if first == '.' || first == '-' {
        return Err(NameError::BadStart {
            name: name.to_owned(),
            first,
        });
    }
    if name.contains("..") {
        return Err(NameError::DotDot {
            name: name.to_owned(),
        });
    }
    let stem = name.split('.').next().unwrap_or(name).to_ascii_lowercase();
    let device = (stem.len() == 4
        && (stem.starts_with("com") || stem.starts_with("lpt"))
        && matches!(stem.as_bytes()[3], b'1'..=b'9'))
        || RESERVED[3..].contains(&stem.as_str());
    if device || RESERVED[..3].contains(&name.to_ascii_lowercase().as_str()) {
        return Err(NameError::Reserved {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// A validated ref name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefName {
    /// `HEAD`: the current conversation, or a detached session.
    Head,
    /// `refs/heads/<conversation>`: a live conversation's tip.
    Conversation(String),
    /// `refs/archive/<conversation>`: an archived conversation's tip.
    Archived(String),
    /// `refs/tags/<name>`: a bookmark.
    Tag(String),
}

impl RefName {
    pub fn conversation(name: &str) -> Result<Self, NameError> {
        validate_name(name)?;
        Ok(RefName::Conversation(name.to_owned()))
    }

    pub fn archived(name: &str) -> Result<Self, NameError> {
        validate_name(name)?;
        Ok(RefName::Archived(name.to_owned()))
    }

    pub fn tag(name: &str) -> Result<Self, NameError> {
        validate_name(name)?;
        Ok(RefName::Tag(name.to_owned()))
    }

    /// Parses a full ref name.
    pub fn parse(full: &str) -> Result<Self, NameError> {
        if full == "HEAD" {
            return Ok(RefName::Head);
        }
        if let Some(n) = full.strip_prefix("refs/heads/") {
            return Self::conversation(n);
        }
        if let Some(n) = full.strip_prefix("refs/archive/") {
            return Self::archived(n);
        }
        if let Some(n) = full.strip_prefix("refs/tags/") {
            return Self::tag(n);
        }
        Err(NameError::NotARef {
            name: full.to_owned(),
        })
    }

    /// The short name (conversation or tag name; `HEAD` for HEAD).
    pub fn short(&self) -> &str {
        match self {
            RefName::Head => "HEAD",
            RefName::Conversation(n) | RefName::Archived(n) | RefName::Tag(n) => n,
        }
    }
}

/// A ref name equals its full text (`refs/heads/fix`, `HEAD`).
impl PartialEq<str> for RefName {
    fn eq(&self, other: &str) -> bool {
        let (prefix, name) = match self {
            RefName::Head => return other == "HEAD",
            RefName::Conversation(n) => ("refs/heads/", n),
            RefName::Archived(n) => ("refs/archive/", n),
            RefName::Tag(n) => ("refs/tags/", n),
        };
        other.strip_prefix(prefix) == Some(name.as_str())
    }
}

impl fmt::Display for RefName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefName::Head => f.write_str("HEAD"),
            RefName::Conversation(n) => write!(f, "refs/heads/{n}"),
            RefName::Archived(n) => write!(f, "refs/archive/{n}"),
            RefName::Tag(n) => write!(f, "refs/tags/{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ref_name_equals_its_full_text_only() {
        for text in [
            "HEAD",
            "refs/heads/fix",
            "refs/archive/fix",
            "refs/tags/fix",
        ] {
            let name = RefName::parse(text).unwrap();
            assert!(name == *text, "{text}");
            assert!(name != *"fix");
            assert!(name != *format!("{text}x").as_str());
        }
        assert!(RefName::conversation("fix").unwrap() != *"refs/tags/fix");
    }

    #[test]
    fn each_rule_is_named() {
        assert_eq!(validate_name(""), Err(NameError::Empty));
        assert!(matches!(
            validate_name(&"a".repeat(129)),
            Err(NameError::TooLong { len: 129, .. })
        ));
        assert!(validate_name(&"a".repeat(128)).is_ok());
        assert!(matches!(
            validate_name("a b"),
            Err(NameError::BadChar { found: ' ', .. })
        ));
        assert!(matches!(
            validate_name("a/b"),
            Err(NameError::BadChar { found: '/', .. })
        ));
        assert!(matches!(
            validate_name("é"),
            Err(NameError::BadChar { found: 'é', .. })
        ));
        assert!(matches!(
            validate_name("a..b"),
            Err(NameError::DotDot { .. })
        ));
        assert!(matches!(
            validate_name(".a"),
            Err(NameError::BadStart { first: '.', .. })
        ));
        assert!(matches!(
            validate_name("-a"),
            Err(NameError::BadStart { first: '-', .. })
        ));
        for r in [
            "HEAD", "head", "index", "metadata", "con", "PRN", "aux", "nul.json", "com1", "LPT9",
            "com7.txt",
        ] {
            assert!(
                matches!(validate_name(r), Err(NameError::Reserved { .. })),
                "{r}"
            );
        }
        for ok in [
            "fix-flaky-test",
            "a",
            "v1.2_x",
            "com0",
            "com10",
            "console",
            "nulls",
            "a-",
            "a.",
        ] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        let e = validate_name("a b").unwrap_err().to_string();
        assert!(e.contains("only letters, digits"), "{e}");
    }

    #[test]
    fn full_names_round_trip() {
        for full in ["HEAD", "refs/heads/x", "refs/archive/x", "refs/tags/golden"] {
            assert_eq!(RefName::parse(full).unwrap().to_string(), full);
        }
        assert!(matches!(
            RefName::parse("refs/remotes/x"),
            Err(NameError::NotARef { .. })
        ));
        assert!(matches!(
            RefName::parse("refs/heads/a..b"),
            Err(NameError::DotDot { .. })
        ));
    }
}
