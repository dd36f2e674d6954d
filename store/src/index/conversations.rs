//! Lookups of summaries: a session by id, a conversation by name or by the
//! id its sessions carry, and conversations by newest activity.

use super::summary::{ConversationInfo, SessionInfo};
use super::{key, Index};
use crate::error::{Error, IndexError, Result};
use crate::hash::ObjectId;

/// Activity keys sort by time; the bias makes negative times sort first.
pub(super) fn activity_key(time: i64, name: &str) -> Vec<u8> {
    let mut k = key("a:", &((time as u64) ^ (1 << 63)).to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

impl Index {
    pub fn session(&self, id: &ObjectId) -> Result<Option<SessionInfo>> {
        Ok(super::encoding::read_session(*id, &mut |k| self.get(k))?.map(|(info, _)| info))
    }

    pub fn conversation(&self, name: &str) -> Result<Option<ConversationInfo>> {
        let Some(v) = self.get(&key("c:", name.as_bytes()))? else {
            return Ok(None);
        };
        let mut info = ConversationInfo::from_index_bytes(name, &v).ok_or_else(|| {
            Error::from(IndexError::UnreadableRecord {
                name: name.to_owned(),
            })
        })?;
        info.running = self.claim(name)?;
        Ok(Some(info))
    }

    /// The name of the conversation whose sessions carry `id`.
    pub fn conversation_name(&self, id: &ObjectId) -> Result<Option<String>> {
        Ok(self
            .get(&key("i:", id.as_bytes()))?
            .and_then(|v| String::from_utf8(v).ok()))
    }

    /// Conversations, newest activity first, stopping after `limit`.
    pub fn conversations_by_activity(&self, limit: Option<usize>) -> Result<Vec<ConversationInfo>> {
        self.conversations_where(limit, |_| true)
    }

    /// The conversations `keep` accepts, newest activity first, stopping
    /// after `limit`: only as many records are read as it takes.
    pub fn conversations_where(
        &self,
        limit: Option<usize>,
        keep: impl Fn(&ConversationInfo) -> bool,
    ) -> Result<Vec<ConversationInfo>> {
        let mut out = Vec::new();
        if limit == Some(0) {
            return Ok(out);
        }
        // Newest first, a page at a time: the first as many as are wanted
        // (64 at most), then 64 (`keep` may turn many down); where the
        // backend keeps the keys, each page's records are read ahead in
        // one round trip, not two a conversation.
        let mut before: Option<Vec<u8>> = None;
        loop {
            let want = match &before {
                None => limit.map_or(64, |l| l.clamp(1, 64)),
                Some(_) => 64,
            };
            let page = self.scan_batch(b"a:", before.as_deref(), true, want)?;
            let names: Vec<String> = page
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(k.get(10..).unwrap_or_default()).into_owned())
                .collect();
            self.read_ahead_conversations(&names)?;
            for name in &names {
                if let Some(info) = self.conversation(name)?.filter(|i| keep(i)) {
                    out.push(info);
                    if limit.is_some_and(|l| out.len() >= l) {
                        return Ok(out);
                    }
                }
            }
            if page.len() < want {
                break;
            }
            before = page.last().map(|(k, _)| k.clone());
        }
        Ok(out)
    }
}
