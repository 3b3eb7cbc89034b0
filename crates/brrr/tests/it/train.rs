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
        steps: Some(steps),
        batch_size: Some(4),
        seq_len: Some(16),
        grad_accum: Some(2),
        seed: Some(7),
        lr: Some(3e-3),
        min_lr: Some(3e-4),
        warmup_steps: Some(3),
        weight_decay: Some(0.1),
        grad_clip: Some(1.0),
        eval_every: Some(4),
        eval_batches: Some(2),
        preset: Some(Preset::Tiny),
        n_layer: Some(2),
        n_head: Some(2),
        n_embd: Some(32),
        corpus: Some(corpus(dir)),
        out: Some(dir.join(out)),
        quiet: true,
        ..TrainArgs::default()
    }
}

/// `--resume dir` with no other flag, as a user continuing a run types it.
fn resume(dir: PathBuf) -> TrainArgs {
    TrainArgs {
        resume: Some(dir),
        quiet: true,
        ..TrainArgs::default()
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
    other.seed = Some(8);
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
    train::run(&resume(tmp.path().join("part"))).unwrap();
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
    let mut r = resume(tmp.path().join("run"));
    r.steps = Some(8);
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

/// MFU is measured against the f32 vector peak of the GPU the backend names (under
/// `--amp`, its 16-bit tensor-core peak), and a device the spec table does not know gives
/// a reason instead of a made-up figure.
#[test]
fn mfu_peak_follows_the_reported_device() {
    let info = |name, device: &str| brrr_backend::BackendInfo {
        name,
        device: device.to_string(),
        dtypes: vec![brrr_backend::DType::F32],
    };
    use brrr_amp::AmpMode;
    let h200_device = info("cuda", "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)");
    let h200 = train::mfu_peak(&h200_device, AmpMode::Off).unwrap();
    assert_eq!(h200.flops, 67e12);
    assert!(h200.what.contains("H200"), "{}", h200.what);
    // A bf16 run is judged against the tensor cores its GEMMs use, not the f32 lanes
    // (against which an H100's bf16 run once printed "MFU 244%").
    let h200_bf16 = train::mfu_peak(&h200_device, AmpMode::Bf16).unwrap();
    assert_eq!(h200_bf16.flops, 989.5e12);
    assert!(h200_bf16.what.contains("bf16 tensor"), "{}", h200_bf16.what);
    let h200_fp16 = train::mfu_peak(&h200_device, AmpMode::Fp16).unwrap();
    assert_eq!(h200_fp16.flops, 989.5e12);
    assert!(h200_fp16.what.contains("fp16 tensor"), "{}", h200_fp16.what);
    let a100 = train::mfu_peak(&info("wgpu", "NVIDIA A100-SXM4-80GB"), AmpMode::Off).unwrap();
    assert_eq!(a100.flops, 19.5e12);
    let a100_bf16 = train::mfu_peak(&info("wgpu", "NVIDIA A100-SXM4-80GB"), AmpMode::Bf16);
    assert_eq!(a100_bf16.unwrap().flops, 312e12);
    let why = train::mfu_peak(
        &info("wgpu", "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan, Cpu)"),
        AmpMode::Off,
    )
    .unwrap_err();
    assert!(why.contains("\"llvmpipe\""), "{why}");
    // The CPU computes 16-bit runs in f32: the same measured peak in every mode.
    let cpu = train::mfu_peak(&info("cpu", "any CPU"), AmpMode::Bf16).unwrap();
    assert!(cpu.flops > 0.0 && cpu.what.contains("CPU"), "{}", cpu.what);
}

/// The bytes of every file of a run directory, to check that a refused command left
/// them alone.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn sizes_beyond_memory_are_errors_not_aborts() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = out.to_str().unwrap();
    for (flags, needle) in [
        (&["--batch-size", "99999999999999"][..], "overflows"),
        (&["--seq-len", "100000"][..], "--block-size"),
        (
            &["--seq-len", "100000", "--block-size", "100000"][..],
            "needs about",
        ),
        (&["--eval-batches", "1000000000000"][..], "needs about"),
    ] {
        let mut argv = vec!["train", "--out", o];
        argv.extend_from_slice(flags);
        let (ok, e) = brrr(&argv);
        assert!(
            !ok && e.contains(needle) && e.starts_with("error: "),
            "{flags:?}: {e}"
        );
        assert!(!out.exists(), "{flags:?} created the output directory");
    }
}

#[test]
fn an_endless_corpus_is_refused_after_a_bounded_read() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (ok, e) = brrr(&[
        "train",
        "--corpus",
        "/dev/zero",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        !ok && e.contains("/dev/zero") && e.contains("larger than the maximum"),
        "{e}"
    );
}

#[test]
fn an_existing_run_is_kept_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    train::run(&args(tmp.path(), "run", 2)).unwrap();
    let dir = tmp.path().join("run");
    let before = snapshot(&dir);
    let e = train::run(&args(tmp.path(), "run", 3))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("already holds a run") && e.contains("--force"),
        "{e}"
    );
    assert_eq!(snapshot(&dir), before, "a refused run changed the old one");
    let mut forced = args(tmp.path(), "run", 3);
    forced.force = true;
    assert_eq!(train::run(&forced).unwrap().steps_done, 3);
    assert_eq!(losses(&dir).len(), 3);
}

#[test]
fn resume_refuses_contradicting_flags_and_applies_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    let mut first = args(tmp.path(), "run", 6);
    first.stop_after = Some(2);
    train::run(&first).unwrap();
    let dir = tmp.path().join("run");
    let before = snapshot(&dir);
    let mut bad = resume(dir.clone());
    bad.lr = Some(0.5);
    bad.n_embd = Some(64);
    bad.corpus = Some(tmp.path().join("other.txt"));
    let e = train::run(&bad).unwrap_err().to_string();
    for flag in ["--lr 0.5", "--n-embd 64", "--corpus"] {
        assert!(e.contains(flag), "{flag} not refused: {e}");
    }
    assert_eq!(snapshot(&dir), before);
    // The saved value itself is no contradiction; --steps and --stop-after apply.
    let mut ok = resume(dir.clone());
    ok.lr = Some(3e-3);
    ok.steps = Some(5);
    ok.stop_after = Some(4);
    assert_eq!(train::run(&ok).unwrap().steps_done, 4);
    assert_eq!(read_config_steps(&dir), 5);
}

fn read_config_steps(dir: &Path) -> u64 {
    train::read_config(dir).unwrap().steps
}

#[test]
fn nothing_to_do_is_said_plainly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut zero = args(tmp.path(), "zero", 4);
    zero.stop_after = Some(0);
    let e = train::run(&zero).unwrap_err().to_string();
    assert!(e.contains("nothing would be trained"), "{e}");
    assert!(!tmp.path().join("zero").exists());

    train::run(&args(tmp.path(), "done", 3)).unwrap();
    let dir = tmp.path().join("done");
    let (ok, text) = brrr(&["train", "--resume", dir.to_str().unwrap(), "--quiet"]);
    assert!(ok, "{text}");
    assert!(text.contains("already finished at step 3"), "{text}");
    assert!(
        !text.contains("NaN") && !text.contains("0 tokens/s"),
        "{text}"
    );
}

#[test]
fn bad_hyper_parameters_name_their_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("o");
    let o = o.to_str().unwrap();
    for (flags, needle) in [
        (&["--weight-decay", "NaN"][..], "--weight-decay"),
        (&["--weight-decay", "-5"][..], "--weight-decay"),
        (&["--lr", "NaN"][..], "--lr"),
        (&["--seq-len", "256"][..], "--block-size 256"),
        (&["--trace", "/no/such/dir/trace.json"][..], "trace"),
    ] {
        let mut argv = vec!["train", "--out", o];
        argv.extend_from_slice(flags);
        let (ok, e) = brrr(&argv);
        assert!(!ok && e.contains(needle), "{flags:?}: {e}");
        assert!(
            !e.contains("learning rate") || needle == "--lr",
            "{flags:?}: {e}"
        );
    }
    // A longer context is allowed when asked for.
    let mut long = args(tmp.path(), "long", 1);
    long.seq_len = Some(40);
    long.block_size = Some(40);
    train::run(&long).unwrap();
}

#[test]
fn temporary_files_of_a_killed_save_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut first = args(tmp.path(), "run", 4);
    first.stop_after = Some(2);
    train::run(&first).unwrap();
    let dir = tmp.path().join("run");
    let stale = dir.join(".checkpoint.safetensors.tmpAbC123");
    std::fs::write(&stale, b"half a checkpoint").unwrap();
    let foreign = dir.join(".notes.tmp1");
    std::fs::write(&foreign, b"not ours").unwrap();
    train::run(&resume(dir.clone())).unwrap();
    assert!(!stale.exists(), "the stale temporary file is still there");
    assert!(foreign.exists(), "a file of another program was removed");
}
