//! A run stopped after a sharded checkpoint and resumed with the same layout continues
//! bit for bit: each rank saves and loads only its chunks.

use crate::common::*;
use brrr_amp::{AmpConfig, AmpMode};
use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_dp::{DataParallel, shard_path};
use brrr_train::TrainConfig;

fn resumed(zero: u8, dir: &std::path::Path) -> Vec<f32> {
    resumed_with(&config(4, 1), zero, dir)
        .into_iter()
        .map(|(loss, _)| loss)
        .collect()
}

/// Two steps, a checkpoint, a fresh engine resumed from it, two more steps: rank 0's
/// (loss, loss scale) per step.
fn resumed_with(c: &TrainConfig, zero: u8, dir: &std::path::Path) -> Vec<(f32, f32)> {
    let dp = dp_config(zero);
    run_in_process(WORLD, |comm| {
        let b = CpuBackend::new();
        let mut first = DataParallel::new(&b, c.clone(), dp.clone(), comm, batcher(c))?;
        let mut losses = Vec::new();
        for _ in 0..2 {
            let s = first.step()?;
            losses.push((s.loss, s.loss_scale));
        }
        first.save_shard(dir)?;
        drop(first);
        let b = CpuBackend::new();
        let mut second = DataParallel::new(&b, c.clone(), dp.clone(), comm, batcher(c))?;
        second.load_shard(dir)?;
        assert_eq!(second.steps_done(), 2);
        for _ in 0..2 {
            let s = second.step()?;
            losses.push((s.loss, s.loss_scale));
        }
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

/// `--amp`: the shards keep the f32 masters and fp16's loss-scaler state, so a resumed
/// run continues bit for bit. The fp16 run starts at a scale of 2^40, so its first steps
/// overflow and halve it: a resume that forgot the scale would start over at 2^40 and
/// skip again.
#[test]
fn amp_sharded_resume_is_bitwise() {
    for (mode, init_scale) in [(AmpMode::Bf16, 1.0), (AmpMode::Fp16, 2f32.powi(40))] {
        let mut c = config(4, 1);
        c.amp = AmpConfig::new(mode);
        c.amp.scaler.init_scale = init_scale;
        for zero in [0u8, 1, 2, 3] {
            let dir = tempfile::tempdir().unwrap();
            let straight = straight_stats(&c, zero);
            let again = resumed_with(&c, zero, dir.path());
            assert_eq!(straight, again, "{mode:?} zero {zero}");
        }
    }
}

/// Rank 0's (loss, loss scale) per step of an uninterrupted run.
fn straight_stats(c: &TrainConfig, zero: u8) -> Vec<(f32, f32)> {
    let out = run_in_process(WORLD, |comm| {
        let b = CpuBackend::new();
        let mut e = DataParallel::new(&b, c.clone(), dp_config(zero), comm, batcher(c))?;
        let mut v = Vec::new();
        for _ in 0..c.steps {
            let s = e.step()?;
            v.push((s.loss, s.loss_scale));
        }
        Ok(v)
    });
    out.into_iter().next().unwrap().unwrap()
}

/// A shard saved by a run that had diverged (a NaN among its weights, the checksum
/// valid): resuming from it is refused by name, not blamed on this run's `--lr` at the
/// first step.
#[test]
fn resume_from_a_diverged_shard_names_the_nan() {
    let c = config(1, 1);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run_in_process(WORLD, |comm| {
        let b = CpuBackend::new();
        Ok(DataParallel::new(&b, c.clone(), dp_config(1), comm, batcher(&c))?.save_shard(d)?)
    })
    .into_iter()
    .for_each(|r| drop(r.unwrap()));
    // Rank 1's third parameter element becomes NaN, and the header's checksum is
    // recomputed, as a diverged run would have written it.
    let path = shard_path(d, 1, WORLD);
    let bytes = std::fs::read(&path).unwrap();
    let hlen = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[16..16 + hlen]).unwrap();
    let mut data = bytes[16 + hlen..].to_vec();
    data[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
    header["checksum"] = brrr_train::data::fingerprint(&data).into();
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = bytes[..8].to_vec();
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&data);
    std::fs::write(&path, out).unwrap();

    let errors = run_in_process(WORLD, |comm| {
        let b = CpuBackend::new();
        let mut e = DataParallel::new(&b, c.clone(), dp_config(1), comm, batcher(&c))?;
        Ok(e.load_shard(d).err().map(|e| e.to_string()))
    });
    let msg = errors[1].as_ref().unwrap().clone().expect("rank 1 refuses");
    assert!(
        msg.contains("dp-rank1-of")
            && msg.contains("parameters")
            && msg.contains("NaN at element 2")
            && msg.contains("diverged"),
        "{msg}"
    );
}
