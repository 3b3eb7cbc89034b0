//! A run stopped after a sharded checkpoint and resumed with the same layout continues
//! bit for bit: each rank saves and loads only its chunks.

mod common;
use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_dp::{DataParallel, shard_path};
use common::*;

fn resumed(zero: u8, dir: &std::path::Path) -> Vec<f32> {
    let c = config(4, 1);
    let dp = dp_config(zero);
    run_in_process(WORLD, |comm| {
        let b = CpuBackend::new();
        let mut first = DataParallel::new(&b, c.clone(), dp.clone(), comm, batcher(&c))?;
        let mut losses = vec![first.step()?.loss, first.step()?.loss];
        first.save_shard(dir)?;
        drop(first);
        let b = CpuBackend::new();
        let mut second = DataParallel::new(&b, c.clone(), dp.clone(), comm, batcher(&c))?;
        second.load_shard(dir)?;
        assert_eq!(second.steps_done(), 2);
        losses.push(second.step()?.loss);
        losses.push(second.step()?.loss);
        Ok(losses)
    })
    .into_iter()
    .map(|r| r.unwrap())
    .next()
    .unwrap()
}

#[test]
fn sharded_resume_is_bitwise() {
    let c = config(4, 1);
    for zero in [0u8, 1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let straight = data_parallel(&c, &dp_config(zero))[0].0.clone();
        let again = resumed(zero, dir.path());
        assert_eq!(straight, again, "zero {zero}");
        for r in 0..WORLD {
            assert!(shard_path(dir.path(), r, WORLD).exists());
        }
    }
}

#[test]
fn resume_with_another_layout_is_refused() {
    let c = config(1, 1);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = run_in_process(WORLD, |comm| {
        let b = CpuBackend::new();
        let e = DataParallel::new(&b, c.clone(), dp_config(1), comm, batcher(&c))?;
        e.save_shard(d)?;
        let mut other = DataParallel::new(&b, c.clone(), dp_config(2), comm, batcher(&c))?;
        Ok(other.load_shard(d).unwrap_err().to_string())
    });
    let msg = out.into_iter().next().unwrap().unwrap();
    assert!(msg.contains("--zero 1"), "{msg}");
}
