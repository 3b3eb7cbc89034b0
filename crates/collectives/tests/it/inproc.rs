//! Every collective and algorithm against a reference reduction on random data, for
//! world sizes 1..8 and lengths that do not divide by the world size, in-process.

use brrr_collectives::{
    Algorithm, CollError, Collective, Communicator, ParallelGroups, ParallelLayout, ReduceOp,
    Simulation, chunk_range, plan, reference_reduce, run_in_process, run_in_process_with_timeout,
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LENS: [usize; 6] = [0, 1, 5, 7, 13, 100];

fn inputs(n: usize, len: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect())
        .collect()
}

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

#[test]
fn all_reduce_matches_the_reference_for_every_algorithm_op_and_world_size() {
    for n in 1..=8 {
        for &len in &LENS {
            let data = inputs(n, len, (n * 1000 + len) as u64);
            for alg in Collective::AllReduce.algorithms() {
                for op in ReduceOp::ALL {
                    let want = reference_reduce(&data, op);
                    let got = run_in_process(n, |c| {
                        let mut b = data[c.rank()].clone();
                        c.all_reduce_with(&mut b, op, alg, 0)?;
                        Ok(b)
                    });
                    for (r, g) in got.into_iter().enumerate() {
                        close(
                            &g.unwrap(),
                            &want,
                            &format!("{} {} n={n} len={len} rank {r}", alg.name(), op.name()),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_scatter_gives_each_rank_its_chunk_of_the_reference() {
    for n in 1..=8 {
        for &len in &LENS {
            let data = inputs(n, len, (n * 77 + len) as u64);
            for alg in Collective::ReduceScatter.algorithms() {
                for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max] {
                    let want = reference_reduce(&data, op);
                    let got =
                        run_in_process(n, |c| c.reduce_scatter_with(&data[c.rank()], op, alg));
                    for (r, g) in got.into_iter().enumerate() {
                        close(
                            &g.unwrap(),
                            &want[chunk_range(len, n, r)],
                            &format!("{} n={n} len={len} rank {r}", alg.name()),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn all_gather_concatenates_every_rank_in_order() {
    for n in 1..=8 {
        for &k in &[0, 1, 3, 10] {
            let data = inputs(n, k, (n * 31 + k) as u64);
            let want: Vec<f32> = data.concat();
            for alg in Collective::AllGather.algorithms() {
                let got = run_in_process(n, |c| c.all_gather_with(&data[c.rank()], alg));
                for g in got {
                    assert_eq!(g.unwrap(), want, "{} n={n} k={k}", alg.name());
                }
            }
        }
    }
}

#[test]
fn broadcast_copies_the_root_from_every_root() {
    for n in 1..=8 {
        for &len in &LENS {
            let data = inputs(n, len, (n * 13 + len) as u64);
            for alg in Collective::Broadcast.algorithms() {
                for root in 0..n {
                    let got = run_in_process(n, |c| {
                        let mut b = data[c.rank()].clone();
                        c.broadcast_with(&mut b, root, alg)?;
                        Ok(b)
                    });
                    for g in got {
                        assert_eq!(
                            g.unwrap(),
                            data[root],
                            "{} n={n} len={len} root={root}",
                            alg.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn all_to_all_transposes_blocks() {
    for n in 1..=8 {
        for &k in &[0, 1, 3] {
            let data = inputs(n, n * k, (n * 7 + k) as u64);
            for alg in Collective::AllToAll.algorithms() {
                let got = run_in_process(n, |c| c.all_to_all_with(&data[c.rank()], alg));
                for (r, g) in got.into_iter().enumerate() {
                    let want: Vec<f32> = (0..n)
                        .flat_map(|i| data[i][r * k..(r + 1) * k].to_vec())
                        .collect();
                    assert_eq!(g.unwrap(), want, "{} n={n} k={k} rank {r}", alg.name());
                }
            }
        }
    }
}

#[test]
fn the_step_by_step_simulation_agrees_with_the_reference() {
    for n in 1..=8 {
        let len = 11;
        let data = inputs(n, len, n as u64);
        for alg in Collective::AllReduce.algorithms() {
            let s = plan(Collective::AllReduce, alg, n, len, 0).unwrap();
            let out = Simulation::new(s, data.clone(), ReduceOp::Max)
                .unwrap()
                .run();
            for b in out {
                assert_eq!(
                    b,
                    reference_reduce(&data, ReduceOp::Max),
                    "{} n={n}",
                    alg.name()
                );
            }
        }
    }
}

#[test]
fn step_counts_follow_the_cost_model() {
    let steps = |alg, n| {
        plan(Collective::AllReduce, alg, n, 64, 0)
            .unwrap()
            .steps
            .len()
    };
    for n in 2..=8usize {
        let log2 = usize::BITS as usize - 1 - n.leading_zeros() as usize;
        assert_eq!(steps(Algorithm::Ring, n), 2 * (n - 1));
        assert_eq!(steps(Algorithm::Naive, n), 2);
        assert_eq!(steps(Algorithm::Tree, n), 2 * log2);
        let extra = if n.is_power_of_two() { 0 } else { 2 };
        assert_eq!(steps(Algorithm::Rhd, n), 2 * log2 + extra);
    }
}

#[test]
fn send_recv_barrier_and_a_started_all_reduce() {
    let out = run_in_process(4, |c| {
        let peer = c.rank() ^ 1;
        c.send(peer, &[c.rank() as f32; 3])?;
        let mut got = [0.0; 3];
        c.recv(peer, &mut got)?;
        assert_eq!(got, [peer as f32; 3]);
        c.barrier()?;
        Ok(())
    });
    assert!(out.into_iter().all(|r| r.is_ok()));
    // The handle overlaps a collective with the caller's work; later calls wait for it.
    let links = brrr_collectives::inproc::links(3);
    std::thread::scope(|s| {
        for link in links {
            s.spawn(move || {
                let c = Arc::new(Communicator::new(Box::new(link), Duration::from_secs(20)));
                let h = c
                    .all_reduce_start(vec![c.rank() as f32 + 1.0; 5], ReduceOp::Sum)
                    .unwrap();
                let mut other = vec![1.0; 2];
                c.all_reduce(&mut other, ReduceOp::Max).unwrap();
                assert_eq!(h.wait().unwrap(), vec![6.0; 5]);
                assert_eq!(other, vec![1.0; 2]);
            });
        }
    });
}

#[test]
fn three_d_groups_reduce_within_their_members_only() {
    let layout = ParallelLayout {
        dp: 2,
        tp: 2,
        pp: 2,
    };
    let out = run_in_process(8, |world| {
        let g = ParallelGroups::new(world, layout)?;
        let mut x = [world.rank() as f32];
        g.dp.all_reduce(&mut x, ReduceOp::Sum)?;
        let mut y = [world.rank() as f32];
        g.tp.all_reduce(&mut y, ReduceOp::Sum)?;
        let mut z = [world.rank() as f32];
        g.pp.all_reduce(&mut z, ReduceOp::Sum)?;
        Ok((x[0], y[0], z[0], g.dp.world_ranks().to_vec()))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (x, y, z, dp_ranks) = o.unwrap();
        let (dp, tp, pp) = layout.coords(r);
        let sum = |ranks: Vec<usize>| ranks.iter().sum::<usize>() as f32;
        assert_eq!(x, sum((0..2).map(|d| layout.rank(d, tp, pp)).collect()));
        assert_eq!(y, sum((0..2).map(|t| layout.rank(dp, t, pp)).collect()));
        assert_eq!(z, sum((0..2).map(|p| layout.rank(dp, tp, p)).collect()));
        assert_eq!(
            dp_ranks,
            vec![layout.rank(0, tp, pp), layout.rank(1, tp, pp)]
        );
    }
}

#[test]
fn mismatched_lengths_are_an_error_that_names_both_sizes() {
    let out = run_in_process_with_timeout(3, Duration::from_secs(5), |c| {
        let mut b = vec![1.0; if c.rank() == 2 { 7 } else { 6 }];
        c.all_reduce_with(&mut b, ReduceOp::Sum, Algorithm::Ring, 0)
    });
    let errs: Vec<String> = out
        .into_iter()
        .filter_map(|r| r.err())
        .map(|e| e.to_string())
        .collect();
    assert_eq!(errs.len(), 3, "every rank fails: {errs:?}");
    assert!(
        errs.iter()
            .any(|e| e.contains("7 elements") && e.contains("disagree")),
        "{errs:?}"
    );
}

#[test]
fn mismatched_dtypes_are_an_error() {
    let out = run_in_process_with_timeout(2, Duration::from_secs(5), |c| {
        let mut b = vec![1.0; 4];
        c.all_reduce_with(
            &mut b,
            ReduceOp::Sum,
            Algorithm::Ring,
            if c.rank() == 0 { 0 } else { 1 },
        )
    });
    let e = out[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("dtype f16") || e.contains("dtype f32"), "{e}");
}

#[test]
fn a_rank_that_stops_answering_gives_the_others_a_timeout_error_naming_it() {
    let timeout = Duration::from_millis(500);
    let t0 = Instant::now();
    let out = run_in_process_with_timeout(4, timeout, |c| {
        if c.rank() == 2 {
            // Alive but never joins: its link stays open, so only the timeout can tell.
            std::thread::sleep(Duration::from_secs(3));
            return Ok(());
        }
        let mut b = vec![1.0; 64];
        c.all_reduce_with(&mut b, ReduceOp::Sum, Algorithm::Ring, 0)
    });
    for (r, o) in out.iter().enumerate().filter(|(r, _)| *r != 2) {
        let e = o.as_ref().unwrap_err();
        assert!(
            matches!(e, CollError::Timeout { .. } | CollError::PeerAborted { .. }),
            "rank {r}: {e}"
        );
    }
    let msg = out[3].as_ref().unwrap_err().to_string();
    assert!(msg.contains("rank 2"), "{msg}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_rank_that_dies_mid_collective_fails_the_others_quickly() {
    let t0 = Instant::now();
    let out = run_in_process_with_timeout(4, Duration::from_secs(30), |c| {
        let mut b = vec![1.0; 1000];
        c.all_reduce_with(&mut b, ReduceOp::Sum, Algorithm::Ring, 0)?;
        if c.rank() == 1 {
            panic!("rank 1 dies");
        }
        for _ in 0..5 {
            c.all_reduce_with(&mut b, ReduceOp::Sum, Algorithm::Ring, 0)?;
        }
        Ok(())
    });
    assert!(out.iter().all(|r| r.is_err()));
    // A closed link is noticed at once, long before the 30 s timeout.
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

#[test]
fn tensors_on_cpu_backends_are_all_reduced_and_keep_their_dtype() {
    use brrr_backend::DType;
    use brrr_tensor::Tensor;
    let out = run_in_process(3, |c| {
        let b = brrr_cpu::CpuBackend::new();
        let t = Tensor::from_f32(&b, &[c.rank() as f32, 1.0, 2.0, 3.0], [2, 2], DType::BF16)?;
        let r = brrr_collectives::tensor::all_reduce(c, &t, ReduceOp::Avg)?;
        assert_eq!(r.dtype(), DType::BF16);
        Ok(r.to_vec_f32()?)
    });
    for o in out {
        assert_eq!(o.unwrap(), vec![1.0, 1.0, 2.0, 3.0]);
    }
}

/// The counters match the theory of the ring: `2(n-1)/n · Ψ` elements out of each rank
/// for an all-reduce, `(n-1)/n · Ψ` for a reduce-scatter; a send counts on one side only.
#[test]
fn stats_count_the_ring_traffic() {
    use brrr_collectives::{ReduceOp, run_in_process};
    let (n, len) = (4usize, 1000usize);
    let stats = run_in_process(n, |comm| {
        let mut g = vec![1.0; len];
        comm.all_reduce(&mut g, ReduceOp::Sum)?;
        let after_ar = comm.stats();
        comm.reduce_scatter(&g, ReduceOp::Sum)?;
        if comm.rank() == 0 {
            comm.send(1, &[1.0; 7])?;
        } else if comm.rank() == 1 {
            comm.recv(0, &mut [0.0; 7])?;
        }
        Ok((after_ar, comm.stats()))
    });
    for (r, s) in stats.into_iter().enumerate() {
        let (ar, all) = s.unwrap();
        let a = ar.op("all-reduce");
        assert_eq!((a.calls, a.elements), (1, len as u64));
        assert_eq!(a.elements_sent, (2 * (n - 1) * len / n) as u64, "rank {r}");
        assert_eq!(a.elements_received, a.elements_sent);
        assert_eq!(
            all.op("reduce-scatter").elements_sent,
            ((n - 1) * len / n) as u64
        );
        let sr = all.op("send/recv");
        match r {
            0 => assert_eq!((sr.elements_sent, sr.elements_received), (7, 0)),
            1 => assert_eq!((sr.elements_sent, sr.elements_received), (0, 7)),
            _ => assert_eq!(sr.calls, 0),
        }
        assert_eq!(all.bytes_sent(), 4 * all.elements_sent());
    }
}
