//! A data-parallel run's shards consolidated into one single-device checkpoint: the
//! weights and moments are the ranks' bit for bit at every ZeRO stage, one device resumes
//! from the file, and damaged, missing or foreign shards are errors naming the file.
//!
//! Resume tolerance: the one-device continuation sums each gradient over the whole batch
//! in one GEMM where the ranks summed quarters (or halves) and then reduced them, so the
//! losses after the resume differ from the uninterrupted `--dp` run's by rounding only:
//! the bound is 1e-5 nats on losses near 5 (the same bound as `equivalence.rs`).

use crate::common::*;
use brrr_backend::HostData;
use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_dp::{DataParallel, DpConfig, consolidate, shard_path, shard_worlds, write_consolidated};
use brrr_nn::Module;
use brrr_train::{TrainConfig, TrainState, Trainer};
use std::path::Path;

const TOL: f32 = 1e-5;

fn dp(world: usize, zero: u8) -> DpConfig {
    DpConfig {
        world,
        ..dp_config(zero)
    }
}

/// Trains `steps` steps, saves the shards into `dir`; returns what the ranks hold (from
/// rank 0: the state all-gathered, and its model's weights gathered) and their losses.
fn train_and_save(
    c: &TrainConfig,
    d: &DpConfig,
    steps: u64,
    dir: &Path,
) -> (TrainState, Vec<Vec<f32>>, Vec<f32>) {
    run_in_process(d.world, |comm| {
        let b = CpuBackend::new();
        let mut e = DataParallel::new(&b, c.clone(), d.clone(), comm, batcher(c))?;
        let mut losses = Vec::new();
        for _ in 0..steps {
            losses.push(e.step()?.loss);
        }
        e.save_shard(dir)?;
        let state = e.gather_state()?;
        e.gather_all()?;
        let weights = e
            .model()
            .params()
            .iter()
            .map(|p| p.value.to_vec_f32())
            .collect::<brrr_backend::Result<Vec<_>>>()?;
        e.free_all()?;
        Ok((state, weights, losses))
    })
    .into_iter()
    .map(|r| r.unwrap())
    .next()
    .unwrap()
}

/// Equal up to the parameters' order (a file lists them by name).
fn same(a: &TrainState, b: &TrainState) -> bool {
    let sorted = |s: &TrainState| {
        let mut p = s.params.clone();
        p.sort_by(|x, y| x.name.cmp(&y.name));
        TrainState {
            params: p,
            ..s.clone()
        }
    };
    sorted(a) == sorted(b)
}

fn bits(h: &HostData) -> Vec<u32> {
    match h {
        HostData::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
        other => panic!("expected f32, got {}", other.dtype()),
    }
}

#[test]
fn consolidated_equals_what_the_ranks_hold_at_every_stage() {
    let c = config(2, 1);
    for world in [2usize, 4] {
        for zero in 0..=3u8 {
            let tmp = tempfile::tempdir().unwrap();
            let (held, weights, _) = train_and_save(&c, &dp(world, zero), 2, tmp.path());
            let got = consolidate(&CpuBackend::new(), &c, tmp.path(), None).unwrap();
            let at = format!("--dp {world} --zero {zero}");
            assert_eq!((got.step, got.adamw_step), (2, 2), "{at}");
            assert_eq!(got.data_position, held.data_position, "{at}");
            assert_eq!(got.params.len(), weights.len(), "{at}");
            for ((p, h), w) in got.params.iter().zip(&held.params).zip(&weights) {
                assert_eq!((&p.name, &p.shape), (&h.name, &h.shape), "{at}");
                let w: Vec<u32> = w.iter().map(|x| x.to_bits()).collect();
                assert_eq!(bits(&p.value), w, "{at}: weights of {}", p.name);
                let (m, v) = p.moments.as_ref().expect("moments after two steps");
                let (hm, hv) = h.moments.as_ref().unwrap();
                assert_eq!(bits(m), bits(hm), "{at}: first moment of {}", p.name);
                assert_eq!(bits(v), bits(hv), "{at}: second moment of {}", p.name);
                assert!(
                    bits(v).iter().any(|&x| x != 0),
                    "{at}: {} never updated",
                    p.name
                );
            }
        }
    }
}

/// Two `--dp` steps, consolidated to a file, then two steps on one device, against four
/// uninterrupted `--dp` steps.
#[test]
fn one_device_resumes_from_the_consolidated_file() {
    let c = config(4, 1);
    for (world, zero) in [(2usize, 0u8), (4, 1), (4, 3)] {
        let d = dp(world, zero);
        let straight = data_parallel(&c, &d)[0].0.clone();
        let tmp = tempfile::tempdir().unwrap();
        let shards = tmp.path().join("dp");
        let (_, _, first) = train_and_save(&c, &d, 2, &shards);
        assert_eq!(first, straight[..2], "--dp {world} --zero {zero}");
        let state = consolidate(&CpuBackend::new(), &c, &shards, None).unwrap();
        let file = tmp.path().join("checkpoint.safetensors");
        write_consolidated(&state, &file, false).unwrap();
        let loaded = TrainState::load(&file).unwrap();
        assert!(same(&loaded, &state), "the file reads back as written");
        let b = CpuBackend::new();
        let mut t = Trainer::new(&b, c.clone(), batcher(&c), Vec::new()).unwrap();
        t.restore(&loaded).unwrap();
        let after: Vec<f32> = (0..2).map(|_| t.step_blocking().unwrap().loss).collect();
        for (s, (a, b)) in after.iter().zip(&straight[2..]).enumerate() {
            assert!(
                (a - b).abs() <= TOL,
                "--dp {world} --zero {zero} step {}: resumed on one device {a}, dp {b}",
                s + 3
            );
        }
        println!("--dp {world} --zero {zero}: dp {straight:?}, resumed one device {after:?}");
    }
}

#[test]
fn damaged_missing_and_foreign_shards_are_errors_naming_the_file() {
    let c = config(2, 1);
    let tmp = tempfile::tempdir().unwrap();
    let (good, older) = (tmp.path().join("good"), tmp.path().join("older"));
    train_and_save(&c, &dp(2, 1), 2, &good);
    train_and_save(&c, &dp(2, 1), 1, &older);
    let run = |dir: &Path| {
        consolidate(&CpuBackend::new(), &c, dir, None)
            .unwrap_err()
            .to_string()
    };
    let copy = |name: &str| {
        let d = tmp.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        for r in 0..2 {
            std::fs::copy(shard_path(&good, r, 2), shard_path(&d, r, 2)).unwrap();
        }
        d
    };

    let d = copy("missing");
    std::fs::remove_file(shard_path(&d, 1, 2)).unwrap();
    let e = run(&d);
    assert!(
        e.contains("dp-rank1-of2.bin") && e.contains("missing"),
        "{e}"
    );

    let d = copy("truncated");
    let p = shard_path(&d, 1, 2);
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 5]).unwrap();
    let e = run(&d);
    assert!(
        e.contains("dp-rank1-of2.bin") && e.contains("data bytes"),
        "{e}"
    );

    // One flipped bit in the data (the last byte: a second moment) is caught.
    let d = copy("flipped");
    let p = shard_path(&d, 1, 2);
    let mut bytes = std::fs::read(&p).unwrap();
    *bytes.last_mut().unwrap() ^= 0x10;
    std::fs::write(&p, &bytes).unwrap();
    let e = run(&d);
    assert!(
        e.contains("dp-rank1-of2.bin") && e.contains("checksum mismatch"),
        "{e}"
    );

    let d = copy("magic");
    let p = shard_path(&d, 0, 2);
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[0] = b'X';
    std::fs::write(&p, &bytes).unwrap();
    let e = run(&d);
    assert!(e.contains("dp-rank0-of2.bin") && e.contains("magic"), "{e}");

    let d = copy("mixed");
    std::fs::copy(shard_path(&older, 1, 2), shard_path(&d, 1, 2)).unwrap();
    let e = run(&d);
    assert!(
        e.contains("dp-rank1-of2.bin") && e.contains("step 1"),
        "{e}"
    );

    let d = copy("swapped");
    std::fs::copy(shard_path(&good, 0, 2), shard_path(&d, 1, 2)).unwrap();
    let e = run(&d);
    assert!(
        e.contains("dp-rank1-of2.bin") && e.contains("rank 0 of 2"),
        "{e}"
    );

    // Two runs' shards: the caller must choose.
    let d = copy("two_worlds");
    std::fs::write(shard_path(&d, 0, 4), b"").unwrap();
    assert_eq!(shard_worlds(&d).unwrap(), vec![2, 4]);
    let e = run(&d);
    assert!(e.contains("--dp 2 and --dp 4"), "{e}");
    assert!(consolidate(&CpuBackend::new(), &c, &d, Some(2)).is_ok());

    // Another model than the shards'.
    let mut other = c.clone();
    other.model.n_layer = 1;
    let e = consolidate(&CpuBackend::new(), &other, &good, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("dp-rank0-of2.bin") && e.contains("parameters"),
        "{e}"
    );

    let e = run(&tmp.path().join("empty_dir_that_is_absent"));
    assert!(e.contains("empty_dir_that_is_absent"), "{e}");

    // An existing file is replaced only with force.
    let state = consolidate(&CpuBackend::new(), &c, &good, None).unwrap();
    let file = tmp.path().join("ck.safetensors");
    std::fs::write(&file, b"keep me").unwrap();
    let e = write_consolidated(&state, &file, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ck.safetensors") && e.contains("--force"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    write_consolidated(&state, &file, true).unwrap();
    assert!(same(&TrainState::load(&file).unwrap(), &state));
}
