//! The collectives of a real forward and backward, counted by the tensor-parallel
//! communicator (`Communicator::stats`), against `brrr_tp::theory`: per block two
//! all-reduces forward and two backward, or their reduce-scatter/all-gather pairs
//! under sequence parallelism.

use brrr_backend::DType;
use brrr_collectives::{CommStats, ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_nn::{Gpt, GptConfig, MicroBatch, Module, Tensor};
use brrr_tp::theory::{PassComm, block_pass, model_passes};
use brrr_tp::{TpGpt, shard::split_dim};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const TP: usize = 2;
const B: usize = 2;
const T: usize = 8;

fn model() -> GptConfig {
    GptConfig {
        vocab_size: 256,
        block_size: 16,
        n_layer: 3,
        n_head: 4,
        n_embd: 32,
    }
}

fn measured(s: &CommStats) -> PassComm {
    let mut p = PassComm::default();
    for (name, c) in [
        ("all-reduce", &mut p.all_reduce),
        ("reduce-scatter", &mut p.reduce_scatter),
        ("all-gather", &mut p.all_gather),
    ] {
        c.calls = s.op(name).calls;
        c.elements = s.op(name).elements;
    }
    p
}

fn print(what: &str, got: &PassComm, sent: u64) {
    println!(
        "{what:<28} all-reduce {:>2} × ({:>6} el)  reduce-scatter {:>2} ({:>6} el)  all-gather {:>2} ({:>6} el)  sent/rank {sent}",
        got.all_reduce.calls,
        got.all_reduce.elements,
        got.reduce_scatter.calls,
        got.reduce_scatter.elements,
        got.all_gather.calls,
        got.all_gather.elements,
    );
}

/// Forward then backward of one block alone, and of the whole model, each pass's stats
/// compared with the theory.
fn check(sp: bool) {
    let cfg = model();
    let results = run_in_process(TP, |world| {
        let be = CpuBackend::new();
        let groups = ParallelGroups::new(
            world,
            ParallelLayout {
                dp: 1,
                tp: TP,
                pp: 1,
            },
        )?;
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let gpt = Gpt::new(&be, cfg.clone(), DType::F32, &mut rng)?;
        let comm = Arc::new(groups.tp);
        let mut tp = TpGpt::from_gpt(&gpt, comm.clone(), sp)?;
        let label = if sp { "tp 2 + sp" } else { "tp 2" };
        let mb = MicroBatch(0);

        // One block: the input is what the block sees, the full or the sharded sequence.
        let x = Tensor::randn(&be, [B, T, cfg.n_embd], DType::F32, 0.0, 1.0, &mut rng)?;
        let x = if sp {
            split_dim(&x, 1, comm.rank(), TP)?
        } else {
            x
        };
        let theory_f = block_pass(B, T, cfg.n_embd, sp, false);
        let theory_b = block_pass(B, T, cfg.n_embd, sp, true);
        comm.reset_stats();
        let y = tp.h[0].forward(mb, &x)?;
        let fwd = measured(&comm.stats());
        let sent_f = comm.stats().elements_sent();
        comm.reset_stats();
        tp.h[0].backward(mb, &y)?;
        let bwd = measured(&comm.stats());
        let sent_b = comm.stats().elements_sent();
        if comm.rank() == 0 {
            print(&format!("{label}: block forward"), &fwd, sent_f);
            print(&format!("{label}: block backward"), &bwd, sent_b);
        }
        assert_eq!(fwd, theory_f, "{label}: one block's forward");
        assert_eq!(bwd, theory_b, "{label}: one block's backward");
        assert_eq!(sent_f, theory_f.ring_elements_sent(TP as u64));
        assert_eq!(sent_b, theory_b.ring_elements_sent(TP as u64));

        // The whole model.
        let ids: Vec<u32> = (0..(B * T) as u32).map(|i| (i * 37) % 256).collect();
        let targets: Vec<u32> = ids.iter().map(|i| (i + 1) % 256).collect();
        let (want_f, want_b) = model_passes(&cfg, B, T, sp);
        comm.reset_stats();
        tp.forward_loss_mb(mb, &ids, &targets, (B, T))?;
        let fwd = measured(&comm.stats());
        let sent_f = comm.stats().elements_sent();
        comm.reset_stats();
        tp.backward_mb(mb, 1.0 / (B * T) as f32)?;
        let bwd = measured(&comm.stats());
        let sent_b = comm.stats().elements_sent();
        if comm.rank() == 0 {
            print(&format!("{label}: model forward"), &fwd, sent_f);
            print(&format!("{label}: model backward"), &bwd, sent_b);
        }
        assert_eq!(fwd, want_f, "{label}: the model's forward");
        assert_eq!(bwd, want_b, "{label}: the model's backward");
        tp.clear_saved();
        Ok(())
    });
    for (rank, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

#[test]
fn two_all_reduces_per_block_and_pass() {
    check(false);
}

#[test]
fn sequence_parallel_turns_each_into_reduce_scatter_and_all_gather() {
    check(true);
}
