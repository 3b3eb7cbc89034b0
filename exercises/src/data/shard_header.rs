//! # Read a token shard's header
//!
//! llm.c's shards start with 256 little-endian `i32`s: `header[0]` is the magic number
//! (20240520 for `u16` tokens, 20240801 for `u32` tokens), `header[1]` the version (1 for
//! the `u16` magic, 7 for the `u32` one), `header[2]` the number of tokens, and the
//! other 253 words are zero. The tokens follow, and nothing after them.
//!
//! Given the first bytes of a file and the file's total length, return
//! `Ok((bytes_per_token, tokens))` for a valid shard, and an `Err` (any message) for
//! anything else: too short for a header, an unknown magic, a wrong version, a negative
//! count, a non-zero reserved word, or a file length that is not exactly
//! `1024 + tokens · bytes_per_token`. Never panic. Checked against
//! `brrr_data::shard::parse_header` on valid headers and thousands of damaged ones.
//!
//! About 25 lines.
//!
//! ## Hint
//!
//! Check the length first, read the three words with `i32::from_le_bytes`, then check
//! the magic and version pair, the count's sign, the reserved words and the file
//! length, returning an `Err` at the first problem. Checked arithmetic (`checked_mul`)
//! keeps a huge count from overflowing.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;

/// YOUR CODE: `(bytes per token, token count)` of a valid shard header.
#[cfg(not(feature = "solutions"))]
pub fn read_header(bytes: &[u8], file_len: u64) -> Result<(usize, usize), String> {
    let _ = (bytes, file_len);
    Err(crate::check::not_done("read_header"))
}

#[cfg(feature = "solutions")]
pub use solution::read_header;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/data/shard_header.rs"]
pub mod solution;

/// Valid headers of both widths, then random damage: the same verdict as brrr-data.
pub fn check() -> Outcome {
    let (mut g, seed) = rng();
    with_seed(run(&mut g), seed)
}

fn run(g: &mut impl Rng) -> Outcome {
    use brrr_data::shard::{ShardHeader, TokenWidth, parse_header};
    for case in 0..3000 {
        let width = if g.random() {
            TokenWidth::U16
        } else {
            TokenWidth::U32
        };
        let tokens = g.random_range(0..100_000usize);
        let header = ShardHeader { width, tokens };
        let mut bytes = header.to_bytes().map_err(|e| e.to_string())?.to_vec();
        let mut len = header.file_len().unwrap_or(0);
        if case % 3 != 0 {
            match g.random_range(0..5) {
                0 => bytes.truncate(g.random_range(0..1024)),
                1 => {
                    let w = g.random_range(0..4usize);
                    let v: i32 = if g.random() {
                        g.random()
                    } else {
                        g.random_range(-2..9)
                    };
                    bytes[4 * w..4 * w + 4].copy_from_slice(&v.to_le_bytes());
                }
                2 => len = len.wrapping_add(g.random_range(1..5)),
                3 => len = len.saturating_sub(g.random_range(1..5)),
                _ => {
                    let at = g.random_range(12..1024);
                    bytes[at] = g.random_range(1..=255);
                }
            }
        }
        let want = parse_header(std::path::Path::new("x.bin"), &bytes, len)
            .map(|h| (h.width.bytes(), h.tokens))
            .map_err(|e| e.to_string());
        let got = read_header(&bytes, len);
        match (&got, &want) {
            (Ok(a), Ok(b)) if a == b => {}
            (Err(_), Err(_)) => {}
            _ => {
                return Err(format!(
                    "header words {:?}.., file length {len}: got {got:?}, expected {want:?}",
                    bytes
                        .chunks_exact(4)
                        .take(3)
                        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect::<Vec<_>>()
                ));
            }
        }
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
