//! End-to-end behaviour of `brrr train` and `brrr sample` on a tiny model: determinism,
//! bitwise resume, atomic checkpoints and clear errors.

use brrr::ckpt;
use brrr::metrics::read_rows;
use brrr::train::{self, BackendKind, Preset, TrainArgs};
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus(dir: &Path) -> PathBuf {
    let text = "It was the best of times, it was the worst of times, it was the age of wisdom, \
                it was the age of foolishness, it was the epoch of belief. "
        .repeat(40);
    let p = dir.join("corpus.txt");
    std::fs::write(&p, text).unwrap();
    p
}

fn args(dir: &Path, out: &str, steps: u64) -> TrainArgs {
    TrainArgs {
        backend: BackendKind::Cpu,
        steps,
        batch_size: 4,
        seq_len: 16,
        grad_accum: 2,
        seed: 7,
        lr: 3e-3,
        min_lr: 3e-4,
        warmup_steps: 3,
        weight_decay: 0.1,
        grad_clip: 1.0,
        eval_every: 4,
        eval_batches: 2,
        preset: Preset::Tiny,
        n_layer: Some(2),
        n_head: Some(2),
        n_embd: Some(32),
        corpus: Some(corpus(dir)),
        out: Some(dir.join(out)),
        resume: None,
        stop_after: None,
        quiet: true,
        trace: None,
        synthetic: false,
    }
}

/// The deterministic columns of metrics.csv (tokens/s is wall-clock).
fn losses(dir: &Path) -> Vec<String> {
    read_rows(dir.join("metrics.csv"))
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {:?} {:?} {:?} {:?}",
                r.step, r.loss, r.val_loss, r.lr, r.grad_norm
            )
        })
        .collect()
}

#[test]
fn same_seed_same_metrics_and_the_loss_goes_down() {
    let tmp = tempfile::tempdir().unwrap();
    train::run(&args(tmp.path(), "a", 12)).unwrap();
    train::run(&args(tmp.path(), "b", 12)).unwrap();
    let (a, b) = (losses(&tmp.path().join("a")), losses(&tmp.path().join("b")));
    assert_eq!(a.len(), 12);
    assert_eq!(a, b, "same seed, different metrics");
    let rows = read_rows(tmp.path().join("a/metrics.csv")).unwrap();
    assert!(
        rows[11].loss < rows[0].loss - 0.5,
        "loss did not go down: {} -> {}",
        rows[0].loss,
        rows[11].loss
    );
    for f in [
        "config.toml",
        "metrics.csv",
        "loss.svg",
        "checkpoint.safetensors",
    ] {
        assert!(tmp.path().join("a").join(f).exists(), "{f} missing");
    }
    let mut other = args(tmp.path(), "c", 12);
    other.seed = 8;
    train::run(&other).unwrap();
    assert_ne!(
        a,
        losses(&tmp.path().join("c")),
        "a different seed should train differently"
    );
}

#[test]
fn a_resumed_run_matches_an_uninterrupted_one_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    train::run(&args(tmp.path(), "full", 10)).unwrap();
    let mut first = args(tmp.path(), "part", 10);
    first.stop_after = Some(6);
    let s = train::run(&first).unwrap();
    assert_eq!(s.steps_done, 6);
    assert_eq!(losses(&tmp.path().join("part")).len(), 6);
    let mut second = args(tmp.path(), "ignored", 10);
    second.out = None;
    second.resume = Some(tmp.path().join("part"));
    train::run(&second).unwrap();
    assert_eq!(
        losses(&tmp.path().join("full")),
        losses(&tmp.path().join("part"))
    );
    // The final weights agree bit for bit too.
    let a = ckpt::load(tmp.path().join("full/checkpoint.safetensors")).unwrap();
    let b = ckpt::load(tmp.path().join("part/checkpoint.safetensors")).unwrap();
    assert_eq!(a.tensors, b.tensors);
}

#[test]
fn trace_is_chrome_json() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = args(tmp.path(), "t", 2);
    a.trace = Some(tmp.path().join("trace.json"));
    train::run(&a).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("trace.json")).unwrap())
            .unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents array");
    for name in ["step", "forward", "backward", "adamw"] {
        assert!(events.iter().any(|e| e["name"] == name), "no {name} span");
    }
}

fn brrr(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_brrr"))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !text.contains("panicked"),
        "brrr {args:?} panicked:\n{text}"
    );
    (out.status.success(), text)
}

#[test]
fn bad_input_gets_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path().to_str().unwrap();
    let (ok, e) = brrr(&["train", "--steps", "banana"]);
    assert!(!ok && e.contains("--steps"), "{e}");
    let (ok, e) = brrr(&["train", "--corpus", &format!("{t}/nope.txt"), "--out", t]);
    assert!(!ok && e.contains("nope.txt"), "{e}");
    let (ok, e) = brrr(&["train", "--seq-len", "0", "--out", t]);
    assert!(!ok && e.contains("--seq-len"), "{e}");
    let (ok, e) = brrr(&["train", "--backend", "cuda", "--out", t]);
    assert!(!ok && e.contains("cuda"), "{e}");
    let (ok, e) = brrr(&["train", "--resume", &format!("{t}/no-such-run")]);
    assert!(!ok && e.contains("no-such-run"), "{e}");
    let (ok, e) = brrr(&["sample", &format!("{t}/no-such-run")]);
    assert!(!ok && e.contains("no-such-run"), "{e}");
}

#[test]
fn corrupt_or_truncated_checkpoints_are_reported_and_never_replaced_by_half_files() {
    let tmp = tempfile::tempdir().unwrap();
    train::run(&args(tmp.path(), "run", 4)).unwrap();
    let ck = tmp.path().join("run/checkpoint.safetensors");
    let bytes = std::fs::read(&ck).unwrap();
    // Truncated: resume must fail, naming the file.
    std::fs::write(&ck, &bytes[..bytes.len() / 2]).unwrap();
    let mut r = args(tmp.path(), "x", 8);
    r.out = None;
    r.resume = Some(tmp.path().join("run"));
    let e = train::run(&r).unwrap_err().to_string();
    assert!(e.contains("checkpoint.safetensors"), "{e}");
    // Garbage: same.
    std::fs::write(&ck, b"not a checkpoint at all").unwrap();
    let e = train::run(&r).unwrap_err().to_string();
    assert!(e.contains("checkpoint.safetensors"), "{e}");
    // Restoring the good bytes makes it resumable again: nothing else was damaged.
    std::fs::write(&ck, &bytes).unwrap();
    train::run(&r).unwrap();
    // No temporary files are left next to the checkpoint.
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path().join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| {
            ![
                "config.toml",
                "metrics.csv",
                "loss.svg",
                "checkpoint.safetensors",
            ]
            .contains(&n.as_str())
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn sample_generates_text_from_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    train::run(&args(tmp.path(), "run", 6)).unwrap();
    let run = tmp.path().join("run");
    let (ok, text) = brrr(&[
        "sample",
        run.to_str().unwrap(),
        "--prompt",
        "It was",
        "--tokens",
        "20",
        "--seed",
        "3",
    ]);
    assert!(ok, "{text}");
    assert!(text.starts_with("It was"), "{text}");
    let (_, again) = brrr(&[
        "sample",
        run.to_str().unwrap(),
        "--prompt",
        "It was",
        "--tokens",
        "20",
        "--seed",
        "3",
    ]);
    assert_eq!(text, again, "sampling with a seed is deterministic");
}

/// MFU is measured against the f32 vector peak of the GPU the backend names, and a device
/// the spec table does not know gives a reason instead of a made-up figure.
#[test]
fn mfu_peak_follows_the_reported_device() {
    let info = |name, device: &str| brrr_backend::BackendInfo {
        name,
        device: device.to_string(),
        dtypes: vec![brrr_backend::DType::F32],
    };
    let h200 = train::mfu_peak(&info("cuda", "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)")).unwrap();
    assert_eq!(h200.flops, 67e12);
    assert!(h200.what.contains("H200"), "{}", h200.what);
    let a100 = train::mfu_peak(&info("wgpu", "NVIDIA A100-SXM4-80GB")).unwrap();
    assert_eq!(a100.flops, 19.5e12);
    let why = train::mfu_peak(&info(
        "wgpu",
        "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan, Cpu)",
    ))
    .unwrap_err();
    assert!(why.contains("\"llvmpipe\""), "{why}");
    let cpu = train::mfu_peak(&info("cpu", "any CPU")).unwrap();
    assert!(cpu.flops > 0.0 && cpu.what.contains("CPU"), "{}", cpu.what);
}
