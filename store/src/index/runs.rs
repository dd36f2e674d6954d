//! Open run claims: which conversation a run holds, by which process, since
//! when.

use serde_json::{json, Value};

use super::summary::RunClaim;
use super::{key, Index};
use crate::error::Result;

/// The value of a claim's `u:` key.
pub(super) fn claim_bytes(claim: &RunClaim) -> Vec<u8> {
    serde_json::to_vec(&json!({"run": claim.run, "pid": claim.pid, "started_at": claim.started_at}))
        .expect("a JSON value serializes")
}

impl Index {
    /// The open run claim on a conversation.
    pub fn claim(&self, conversation: &str) -> Result<Option<RunClaim>> {
        let Some(v) = self.get(&key("u:", conversation.as_bytes()))? else {
            return Ok(None);
        };
        let v: Value = serde_json::from_slice(&v).unwrap_or(Value::Null);
        Ok((|| {
            Some(RunClaim {
                run: v["run"].as_u64()?,
                pid: u32::try_from(v["pid"].as_u64()?).ok()?,
                started_at: v["started_at"].as_i64()?,
            })
        })())
    }

    /// Every open run claim: (conversation, claim).
    pub fn claims(&self) -> Result<Vec<(String, RunClaim)>> {
        let mut out = Vec::new();
        let names: Vec<String> = self
            .scan(b"u:")?
            .into_iter()
            .map(|(k, _)| String::from_utf8_lossy(&k[2..]).into_owned())
            .collect();
        for n in names {
            if let Some(c) = self.claim(&n)? {
                out.push((n, c));
            }
        }
        Ok(out)
    }
}
