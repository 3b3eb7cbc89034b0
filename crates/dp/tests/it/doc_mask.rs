//! `--dp` with document masks: each rank's rows come with their rows of the mask, and
//! `--dp 4` at every stage trains like one device on the same masked batches.
//!
//! Tolerance as in `equivalence.rs` (f32 reduction order only): 1e-5 nats.

use crate::common::*;
use brrr_backend::Result;
use brrr_cpu::CpuBackend;
use brrr_dp::DataParallel;
use brrr_train::{Batch, BatchSource, Batcher, TrainConfig, Trainer};
use std::ops::Range;

/// A document starts at every space, so that most rows hold several.
const EOT: u32 = b' ' as u32;

/// A [`Batcher`] whose batches carry the mask at every [`EOT`], produced row by row.
struct Masked(Batcher);

impl BatchSource for Masked {
    fn next_batch(&mut self) -> Result<Batch> {
        self.0.next_batch().with_document_mask(EOT)
    }
    fn next_rows(&mut self, rows: Range<usize>) -> Result<Batch> {
        self.0.next_rows(rows)?.with_document_mask(EOT)
    }
    fn position(&self) -> String {
        BatchSource::position(&self.0)
    }
    fn set_position(&mut self, position: &str) -> Result<()> {
        self.0.set_position(position)
    }
    fn fingerprint(&self) -> String {
        self.0.fingerprint()
    }
}

fn masked(c: &TrainConfig) -> Box<Masked> {
    Box::new(Masked(*batcher(c)))
}

#[test]
fn masked_dp_matches_one_device_at_every_stage() {
    let c = config(3, 1);
    let b = CpuBackend::new();
    let mut t = Trainer::new(&b, c.clone(), masked(&c), Vec::new()).unwrap();
    let reference: Vec<f32> = (0..c.steps)
        .map(|_| t.step_blocking().unwrap().loss)
        .collect();
    // The mask changes the losses (it is not silently dropped).
    assert!((reference[0] - single(&c)[0]).abs() > 1e-3, "{reference:?}");
    for zero in 0..=3u8 {
        let ranks = brrr_collectives::run_in_process(WORLD, |comm| {
            let b = CpuBackend::new();
            let mut e = DataParallel::new(&b, c.clone(), dp_config(zero), comm, masked(&c))?;
            let mut losses = Vec::new();
            for _ in 0..c.steps {
                losses.push(e.step()?.loss);
            }
            Ok(losses)
        });
        for r in ranks {
            let losses = r.unwrap();
            for (s, (a, b)) in losses.iter().zip(&reference).enumerate() {
                assert!((a - b).abs() <= 1e-5, "zero {zero} step {s}: {a} vs {b}");
            }
        }
    }
}
