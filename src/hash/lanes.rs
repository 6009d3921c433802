//! Chaining several prompts' blocks at once.
//!
//! A chain is serial: each sequence hash needs the one before, so one chain advances at
//! the latency of one xxh3 per block. Chains of different prompts are independent:
//! stepping four of them in lockstep keeps four hashes in flight and takes about half the
//! time per block (`cargo bench --bench replication`: applying decisions one by one, and
//! in batches). Applying a batch of shared decisions chains them this way, a few at a time
//! so that the chains are still in cache when they are recorded.

use super::{LocalBlockHash, SeqChain, SequenceHash};

/// Chains stepped together.
const LANES: usize = 4;

/// A lane: the prompt it chains, and its chain so far.
type Lane = (usize, SeqChain);

/// The sequence hashes of each of `locals` (`compute_seq_hashes` of each) into `out`,
/// one vector per prompt; `out`'s vectors are reused.
pub(crate) fn chain_each_into(locals: &[&[LocalBlockHash]], out: &mut Vec<Vec<SequenceHash>>) {
    out.resize_with(locals.len(), Vec::new);
    for (chain, local) in out.iter_mut().zip(locals) {
        chain.clear();
        chain.reserve(local.len());
    }
    let mut waiting = (0..locals.len()).filter(|&i| !locals[i].is_empty());
    let mut lanes: [Option<Lane>; LANES] = [None; LANES];
    loop {
        for lane in &mut lanes {
            if lane.is_none() {
                *lane = waiting.next().map(|i| (i, SeqChain::default()));
            }
        }
        let left = |&(i, _): &Lane| locals[i].len() - out[i].len();
        let Some(steps) = lanes.iter().flatten().map(left).min() else {
            return;
        };
        if let [Some(a), Some(b), Some(c), Some(d)] = lanes {
            let mut four = [a, b, c, d];
            step_four(&mut four, steps, locals, out);
            lanes = four.map(Some);
        } else {
            for _ in 0..steps {
                for (i, chain) in lanes.iter_mut().flatten() {
                    let next = chain.next(locals[*i][out[*i].len()]);
                    out[*i].push(next);
                }
            }
        }
        for lane in &mut lanes {
            if lane.is_some_and(|(i, _)| out[i].len() == locals[i].len()) {
                *lane = None;
            }
        }
    }
}

/// Advances four lanes (of four different prompts) by `steps` blocks, in lockstep.
#[inline]
fn step_four(
    four: &mut [Lane; LANES],
    steps: usize,
    locals: &[&[LocalBlockHash]],
    out: &mut [Vec<SequenceHash>],
) {
    let mut chains: [Vec<SequenceHash>; LANES] =
        std::array::from_fn(|k| std::mem::take(&mut out[four[k].0]));
    let blocks: [&[LocalBlockHash]; LANES] = std::array::from_fn(|k| {
        let from = chains[k].len();
        &locals[four[k].0][from..from + steps]
    });
    // Indexed by step, then lane: the four chains advance together.
    #[allow(clippy::needless_range_loop)]
    for step in 0..steps {
        for k in 0..LANES {
            let next = four[k].1.next(blocks[k][step]);
            chains[k].push(next);
        }
    }
    for (k, chain) in chains.into_iter().enumerate() {
        out[four[k].0] = chain;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute_seq_hashes;

    #[test]
    fn each_chain_is_the_prompts_own() {
        // Lengths that end at different steps, empty ones, more prompts than lanes.
        let lengths = [5usize, 0, 1, 9, 3, 3, 17, 0, 2, 8, 1, 40, 41, 39, 38, 2];
        let prompts: Vec<Vec<LocalBlockHash>> = lengths
            .iter()
            .enumerate()
            .map(|(p, &n)| {
                (0..n as u64)
                    .map(|b| LocalBlockHash(b * 31 + p as u64))
                    .collect()
            })
            .collect();
        let views: Vec<&[LocalBlockHash]> = prompts.iter().map(Vec::as_slice).collect();
        // Reused buffers that start longer, shorter and dirty.
        let mut out = vec![vec![SequenceHash(1); 3]; 20];
        for take in [views.len(), 3, 0, 11] {
            chain_each_into(&views[..take], &mut out);
            assert_eq!(out.len(), take);
            for (prompt, chain) in prompts.iter().zip(&out) {
                assert_eq!(chain, &compute_seq_hashes(prompt));
            }
        }
    }
}
