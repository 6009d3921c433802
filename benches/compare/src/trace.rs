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
/// A line that is not JSON, lacks `hash_ids` or `input_length`, or has a hash id that is
/// not a whole number >= 0 is an error naming the file and the line.
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
        let at = |why: String| format!("{}:{}: {why}", path.display(), n + 1);
        out.push(request(line).map_err(at)?);
    }
    Ok(out)
}

/// The tokens of one non-blank line.
fn request(line: &str) -> Result<Vec<u32>, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let ids = v["hash_ids"]
        .as_array()
        .ok_or("no hash_ids (an array of ids)")?
        .iter()
        .enumerate()
        .map(|(k, x)| {
            x.as_u64()
                .ok_or_else(|| format!("hash_ids[{k}] is {x}, not an id (a whole number >= 0)"))
        })
        .collect::<Result<Vec<u64>, String>>()?;
    let len = v["input_length"]
        .as_u64()
        .ok_or("no input_length (a whole number >= 0)")?;
    Ok(tokens_for(&ids, usize::try_from(len).unwrap_or(usize::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_lines(name: &str, lines: &[&str]) -> Result<Vec<Vec<u32>>, String> {
        let path = std::env::temp_dir().join(format!(
            "approx-kv-compare-trace-{}-{name}.jsonl",
            std::process::id()
        ));
        std::fs::write(&path, lines.join("\n")).unwrap();
        let got = load(&path, usize::MAX);
        std::fs::remove_file(&path).unwrap();
        got
    }

    #[test]
    fn ids_that_are_not_whole_numbers_are_errors_naming_the_line() {
        let good = r#"{"input_length": 600, "hash_ids": [1, 2]}"#;
        let reqs = load_lines("good", &[good, "", good]).unwrap();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].len(), 600);
        for (bad, why) in [
            (
                r#"{"input_length": 600, "hash_ids": [1, 2.5]}"#,
                "hash_ids[1] is 2.5",
            ),
            (
                r#"{"input_length": 600, "hash_ids": [-1, 2]}"#,
                "hash_ids[0] is -1",
            ),
            (
                r#"{"input_length": 600, "hash_ids": ["a"]}"#,
                "hash_ids[0] is \"a\"",
            ),
            (r#"{"input_length": 600, "hash_ids": 3}"#, "no hash_ids"),
            (
                r#"{"input_length": -5, "hash_ids": [1]}"#,
                "no input_length",
            ),
            ("{", "EOF while parsing"),
        ] {
            let e = load_lines("bad", &[good, "", bad]).unwrap_err();
            assert!(
                e.contains("-bad.jsonl:3: ") && e.contains(why),
                "{bad}: {e}"
            );
        }
    }
}
