//! ZeRO-3 prefetch: the next block's all-gather runs while a block computes. The losses
//! are the non-prefetched run's bit for bit (the gathered values are the same; only
//! when they arrive changes), at most two blocks' gathered parameters are on the device
//! at once, and the device's peak grows by at most one block's parameters
//! (`Backend::memory_stats`). It grows by exactly one block when the prefetched block
//! has arrived by the time of the peak, by nothing when it has not: the bound is what
//! holds on a busy machine.

use crate::common::*;
use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_dp::{DataParallel, DpConfig, StepReport};
use brrr_nn::Module;
use brrr_train::TrainConfig;

/// Four blocks, so that "two at once" is a real bound.
fn deep(steps: u64, grad_accum: usize) -> TrainConfig {
    let mut c = config(steps, grad_accum);
    c.model.n_layer = 4;
    c
}

fn run(c: &TrainConfig, world: usize, prefetch: bool) -> (Vec<f32>, Vec<StepReport>) {
    let dp = DpConfig {
        world,
        ..dp_config(3)
    };
    run_in_process(world, |comm| {
        let b = CpuBackend::new();
        let mut e = DataParallel::new(&b, c.clone(), dp.clone(), comm, batcher(c))?;
        e.set_prefetch(prefetch);
        let mut losses = Vec::new();
        let mut reports = Vec::new();
        for _ in 0..c.steps {
            losses.push(e.step()?.loss);
            reports.push(e.report().clone());
        }
        Ok((losses, reports))
    })
    .into_iter()
    .map(|r| r.unwrap())
    .next()
    .unwrap()
}

#[test]
fn prefetch_is_bitwise_and_holds_at_most_two_blocks() {
    for (world, accum) in [(2usize, 1usize), (4, 2)] {
        let c = deep(3, accum);
        let (on, on_reports) = run(&c, world, true);
        let (off, off_reports) = run(&c, world, false);
        let at = format!("--dp {world} --zero 3, grad accumulation {accum}");
        assert_eq!(on, off, "{at}: prefetching changed the losses");
        assert!(on[0] != on[2], "{at}: the run learned nothing");
        // One block's parameters (all blocks are the same size), f32.
        let block_bytes =
            4 * (c.model.num_params() - deep_outside_blocks(&c)) as u64 / c.model.n_layer as u64;
        for (s, (a, b)) in on_reports.iter().zip(&off_reports).enumerate() {
            assert_eq!(a.max_blocks_gathered, 2, "{at} step {s}: prefetching");
            assert_eq!(b.max_blocks_gathered, 1, "{at} step {s}: without");
            assert!(a.gather_seconds > 0.0 && b.gather_seconds > 0.0);
            let extra = a.peak_bytes as i64 - b.peak_bytes as i64;
            assert!(
                (0..=block_bytes as i64).contains(&extra),
                "{at} step {s}: prefetching changed the peak by {extra} B, outside 0 to one \
                 block's {block_bytes} B"
            );
            println!(
                "{at} step {s}: peak {} B with prefetch, {} B without (+{extra} B; one block \
                 {block_bytes} B); gathers hidden {:.0}% vs {:.0}%",
                a.peak_bytes,
                b.peak_bytes,
                100.0 * a.gather_hidden_fraction(),
                100.0 * b.gather_hidden_fraction()
            );
        }
    }
}

/// Parameters outside the blocks: wte, wpe and ln_f.
fn deep_outside_blocks(c: &TrainConfig) -> usize {
    let m = &c.model;
    m.vocab_size * m.n_embd + m.block_size * m.n_embd + 2 * m.n_embd
}

/// A gathered bucket is one flat buffer on the device, each parameter a view into it at
/// its offset in the bucket (one upload per bucket; GEMMs read the views in place).
#[test]
fn a_gathered_bucket_is_one_buffer_with_a_view_per_parameter() {
    let c = deep(1, 1);
    let dp = DpConfig {
        world: 2,
        ..dp_config(3)
    };
    let checked = run_in_process(2, |comm| {
        let b = CpuBackend::new();
        let mut e = DataParallel::new(&b, c.clone(), dp.clone(), comm, batcher(&c))?;
        e.step()?;
        e.gather_all()?;
        let params = e.model().params();
        let mut views = 0;
        for bucket in e.buckets() {
            for i in bucket.params.clone() {
                let (slot, value) = (&e.layout().params[i], &params[i].value);
                assert_eq!(value.dims(), slot.dims.as_slice(), "{}", slot.name);
                let offset = slot.offset - bucket.elems.start;
                assert_eq!(
                    value.layout().offset,
                    offset,
                    "{}: its offset in the bucket",
                    slot.name
                );
                views += usize::from(offset > 0);
            }
        }
        Ok(views)
    });
    for views in checked {
        assert!(
            views.unwrap() > 0,
            "some parameter starts part-way into its bucket"
        );
    }
}
