//! The session builder: turns a [`Turn`] into a session object that
//! continues its parent as a delta (objects-format.md, "History"), and the
//! blobs it adds.

use serde_json::Value;

use crate::error::Result;
use crate::hash::ObjectId;
use crate::object::{
    blob, Compaction, EncodedObject, MessageDelta, ObjectKind, Session, SessionStatus,
};
use crate::time::now_ms;

use super::{Messages, Store, Turn};

/// A session built for a transaction: its id, the session as built (the
/// transaction hands it to the index without decoding it again), and the
/// objects to write, the session last.
#[derive(Debug)]
pub(super) struct Built {
    pub id: ObjectId,
    pub session: Session,
    pub objects: Vec<EncodedObject>,
}

impl Store {
    /// Builds a session continuing `parent` (or a root) from a turn.
    /// `cut` keeps that many of the parent's (messages, display messages)
    /// instead of all of them.
    pub(super) fn build_session(
        &self,
        parent: Option<ObjectId>,
        conversation: Option<ObjectId>,
        turn: Turn,
        extra_parents: &[ObjectId],
        cut: Option<(u64, u64)>,
        compaction: Option<Compaction>,
    ) -> Result<Built> {
        let mut objects = Vec::new();
        let mut put = |v: &Value| -> Result<ObjectId> {
            let o = EncodedObject::new(ObjectKind::Blob, blob::encode_value(v)?);
            let id = o.id();
            objects.push(o);
            Ok(id)
        };
        let parent_session = match parent {
            Some(p) => Some(self.odb.session(&p)?),
            None => None,
        };
        let delta = |given: &Messages,
                     history: &dyn Fn() -> Result<Vec<ObjectId>>,
                     parent_len: u64,
                     put: &mut dyn FnMut(&Value) -> Result<ObjectId>|
         -> Result<MessageDelta> {
            match given {
                Messages::Added(msgs) => Ok(MessageDelta {
                    base: parent_len,
                    added: msgs.iter().map(&mut *put).collect::<Result<_>>()?,
                }),
                Messages::History(msgs) => {
                    let new: Vec<ObjectId> = msgs.iter().map(&mut *put).collect::<Result<_>>()?;
                    Ok(MessageDelta::between(&history()?, &new))
                }
            }
        };
        // The parent records its lengths: no walk of its history.
        let (parent_len, parent_display_len) = parent_session
            .as_ref()
            .map_or((0, 0), |s| (s.messages.len(), s.display_messages.len()));
        let (parent_len, parent_display_len) = cut.unwrap_or((parent_len, parent_display_len));
        let messages = match compaction {
            // A compaction replaces the whole history (objects-format.md, "History").
            Some(_) => delta(&turn.messages, &|| Ok(Vec::new()), 0, &mut put)?,
            None => delta(
                &turn.messages,
                &|| parent.map_or(Ok(Vec::new()), |p| self.odb.history(&p)),
                parent_len,
                &mut put,
            )?,
        };
        let display_messages = match &turn.display {
            Some(d) => delta(
                d,
                &|| parent.map_or(Ok(Vec::new()), |p| self.odb.display_history(&p)),
                parent_display_len,
                &mut put,
            )?,
            None => match &turn.messages {
                Messages::Added(_) => MessageDelta {
                    base: parent_display_len,
                    added: messages.added.clone(),
                },
                Messages::History(_) => messages.clone(),
            },
        };
        let context_state = match &turn.context_state {
            Some(v) => Some(put(v)?),
            None => parent_session.as_ref().and_then(|s| s.context_state),
        };
        let environment_state = match &turn.environment_state {
            Some(v) => Some(put(v)?),
            None => parent_session.as_ref().and_then(|s| s.environment_state),
        };
        let mut parents: Vec<ObjectId> = parent.into_iter().collect();
        parents.extend_from_slice(extra_parents);
        let session = Session {
            parents,
            conversation,
            status: turn.status.unwrap_or(SessionStatus::Committed),
            created_at: turn.created_at.unwrap_or_else(now_ms),
            title: turn.title,
            run: turn.run,
            messages,
            display_messages,
            context_state,
            environment_state,
            metadata: turn.metadata,
            compaction,
        };
        let encoded = session.encode()?;
        let id = encoded.id();
        objects.push(encoded);
        Ok(Built {
            id,
            session,
            objects,
        })
    }
}
