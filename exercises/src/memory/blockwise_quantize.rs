//! # 8-bit block-wise quantisation with the dynamic map
//!
//! An 8-bit optimizer (Dettmers et al. 2022, "8-bit Optimizers via Block-wise
//! Quantization") keeps each of AdamW's moments as one byte per value plus one f32 per
//! block. Cut `x` into blocks of `block` consecutive values (the last block is shorter
//! when `block` does not divide `x.len()`). For each block:
//!
//! - its `absmax` is the largest `|x|` in the block, kept as it is;
//! - each value's code is the index `k` of the 256-value `map` whose value
//!   `map[k] · absmax` is nearest to `x` (the lower index on a tie). A block of zeros has
//!   `absmax = 0`, and any code reads back as 0 there (brrr picks them against
//!   `absmax = 1`: the code of 0);
//! - a code reads back as `map[code] · absmax`.
//!
//! `map` is sorted ascending and holds `0` and `1`; brrr's is the *dynamic* map
//! (`brrr_backend::quant8::dynamic_map`), whose codes are spread over seven decades,
//! `10⁻⁶ … 1`, because the second moment spans decades inside one block.
//!
//! Write `quantize_blockwise` and `dequantize_blockwise`. Checked against
//! `brrr_backend::quant8::encode` and `decode` on random data with outliers (signed data
//! with the signed map, non-negative data with the unsigned one). Then the lesson of
//! blocks: on data whose scale changes by decades from block to block, with one outlier
//! in each, the mean error per block must stay under 5% and far below the error with
//! one absmax for the whole tensor (your function with `block = x.len()`).
//!
//! About 15 lines.
//!
//! ## Hint
//!
//! `x.chunks(block)` gives the blocks. Searching all 256 codes for the nearest is fine
//! here (`Iterator::min_by` keeps the first of equal minima, the lower code); brrr's
//! kernels binary-search the sorted products `map[k] · absmax` instead. Compare
//! products `map[k] · absmax` with `x` rather than `x / absmax` with `map[k]`: the two
//! round differently at a near tie.

use crate::check::{Outcome, every, rng, with_seed};
use brrr_backend::quant8::{Q8_BLOCK, decode, dynamic_map, encode};
use rand::Rng;

/// A quantised tensor: one code per value, one absmax per block.
#[derive(Debug, Clone, PartialEq)]
pub struct Blockwise {
    /// One code per value of `x`, in order.
    pub codes: Vec<u8>,
    /// One absmax per block of `block` values, in order.
    pub absmax: Vec<f32>,
}

/// YOUR CODE: the codes and per-block absmax of `x`.
#[cfg(not(feature = "solutions"))]
pub fn quantize_blockwise(map: &[f32; 256], x: &[f32], block: usize) -> Blockwise {
    // One absmax for the whole tensor, and every value rounded to the map's 0.
    let _ = block;
    let absmax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let zero = map.iter().position(|m| *m == 0.0).unwrap_or(0) as u8;
    Blockwise {
        codes: vec![zero; x.len()],
        absmax: vec![absmax],
    }
}

/// YOUR CODE: the values `q` reads back as.
#[cfg(not(feature = "solutions"))]
pub fn dequantize_blockwise(map: &[f32; 256], q: &Blockwise, block: usize) -> Vec<f32> {
    let _ = (map, block);
    vec![0.0; q.codes.len()]
}

#[cfg(feature = "solutions")]
pub use solution::{dequantize_blockwise, quantize_blockwise};

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/memory/blockwise_quantize.rs"]
pub mod solution;

/// Against brrr-backend's `encode`/`decode` on random data, then blocks against one
/// absmax for the whole tensor.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

/// brrr's quantisation of `x`: what `Backend::adamw_8bit` stores for a moment.
fn reference(map: &[f32; 256], x: &[f32], block: usize) -> Blockwise {
    let mut out = Blockwise {
        codes: Vec::with_capacity(x.len()),
        absmax: Vec::new(),
    };
    for b in x.chunks(block) {
        let a = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        out.absmax.push(a);
        out.codes.extend(b.iter().map(|v| encode(map, *v, a)));
    }
    out
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for round in 0..12 {
        let signed = round % 2 == 0;
        let map = dynamic_map(signed);
        let block = [64, 100, 256, Q8_BLOCK][rng.random_range(0..4)];
        let n = rng.random_range(block..6 * block);
        let scale = 10f32.powf(rng.random_range(-8.0..0.0));
        let mut x: Vec<f32> = (0..n)
            .map(|_| {
                let v = scale * rng.random_range(-1.0f32..1.0);
                if signed { v } else { v * v / scale }
            })
            .collect();
        // A few outliers, and now and then a block of zeros.
        for _ in 0..3 {
            let i = rng.random_range(0..n);
            x[i] *= 1000.0;
        }
        if rng.random_bool(0.5) {
            let b = rng.random_range(0..n.div_ceil(block));
            let end = ((b + 1) * block).min(n);
            x[b * block..end].fill(0.0);
        }
        let what = format!(
            "{n} {} values, blocks of {block}",
            if signed { "signed" } else { "non-negative" }
        );
        let want = reference(&map, &x, block);
        let got = quantize_blockwise(&map, &x, block);
        every([
            same_quantization(&what, &map, (&x, block), &got, &want),
            same_values(&what, &map, &want, block),
        ])?;
    }
    blocks_beat_one_absmax(rng)
}

/// `got` against brrr's codes: the same absmax per block and, per value, brrr's code or
/// one exactly as near (a different rounding of a tie).
fn same_quantization(
    what: &str,
    map: &[f32; 256],
    (x, block): (&[f32], usize),
    got: &Blockwise,
    want: &Blockwise,
) -> Outcome {
    if got.absmax.len() != want.absmax.len() {
        return Err(format!(
            "{what}: {} absmax values, expected {} (one per block)",
            got.absmax.len(),
            want.absmax.len()
        ));
    }
    if let Some(b) = (0..want.absmax.len()).find(|&b| got.absmax[b] != want.absmax[b]) {
        return Err(format!(
            "{what}: block {b}'s absmax is {}, expected {} (its largest |x|)",
            got.absmax[b], want.absmax[b]
        ));
    }
    if got.codes.len() != x.len() {
        return Err(format!(
            "{what}: {} codes for {} values",
            got.codes.len(),
            x.len()
        ));
    }
    for (i, &v) in x.iter().enumerate() {
        let a = want.absmax[i / block];
        let (g, w) = (got.codes[i], want.codes[i]);
        if g == w {
            continue;
        }
        let (dg, dw) = ((decode(map, g, a) - v).abs(), (decode(map, w, a) - v).abs());
        if dg > dw + 1e-6 * a {
            return Err(format!(
                "{what}: value {i} ({v:e}, absmax {a:e}) got code {g} ({:e}); code {w} \
                 ({:e}) is nearer",
                decode(map, g, a),
                decode(map, w, a)
            ));
        }
    }
    Ok(())
}

/// `dequantize_blockwise` of brrr's own codes reads back what `decode` does.
fn same_values(what: &str, map: &[f32; 256], q: &Blockwise, block: usize) -> Outcome {
    let got = dequantize_blockwise(map, q, block);
    if got.len() != q.codes.len() {
        return Err(format!(
            "{what}: dequantised {} values from {} codes",
            got.len(),
            q.codes.len()
        ));
    }
    for (i, (&c, &g)) in q.codes.iter().zip(&got).enumerate() {
        let want = decode(map, c, q.absmax[i / block]);
        if g != want {
            return Err(format!(
                "{what}: code {c} of value {i} reads back as {g:e}, expected {want:e} \
                 (map[code] · its block's absmax)"
            ));
        }
    }
    Ok(())
}

/// Data whose scale changes by decades from block to block (as a moment's does from one
/// row of a weight to the next), with one outlier per block: a block's own absmax keeps
/// each block's grid fitted to its values, where one absmax for the whole tensor lets
/// the largest outlier coarsen every value's, and the smallest blocks round to zero.
fn blocks_beat_one_absmax(rng: &mut impl Rng) -> Outcome {
    let map = dynamic_map(true);
    let block = 256;
    let blocks = rng.random_range(16..40);
    let mut x = Vec::with_capacity(blocks * block);
    for _ in 0..blocks {
        let scale = 10f32.powf(rng.random_range(-8.0..0.0));
        let start = x.len();
        x.extend((0..block).map(|_| scale * rng.random_range(-1.0f32..1.0)));
        let sign = if rng.random_bool(0.5) { 1.0 } else { -1.0 };
        x[start + rng.random_range(0..block)] =
            sign * scale * 10f32.powf(rng.random_range(1.0..2.0));
    }
    // The mean over blocks of each block's relative error: every block counts, however
    // small its values.
    let error = |q: usize| -> f64 {
        let back = dequantize_blockwise(&map, &quantize_blockwise(&map, &x, q), q);
        if back.len() != x.len() {
            return f64::INFINITY;
        }
        let per_block = x.chunks(block).zip(back.chunks(block)).map(|(a, b)| {
            let (mut err, mut norm) = (0.0f64, 0.0f64);
            for (a, b) in a.iter().zip(b) {
                err += f64::from(a - b).powi(2);
                norm += f64::from(*a).powi(2);
            }
            (err / norm).sqrt()
        });
        per_block.sum::<f64>() / blocks as f64
    };
    let n = x.len();
    let (blocked, whole) = (error(block), error(n));
    if !(blocked < 0.05 && 4.0 * blocked < whole) {
        return Err(format!(
            "{blocks} blocks of {block} values, each of its own scale (1e-8 to 1) with one \
             outlier: the mean relative error per block is {blocked:.3} with an absmax per \
             block and {whole:.3} with one absmax for the whole tensor (block = {n}); blocks \
             should keep it under 0.05 and at least 4 times below one absmax's"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "an exercise: solve it, then `cargo run -p brrr-exercises`"
    )]
    fn check() {
        if let Err(e) = super::check() {
            panic!("{e}");
        }
    }
}
