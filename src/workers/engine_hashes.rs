//! The engine's own block hashes, per slot: where an engine's KV events name blocks by
//! hashes of its own, the block each of them stands for in this index, kept only to
//! resolve that worker's later `Stored` parents and `Removed` blocks.

use super::Workers;
use crate::slot::Slot;
use crate::SequenceHash;

impl Workers {
    /// Remembers that the engine behind `slot` calls the block `ours` by `engine`.
    pub(crate) fn map_engine_hash(&self, slot: Slot, engine: SequenceHash, ours: SequenceHash) {
        if let Some(info) = self.slots.get(slot) {
            info.engine_hashes.lock().insert(engine.0, ours.0);
        }
    }

    /// The sequence hash of the block that the engine behind `slot` calls `engine`, if a
    /// KV event told us (and no `Removed` event since).
    pub(crate) fn engine_hash(&self, slot: Slot, engine: SequenceHash) -> Option<SequenceHash> {
        let info = self.slots.get(slot)?;
        let map = info.engine_hashes.lock();
        map.get(&engine.0).copied().map(SequenceHash)
    }

    /// Forgets the engine hash `engine` of `slot`, returning the block it named.
    pub(crate) fn unmap_engine_hash(
        &self,
        slot: Slot,
        engine: SequenceHash,
    ) -> Option<SequenceHash> {
        let info = self.slots.get(slot)?;
        let mut map = info.engine_hashes.lock();
        map.remove(&engine.0).map(SequenceHash)
    }

    /// Engine hashes kept over all slots (for the memory estimate).
    pub(crate) fn engine_hash_count(&self) -> usize {
        self.sum_over_slots(|info| info.engine_hashes.lock().len())
    }
}
