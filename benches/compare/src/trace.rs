//! Loading a Mooncake trace and turning its `hash_ids` into tokens, deterministically.
//!
//! Each trace id stands for 512 tokens; token `p` of the block with id `h` is
//! `splitmix64(h * 512 + p)` truncated to 32 bits, so equal ids give equal tokens and
//! different ids (almost surely) different ones. A request has `input_length` tokens
//! (capped at `512 * hash_ids.len()`), so at block size 64 each full trace block becomes 8
//! index blocks and a partial last one fewer.

use std::path::Path;

use approx_kv_rng::splitmix64;

/// Tokens per trace block.
pub const TRACE_BLOCK: usize = 512;

/// The tokens of one request.
pub fn tokens_for(hash_ids: &[u64], input_length: usize) -> Vec<u32> {
    let len = input_length.min(hash_ids.len() * TRACE_BLOCK);
    (0..len)
        .map(|t| {
            let id = hash_ids[t / TRACE_BLOCK];
            splitmix64(id.wrapping_mul(TRACE_BLOCK as u64) + (t % TRACE_BLOCK) as u64) as u32
        })
        .collect()
}

/// The requests of a JSONL trace, in order, as token vectors (at most `limit` of them).
pub fn load(path: &Path, limit: usize) -> Result<Vec<Vec<u32>>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read trace '{}': {e}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if out.len() >= limit {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        let ids: Vec<u64> = v["hash_ids"]
            .as_array()
            .ok_or_else(|| format!("line {}: no hash_ids", n + 1))?
            .iter()
            .filter_map(|x| x.as_u64())
            .collect();
        let len = v["input_length"]
            .as_u64()
            .ok_or_else(|| format!("line {}: no input_length", n + 1))?;
        out.push(tokens_for(&ids, len as usize));
    }
    Ok(out)
}
