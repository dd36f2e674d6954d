//! The memory backend: objects and operations in maps, for tests and for
//! embedding without a disk.

use std::collections::HashMap;
use std::sync::RwLock;

use super::{
    Durability, ObjectBackend, OdbStats, RawOp, RepackOptions, RepackStats, SyncTicket, WriteLock,
};
use crate::error::{Error, Result};
use crate::hash::{ObjectId, Prefix};
use crate::object::EncodedObject;

/// Objects in a map: for tests and for embedding without a disk. Reads
/// verify like the disk backend's, so the two behave alike.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    objects: RwLock<HashMap<ObjectId, EncodedObject>>,
    ops: RwLock<Vec<RawOp>>,
}

impl ObjectBackend for MemoryBackend {
    fn write_lock(&self) -> Result<WriteLock<'_>> {
        // One process: the store's own state lock orders its writers.
        Ok(WriteLock::in_process())
    }

    fn append_locked(
        &self,
        _lock: &WriteLock<'_>,
        objects: &[EncodedObject],
        ops: &[RawOp],
    ) -> Result<(usize, SyncTicket)> {
        let n = self.write_batch(objects, Durability::NoSync)?;
        let mut log = self.ops.write().expect("memory backend lock");
        log.extend(ops.iter().cloned());
        Ok((n, SyncTicket((0, log.len() as u64))))
    }

    fn sync(&self, _ticket: SyncTicket) -> Result<()> {
        Ok(())
    }

    fn ops_after(&self, after: u64) -> Result<Vec<RawOp>> {
        Ok(self
            .ops
            .read()
            .expect("memory backend lock")
            .iter()
            .filter(|(s, _)| *s > after)
            .cloned()
            .collect())
    }

    fn write_batch(&self, objects: &[EncodedObject], _durability: Durability) -> Result<usize> {
        let mut map = self.objects.write().expect("memory backend lock");
        let mut n = 0;
        for o in objects {
            if let std::collections::hash_map::Entry::Vacant(slot) = map.entry(o.id()) {
                slot.insert(o.clone());
                n += 1;
            }
        }
        Ok(n)
    }

    fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>> {
        let Some(obj) = self
            .objects
            .read()
            .expect("memory backend lock")
            .get(id)
            .cloned()
        else {
            return Ok(None);
        };
        EncodedObject::verified(*id, obj.kind(), obj.into_payload())
            .map(Some)
            .map_err(|r| Error::corrupt(*id, r))
    }

    fn contains(&self, id: &ObjectId) -> Result<bool> {
        Ok(self
            .objects
            .read()
            .expect("memory backend lock")
            .contains_key(id))
    }

    fn ids_with_prefix(&self, prefix: &Prefix) -> Result<Vec<ObjectId>> {
        let mut v: Vec<ObjectId> = self
            .objects
            .read()
            .expect("memory backend lock")
            .keys()
            .filter(|id| prefix.matches(id))
            .copied()
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    fn ids(&self) -> Result<Vec<ObjectId>> {
        let mut v: Vec<ObjectId> = self
            .objects
            .read()
            .expect("memory backend lock")
            .keys()
            .copied()
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    fn repack_filtered(
        &self,
        _opts: &RepackOptions,
        keep: Option<&dyn Fn(&ObjectId) -> bool>,
        _rescue: Option<&super::Rescue<'_>>,
    ) -> Result<RepackStats> {
        let mut map = self.objects.write().expect("memory backend lock");
        if let Some(keep) = keep {
            map.retain(|id, _| keep(id));
        }
        Ok(RepackStats {
            objects: map.len(),
            ..RepackStats::default()
        })
    }

    fn stored_at(&self) -> Result<HashMap<ObjectId, i64>> {
        let now = crate::time::now_ms();
        Ok(self
            .objects
            .read()
            .expect("memory backend lock")
            .keys()
            .map(|id| (*id, now))
            .collect())
    }

    fn stats(&self) -> Result<OdbStats> {
        let map = self.objects.read().expect("memory backend lock");
        Ok(OdbStats {
            journal_objects: map.len(),
            journal_bytes: map.values().map(|o| o.payload().len() as u64).sum(),
            ..OdbStats::default()
        })
    }
}
