//! 8-bit optimizer states: block-wise quantised moments (Dettmers, Lewis, Shleifer &
//! Zettlemoyer 2022, "8-bit Optimizers via Block-wise Quantization").
//!
//! AdamW keeps two f32 moments per parameter: 8 bytes, twice the weights themselves. The
//! 8-bit optimizer stores each moment as one byte, a *code*, plus one f32 per block of
//! [`Q8_BLOCK`] values: the block's largest magnitude (`absmax`). A value is
//! `map[code] * absmax`. Two choices make this work where a plain linear int8 would not:
//!
//! - **Blocks.** One outlier only coarsens its own block's grid, not the whole tensor's,
//!   and each block is normalised independently (one GPU workgroup each, no global max).
//! - **A dynamic map** ([`dynamic_map`], Dettmers 2016's "dynamic tree quantization"):
//!   the 256 code values are spread over seven decades, `10⁻⁶ … 1`, with more codes in
//!   the upper decades. The second moment `v` spans many orders of magnitude inside one
//!   block; a linear grid would round most of it to zero, and `m̂/√v̂` would blow up.
//!
//! The update itself runs in f32: a block's codes are decoded, the moments updated
//! exactly as [`Backend::adamw`](crate::Backend::adamw) updates them, the parameter
//! moved with the *unquantised* new moments, and only then are the moments encoded again
//! with the block's new absmax ([`Backend::adamw_8bit`](crate::Backend::adamw_8bit)).
//! Encoding picks the nearest code ([`encode`]), deterministic where bitsandbytes may
//! round stochastically.

/// Values per quantisation block: one absmax each (bitsandbytes' block-wise optimizers
/// use 2,048; one GPU workgroup of 256 threads handles 8 values per thread).
pub const Q8_BLOCK: usize = 2048;

/// Codes per `u32` word of a codes buffer: element `i`'s code is byte `i % 4` (bits
/// `8·(i%4) ..`) of word `i / 4`. Packed because WGSL storage has no bytes.
pub const CODES_PER_WORD: usize = 4;

/// The 256 values of the dynamic quantisation map, sorted ascending.
///
/// `signed` (for the first moment): for each decade `10^(e-6)`, `e = 0..7`, `2^e` values
/// (the midpoints of `2^e` equal steps between `0.1` and `1`, times the decade), with
/// both signs, plus `0` and `1`: 254 + 2 = 256. Unsigned (for the second moment, never
/// negative): the sign bit becomes one more fraction bit, `2^(e+1)` values per decade.
/// Computed in f64, rounded once to f32.
pub fn dynamic_map(signed: bool) -> [f32; 256] {
    let mut values = vec![0.0f64, 1.0];
    for e in 0..7u32 {
        let steps = if signed { 1usize << e } else { 2usize << e };
        let decade = 10f64.powi(e as i32 - 6);
        for s in 0..steps {
            let lo = 0.1 + 0.9 * s as f64 / steps as f64;
            let hi = 0.1 + 0.9 * (s + 1) as f64 / steps as f64;
            let mid = decade * (lo + hi) / 2.0;
            values.push(mid);
            if signed {
                values.push(-mid);
            }
        }
    }
    values.sort_by(f64::total_cmp);
    let mut map = [0.0f32; 256];
    for (m, v) in map.iter_mut().zip(&values) {
        *m = *v as f32;
    }
    map
}

/// The code of `x` in a block whose absmax is `absmax`: the index `k` minimising
/// `|map[k]·absmax − x|` (the lower index on a tie). Every backend computes it the same
/// way: products `map[k]·absmax` (one rounding each, exact in WGSL too, where a division
/// is not) compared with `x` by an eight-step binary search for the first product not
/// below `x`, then that entry against the one before it. `absmax = 0` (an all-zero
/// block) encodes with `absmax = 1`.
pub fn encode(map: &[f32; 256], x: f32, absmax: f32) -> u8 {
    let a = if absmax > 0.0 { absmax } else { 1.0 };
    let mut k = 0usize;
    let mut step = 128usize;
    while step > 0 {
        if map[k + step - 1] * a < x {
            k += step;
        }
        step /= 2;
    }
    let k = k.min(255);
    if k > 0 && x - map[k - 1] * a <= map[k] * a - x {
        return (k - 1) as u8;
    }
    k as u8
}

/// The value code `c` stands for in a block with absmax `absmax`.
pub fn decode(map: &[f32; 256], c: u8, absmax: f32) -> f32 {
    map[c as usize] * absmax
}

/// `u32` words a codes buffer needs for `n` values.
pub fn code_words(n: usize) -> usize {
    n.div_ceil(CODES_PER_WORD)
}

/// Blocks (absmax values) for `n` values.
pub fn blocks(n: usize) -> usize {
    n.div_ceil(Q8_BLOCK)
}

/// Both maps in one buffer, as [`QuantizedMoments::maps`] holds them: the first
/// moment's ([`dynamic_map`]`(true)`), then the second's (`dynamic_map(false)`).
pub fn adam_maps() -> Vec<f32> {
    let mut maps = dynamic_map(true).to_vec();
    maps.extend(dynamic_map(false));
    maps
}

/// The state buffers of [`Backend::adamw_8bit`](crate::Backend::adamw_8bit) for `n`
/// values (one parameter, or one segment of a flat one). Each buffer holds the first
/// moment's part, then the second's (three bindings instead of six: a WGSL kernel may
/// bind only eight storage buffers in a browser).
pub struct QuantizedMoments<'a, Buf> {
    /// `U32`, `2 ·`[`code_words`]`(n)` words: `m`'s codes, then `v`'s, four to a word.
    pub codes: &'a mut Buf,
    /// `F32`, `2 ·`[`blocks`]`(n)` values: `m`'s absmax per block, then `v`'s.
    pub absmax: &'a mut Buf,
    /// `F32`, 512 values, each half sorted ascending: [`adam_maps`], uploaded once and
    /// shared by every parameter.
    pub maps: &'a Buf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_maps_have_256_sorted_distinct_values_with_0_and_1() {
        for signed in [true, false] {
            let map = dynamic_map(signed);
            assert!(map.windows(2).all(|w| w[0] < w[1]), "signed={signed}");
            assert!(map.contains(&0.0) && map.contains(&1.0));
            assert_eq!(map[0] < 0.0, signed);
            // The smallest non-zero magnitude is in the 1e-6 decade.
            let tiny = map
                .iter()
                .filter(|v| **v > 0.0)
                .fold(1.0f32, |a, b| a.min(*b));
            assert!((1e-7..1e-6).contains(&tiny), "{tiny}");
        }
    }

    #[test]
    fn encode_picks_the_nearest_code() {
        let map = dynamic_map(true);
        let a = 3.0f32;
        for i in 0..2000 {
            let x = -a + 2.0 * a * i as f32 / 1999.0;
            let c = encode(&map, x, a);
            let best = (0..256)
                .min_by(|&i, &j| {
                    let (di, dj) = ((map[i] * a - x).abs(), (map[j] * a - x).abs());
                    di.total_cmp(&dj).then(i.cmp(&j))
                })
                .unwrap();
            let (dc, db) = ((decode(&map, c, a) - x).abs(), (map[best] * a - x).abs());
            assert!(dc <= db, "x={x}: code {c} ({dc}) vs best {best} ({db})");
        }
        let zero = map.iter().position(|v| *v == 0.0).unwrap() as u8;
        assert_eq!(encode(&map, 0.0, 0.0), zero);
        assert_eq!(encode(&map, a, a), 255);
    }

    #[test]
    fn small_values_keep_their_relative_precision() {
        // What a linear grid loses: a value 1e-4 of its block's absmax.
        let map = dynamic_map(false);
        for x in [1e-4f32, 3e-3, 0.05, 0.7] {
            let y = decode(&map, encode(&map, x, 1.0), 1.0);
            assert!((y - x).abs() / x < 0.1, "{x} -> {y}");
        }
    }
}
