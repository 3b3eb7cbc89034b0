//! `--dp` without `--amp` trains bit for bit as it did before mixed precision and
//! per-rank batches came in: the losses of a fixed seed, as f32 bit patterns, recorded
//! from that earlier engine (every rank drawing the whole global batch and keeping its
//! slice).

use crate::common::*;

/// Losses of `config(3, 1)` on `dp_config(zero)`, zero = 0..=3, as `f32::to_bits`.
/// (5.521338, 5.1223145, 4.7657676 nats at every stage.)
const RECORDED: [[u32; 3]; 4] = [[1085320909, 1084484096, 1083736363]; 4];

#[test]
fn f32_losses_are_bitwise_the_recorded_ones() {
    let c = config(3, 1);
    let mut got = Vec::new();
    for zero in 0..=3u8 {
        let ranks = data_parallel(&c, &dp_config(zero));
        let bits: Vec<u32> = ranks[0].0.iter().map(|l| l.to_bits()).collect();
        println!("zero {zero}: {bits:?} = {:?}", ranks[0].0);
        got.push(bits);
    }
    for (zero, bits) in got.iter().enumerate() {
        assert_eq!(bits, &RECORDED[zero], "zero {zero}");
    }
}
