//! `brrr estimate`, `brrr roofline` and `brrr sample` on hostile input: every bad flag is a
//! clear error on stderr with a failing exit status, never a panic, a wrapped integer, or an
//! `inf`/`NaN` in the output; a reader that closes the pipe early is not an error.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `brrr args...`; returns (success, stdout, stderr) and fails the test on a panic.
fn brrr(args: &[&str]) -> (bool, String, String) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_brrr"))
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(
        !stderr.contains("panicked"),
        "brrr {args:?} panicked:\n{stderr}"
    );
    (out.status.success(), stdout, stderr)
}

/// Asserts `brrr args...` fails with an error on stderr that contains `expect`.
fn fails_with(args: &[&str], expect: &str) {
    let (ok, stdout, stderr) = brrr(args);
    assert!(
        !ok,
        "brrr {args:?} succeeded; it should fail with '{expect}':\n{stdout}"
    );
    assert!(
        stderr.contains(expect),
        "brrr {args:?}: expected '{expect}' in the error:\n{stderr}"
    );
}

/// Asserts `brrr args...` succeeds and prints no `inf` or `NaN` anywhere.
fn succeeds_finite(args: &[&str]) -> String {
    let (ok, stdout, stderr) = brrr(args);
    assert!(ok, "brrr {args:?} failed:\n{stderr}");
    for bad in ["inf", "NaN", "nan"] {
        let found = stdout
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w == bad);
        assert!(!found, "brrr {args:?} printed '{bad}':\n{stdout}");
    }
    stdout
}

/// `brrr ... | head -c 100`: the reader takes a little and closes the pipe. The output is made
/// larger than a pipe buffer (64 KiB on Linux), so the writer hits the closed pipe whatever
/// the timing. Before: a panic ("failed printing to stdout: Broken pipe"), exit 101.
fn closed_early(args: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_brrr"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "brrr {args:?} panicked on a closed pipe:\n{stderr}"
    );
    assert!(
        out.status.success(),
        "brrr {args:?} on a closed pipe: {:?}\n{stderr}",
        out.status
    );
}

#[test]
fn a_closed_stdout_is_a_clean_exit() {
    // 400 GEMMs as JSON: several hundred KiB.
    let ops: Vec<String> = (1..=400)
        .map(|i| format!("--op=gemm:{},{},{}", 64 * i, 4096, 4096))
        .collect();
    let mut args = vec!["roofline", "--gpu", "h100", "--json"];
    args.extend(ops.iter().map(String::as_str));
    closed_early(&args);
    let mut args = vec!["roofline", "--gpu", "h100"];
    args.extend(ops.iter().map(String::as_str));
    closed_early(&args);
    // The benchmark tables too: 3000 1x1 GEMMs, one row each (about 100 KiB).
    let sizes = vec!["1"; 3000].join(",");
    closed_early(&[
        "bench",
        "gemm",
        "--sizes",
        &sizes,
        "--reps",
        "1",
        "--min-seconds",
        "0",
    ]);
}

#[test]
fn size_products_that_overflow_are_errors_not_wrapped() {
    // Before: "2 GPUs" printed as "0 GPUs = DP 9223372036854775808 × TP 2 × PP 1".
    let memory = ["estimate", "memory", "--model", "gpt2"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        memory.iter().chain(extra).copied().collect()
    };
    fails_with(
        &with(&["--dp", "9223372036854775808", "--tp", "2"]),
        "GPUs (DP × TP × PP) is too large",
    );
    fails_with(
        &with(&["--micro-batch", "9223372036854775808", "--grad-accum", "2"]),
        "global batch (sequences per step) is too large",
    );
    fails_with(
        &with(&["--micro-batch", "4611686018427387904", "--seq-len", "1024"]),
        "tokens per step is too large",
    );
    fails_with(
        &with(&["--pp", "2", "--schedule", "interleaved:9223372036854775808"]),
        "pipeline stages × chunks is too large",
    );
    fails_with(
        &[
            "estimate",
            "memory",
            "--layers",
            "12",
            "--hidden",
            "4611686018427387904",
            "--heads",
            "1",
        ],
        "--hidden 4611686018427387904 is too large",
    );
    fails_with(
        &[
            "estimate",
            "memory",
            "--layers",
            "12",
            "--hidden",
            "768",
            "--heads",
            "12",
            "--vocab",
            "18446744073709551615",
        ],
        "at most 2^53",
    );
    // f64 overflow: 6·N·D beyond f64::MAX is an error, not "inf FLOP".
    fails_with(
        &["estimate", "time", "--params", "1e300", "--tokens", "1e300"],
        "training FLOPs 6·N·D is too large",
    );
    // Roofline sizes: tiles m × n beyond u64.
    fails_with(
        &[
            "roofline",
            "--op",
            "gemm:18000000000000000000,18000000000000000000,1",
        ],
        "GEMM tiles is too large",
    );
}

#[test]
fn one_gpu_has_no_collectives_and_nothing_prints_inf() {
    // Before: every algbw "inf B/s" and busbw "NaN B/s".
    fails_with(
        &["estimate", "comms", "--gpus", "1"],
        "at least 2: a collective over one GPU communicates nothing (0 s)",
    );
    fails_with(&["estimate", "comms", "--gpus", "0"], "at least 2");
    let cases: &[&[&str]] = &[
        &["estimate", "comms"],
        &["estimate", "comms", "--gpus", "2", "--bytes", "1B"],
        &["estimate", "comms", "--gpus", "16", "--model", "gpt3-175b"],
        &["estimate", "comms", "--gpus", "18446744073709551615"],
        &["estimate", "comms", "--gpus", "64", "--alpha-us", "0"],
        &["estimate", "comms", "--gpu", "l4", "--gpus", "4"],
        &["estimate", "time", "--model", "gpt2", "--tokens", "1e6"],
        &[
            "roofline",
            "--gpu",
            "h100",
            "--op",
            "elementwise:1",
            "--measured-us",
            "1e-300",
        ],
    ];
    for args in cases {
        succeeds_finite(args);
    }
}

#[test]
fn negative_nan_and_infinite_flags_are_rejected() {
    let cases: &[(&[&str], &str)] = &[
        (&["estimate", "comms", "--alpha-us=-5"], "--alpha-us"),
        (&["bench", "gemm", "--min-seconds=-1"], "--min-seconds"),
        (&["bench", "gemm", "--min-seconds", "inf"], "--min-seconds"),
        (&["estimate", "comms", "--alpha-us", "NaN"], "--alpha-us"),
        (&["estimate", "comms", "--alpha-us", "inf"], "--alpha-us"),
        (&["estimate", "comms", "--bytes=-1e9"], "--bytes"),
        (&["estimate", "comms", "--bytes", "inf"], "--bytes"),
        (&["estimate", "comms", "--bytes", "0"], "--bytes"),
        (&["estimate", "comms", "--bytes", "0.5"], "at least 1 byte"),
        (&["estimate", "comms", "--params=-1G"], "--params"),
        (&["estimate", "comms", "--d-model=-1"], "--d-model"),
        (&["estimate", "comms", "--d-ff", "NaN"], "--d-ff"),
        (
            &["estimate", "comms", "--tokens-per-gpu", "0"],
            "--tokens-per-gpu",
        ),
        (
            &["estimate", "comms", "--experts", "4", "--top-k", "8"],
            "top-k 8 exceeds",
        ),
        (
            &["estimate", "comms", "--experts", "0", "--top-k", "0"],
            "experts",
        ),
        (
            &["estimate", "time", "--params", "1G", "--tokens=-1G"],
            "--tokens",
        ),
        (
            &["estimate", "time", "--params", "NaN", "--tokens", "1G"],
            "--params",
        ),
        (
            &[
                "estimate", "time", "--params", "1G", "--tokens", "1G", "--mfu", "NaN",
            ],
            "--mfu",
        ),
        (
            &[
                "estimate", "time", "--params", "1G", "--tokens", "1G", "--mfu", "1.5",
            ],
            "MFU",
        ),
        (
            &[
                "estimate",
                "time",
                "--params",
                "1G",
                "--tokens",
                "1G",
                "--step-time=-1",
            ],
            "--step-time",
        ),
        (
            &[
                "estimate", "time", "--params", "1G", "--tokens", "1G", "--gpus", "0",
            ],
            "GPUs",
        ),
        (
            &["estimate", "time", "--params", "1GB", "--tokens", "1G"],
            "not a count",
        ),
        (
            &["roofline", "--op", "gemm:8,8,8", "--measured-us=-3"],
            "--measured-us",
        ),
        (
            &["roofline", "--op", "gemm:8,8,8", "--measured-us", "inf"],
            "--measured-us",
        ),
        (&["roofline", "--op", "gemm:0,8,8"], "m must be positive"),
        (
            &["estimate", "memory", "--model", "gpt2", "--zero", "4"],
            "ZeRO stage",
        ),
        (
            &["estimate", "memory", "--model", "gpt2", "--dp", "0"],
            "data parallel degree",
        ),
        (
            &[
                "estimate",
                "memory",
                "--model",
                "gpt2",
                "--schedule",
                "interleaved:0",
                "--pp",
                "2",
            ],
            "chunks",
        ),
    ];
    for (args, expect) in cases {
        fails_with(args, expect);
    }
}

#[test]
fn bench_sizes_that_cannot_run_are_errors() {
    // Before: size 0 printed a row of zeros; a huge size aborted on a failed allocation.
    fails_with(&["bench", "gemm", "--sizes", "0"], "at least 1");
    // The memory check reads /proc/meminfo; elsewhere the size is not checked.
    if cfg!(target_os = "linux") {
        fails_with(
            &["bench", "gemm", "--sizes", "100000000", "--reps", "1"],
            "GiB for its matrices",
        );
    }
    fails_with(
        &["bench", "gemm", "--sizes", "18446744073709551615"],
        "at least 1",
    );
}

#[test]
fn bus_bandwidth_follows_nccl_tests() {
    // nccl-tests PERFORMANCE.md: busbw = algbw · 2(n−1)/n for all-reduce, · (n−1)/n for
    // reduce-scatter and all-gather, · 1 for broadcast.
    let text = succeeds_finite(&["estimate", "comms", "--gpus", "8"]);
    assert!(
        text.contains("busbw = algbw · 2(n−1)/n for all-reduce"),
        "{text}"
    );
    let json = succeeds_finite(&["estimate", "comms", "--gpus", "8", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = v["collectives"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        let ratio = row["busbw"].as_f64().unwrap() / row["algbw"].as_f64().unwrap();
        let want = match row["collective"].as_str().unwrap() {
            "all-reduce" => 2.0 * 7.0 / 8.0,
            "reduce-scatter" | "all-gather" | "all-to-all" => 7.0 / 8.0,
            "broadcast" => 1.0,
            other => panic!("unexpected collective {other}"),
        };
        assert!((ratio - want).abs() < 1e-12, "{row}");
    }
}

#[test]
fn units_say_params_tokens_and_which_bytes() {
    // Before: "parameters N  175 B" (bytes?) and capacities "80.0 GB" (80e9 bytes).
    let t = succeeds_finite(&["estimate", "time", "--params", "175B", "--tokens", "300G"]);
    assert!(
        t.contains("175 G params") && t.contains("300 G tokens"),
        "{t}"
    );
    let m = succeeds_finite(&[
        "estimate",
        "memory",
        "--model",
        "gpt3-175b",
        "--gpu",
        "h100",
    ]);
    assert!(m.contains("175 G params"), "{m}");
    assert!(m.contains("of 80.0 GiB"), "{m}");
    // The column names both units its rows use (it said GiB and printed MiB too).
    assert!(m.contains("MiB = 2^20, GiB = 2^30 bytes"), "{m}");
    let list = succeeds_finite(&["roofline", "--list"]);
    assert!(
        list.contains("80.0 GiB") && list.contains("141 GiB"),
        "{list}"
    );
    assert!(list.contains("GB/s (1e9 bytes/s)"), "{list}");
    for out in [&t, &m, &list] {
        // A number followed by a bare "B" would be ambiguous (billions or bytes).
        let ambiguous = out
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w[0].parse::<f64>().is_ok() && w[1].trim_end_matches([',', ')']) == "B");
        assert!(!ambiguous, "{out}");
    }
    // A count's B on input is a billion; a size's B is a byte.
    let one_byte = succeeds_finite(&["estimate", "comms", "--bytes", "1B", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&one_byte).unwrap();
    assert_eq!(v["bytes"].as_f64(), Some(1.0));
}

/// Trains a one-step model through the CLI and returns its run directory.
fn tiny_run(dir: &Path) -> String {
    let corpus = dir.join("corpus.txt");
    std::fs::write(
        &corpus,
        "the quick brown fox jumps over the lazy dog. ".repeat(20),
    )
    .unwrap();
    let out = dir.join("run");
    let (ok, _, stderr) = brrr(&[
        "train",
        "--steps",
        "1",
        "--n-layer",
        "1",
        "--n-head",
        "2",
        "--n-embd",
        "16",
        "--batch-size",
        "2",
        "--seq-len",
        "8",
        "--grad-accum",
        "1",
        "--eval-every",
        "1",
        "--eval-batches",
        "1",
        "--quiet",
        "--corpus",
        corpus.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    out.to_str().unwrap().to_string()
}

/// Sets every element of the first f32 model weight of a safetensors checkpoint to NaN,
/// through the format's own header (8-byte little-endian length, JSON with `data_offsets`).
/// Returns the tensor's name.
fn poison_checkpoint(path: &Path) -> String {
    let mut bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let (name, info) = header
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, v)| k.starts_with("model.") && v["dtype"] == "F32")
        .unwrap();
    let offset = |i: usize| 8 + n + info["data_offsets"][i].as_u64().unwrap() as usize;
    for x in bytes[offset(0)..offset(1)].chunks_exact_mut(4) {
        x.copy_from_slice(&f32::NAN.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
    name.clone()
}

/// `brrr args...` must finish within `secs` seconds (it is killed otherwise, failing the test).
fn finishes_within(args: &[&str], secs: u64) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_brrr"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() > secs {
            child.kill().unwrap();
            panic!("brrr {args:?} still running after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn sample_rejects_hostile_flags_instead_of_panicking_or_hanging() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path());
    fails_with(&["sample", &run, "--temperature=-1"], "--temperature");
    fails_with(&["sample", &run, "--temperature", "NaN"], "--temperature");
    fails_with(&["sample", &run, "--temperature", "inf"], "--temperature");
    // Before: generated forever.
    let out = finishes_within(&["sample", &run, "--tokens", "18446744073709551615"], 60);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--tokens"),
        "{stderr}"
    );
    let flags: &[&[&str]] = &[
        &["--temperature", "0"],
        &["--temperature", "1e-30"],
        &["--temperature", "1e30"],
        &["--top-k", "0"],
        &["--top-k", "1"],
        &["--top-k", "100000"],
        &["--prompt", ""],
        &["--tokens", "0"],
    ];
    for extra in flags {
        let mut args = vec!["sample", run.as_str()];
        args.extend_from_slice(extra);
        if !extra.contains(&"--tokens") {
            args.extend(["--tokens", "5"]);
        }
        let (ok, _, stderr) = brrr(&args);
        assert!(ok, "brrr {args:?}: {stderr}");
    }
    // A prompt longer than the context (seq-len 8 here) keeps its last tokens.
    let long = "the lazy dog ".repeat(50);
    let (ok, text, stderr) = brrr(&["sample", &run, "--prompt", &long, "--tokens", "3"]);
    assert!(ok && text.starts_with(&long), "{stderr}");
}

#[test]
fn sample_names_non_finite_weights_instead_of_panicking() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path());

    // A NaN weight. Before: panic "cannot sample empty range".
    let poisoned = poison_checkpoint(&Path::new(&run).join("checkpoint.safetensors"));
    fails_with(
        &["sample", &run, "--prompt", "the", "--tokens", "5"],
        "non-finite logits at position 3",
    );
    let (_, _, stderr) = brrr(&["sample", &run, "--tokens", "5"]);
    assert!(
        stderr.contains("the checkpoint's weights are not finite")
            && stderr.contains(&format!("{poisoned}[0] = NaN")),
        "{stderr}"
    );
}

/// A pipeline of zero stages, micro-batches or chunks is refused with the flag's name
/// (it printed a table whose every row was the same error, and exited 0).
#[test]
fn estimate_pipeline_refuses_zero_sizes() {
    for flag in ["--pp", "--micro-batches", "--chunks"] {
        fails_with(
            &["estimate", "pipeline", flag, "0"],
            &format!("{flag} must be at least 1"),
        );
    }
}

/// `--loss-scaling dynamic` without `--amp` is refused before anything is written (it
/// trained in f32 with no loss scale, without a word).
#[test]
fn dynamic_loss_scaling_without_amp_is_refused() {
    let dir = std::env::temp_dir().join(format!("brrr-ls-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    fails_with(
        &[
            "train",
            "--steps",
            "1",
            "--loss-scaling",
            "dynamic",
            "--out",
            out,
        ],
        "dynamic loss scaling needs --amp",
    );
    assert!(!dir.exists(), "the refused run created {out}");
}

/// The loss scaler's settings are flags, written into the run's config; without a loss
/// scale to adjust they are refused, not ignored.
#[test]
fn loss_scaler_flags_are_used_or_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let out = out.to_str().unwrap();
    fails_with(
        &[
            "train",
            "--steps",
            "1",
            "--amp",
            "bf16",
            "--scale-hysteresis",
            "2",
            "--out",
            out,
        ],
        "--scale-hysteresis",
    );
    let (ok, _, stderr) = brrr(&[
        "train",
        "--steps",
        "1",
        "--quiet",
        "--amp",
        "fp16",
        "--scale-hysteresis",
        "2",
        "--scale-growth-interval",
        "50",
        "--min-loss-scale",
        "1",
        "--batch-size",
        "2",
        "--seq-len",
        "16",
        "--n-layer",
        "1",
        "--n-embd",
        "32",
        "--n-head",
        "2",
        "--out",
        out,
    ]);
    assert!(ok, "{stderr}");
    let config = std::fs::read_to_string(tmp.path().join("run/config.toml")).unwrap();
    for line in ["hysteresis = 2", "growth_interval = 50", "min_scale = 1.0"] {
        assert!(config.contains(line), "{line} not in:\n{config}");
    }
}

/// `estimate memory --params N`: the model states of N parameters (16 bytes each for
/// mixed-precision Adam, ZeRO's K = 12 plus 2 + 2), and the flags that need a shape
/// refused by name rather than ignored.
#[test]
fn memory_from_a_parameter_count() {
    let out = succeeds_finite(&["estimate", "memory", "--params", "7G", "--json"]);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["total_bytes"], 16.0 * 7e9, "{out}");
    assert!(j["activations_bytes"].is_null(), "{out}");
    let text = succeeds_finite(&[
        "estimate", "memory", "--params", "7G", "--zero", "3", "--dp", "8",
    ]);
    assert!(
        text.contains("13.0 GiB") && text.contains("not counted"),
        "{text}"
    );
    fails_with(
        &["estimate", "memory", "--params", "7G", "--tp", "2", "--sp"],
        "--tp, --sp need the model's shape",
    );
    fails_with(
        &["estimate", "memory", "--params", "7G", "--model", "gpt2"],
        "not both",
    );
    fails_with(&["estimate", "memory"], "or --params N");
}

/// `brrr generate` decodes several prompts at once through the serving engine: each
/// greedy text is `brrr sample`'s for the same prompt, and bad flags are errors.
#[test]
fn generate_batches_prompts_into_samples_greedy_texts() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path());
    let (ok, text, stderr) = brrr(&[
        "generate",
        &run,
        "--prompt",
        "th",
        "--prompt",
        "the ",
        "--max-tokens",
        "3",
        "--temperature",
        "0",
        "--block-size",
        "2",
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("2 prompt(s): 6 tokens generated"),
        "{stderr}"
    );
    let texts: Vec<&str> = text.trim_end_matches('\n').split("\n\n").collect();
    for (prompt, got) in ["th", "the "].iter().zip(&texts) {
        let (ok, want, stderr) = brrr(&[
            "sample",
            &run,
            "--prompt",
            prompt,
            "--tokens",
            "3",
            "--temperature",
            "0",
        ]);
        assert!(ok, "{stderr}");
        assert_eq!(*got, want.trim_end_matches('\n'), "prompt {prompt:?}");
    }
    // Speculative decoding with the run as its own draft: the same greedy texts, every
    // proposal accepted.
    let (ok, spec, stderr) = brrr(&[
        "generate",
        &run,
        "--prompt",
        "th",
        "--prompt",
        "the ",
        "--max-tokens",
        "3",
        "--temperature",
        "0",
        "--draft",
        &run,
        "--speculate",
        "2",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(spec, text);
    assert!(stderr.contains("100% of proposals accepted"), "{stderr}");
    let (ok, table, stderr) = brrr(&[
        "bench",
        "speculative",
        &run,
        "--draft",
        &run,
        "--k",
        "2",
        "--prompts",
        "2",
        "--prompt-len",
        "8",
        "--max-tokens",
        "6",
    ]);
    assert!(ok, "{stderr}");
    assert!(
        table.contains("| 2 | 1.000 | 1.000 | 3.00 | 3.00 |"),
        "{table}"
    );
    fails_with(&["generate", &run, "--speculate", "2"], "--draft");
    // The paged cache's flags mean nothing to the speculative decoder: refused, by name.
    fails_with(
        &["generate", &run, "--draft", &run, "--kv-blocks", "4"],
        "--kv-blocks",
    );
    // Weight-only quantization: the table has every format, and generate decodes with
    // int8 weights.
    let (ok, table, stderr) = brrr(&["bench", "quant", &run, "--tokens", "256"]);
    assert!(ok, "{stderr}");
    for row in [
        "| f32 (as trained) |",
        "| int8 |",
        "| int4-g32 |",
        "| fp8-e4m3 |",
    ] {
        assert!(table.contains(row), "{row} not in {table}");
    }
    let (ok, _, stderr) = brrr(&["generate", &run, "--max-tokens", "3", "--weights", "int4"]);
    assert!(ok, "{stderr}");
    fails_with(
        &["bench", "quant", &run, "--formats", "int3"],
        "unknown weight format",
    );
    fails_with(
        &["generate", &run, "--weights", "int4-g0"],
        "unknown weight format",
    );
    fails_with(&["generate", &run, "--top-p", "0"], "top_p");
    fails_with(&["generate", &run, "--block-size", "0"], "at least 1");
    let long = "the lazy dog ".repeat(50);
    fails_with(&["generate", &run, "--prompt", &long], "context");
}

/// `brrr serve`: a completion over loopback, then SIGTERM stops it cleanly.
#[cfg(unix)]
#[test]
fn serve_answers_over_loopback_and_stops_on_sigterm() {
    use std::io::{BufRead, BufReader, Write};
    let tmp = tempfile::tempdir().unwrap();
    let run = tiny_run(tmp.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_brrr"))
        .args(["serve", &run, "--port", "0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    // "serving RUN at http://127.0.0.1:PORT: POST ..."
    let url = line
        .split("http://")
        .nth(1)
        .unwrap_or_else(|| panic!("{line:?}"));
    let addr: String = url
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    let addr = addr.trim_end_matches(':');
    let body = r#"{"prompt": "the ", "max_tokens": 4, "temperature": 0}"#;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"completion_tokens\":4"), "{response}");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{status}: {rest}");
    // The load generator against its own in-process server.
    let (ok, table, stderr) = brrr(&[
        "bench",
        "serve",
        &run,
        "--rates",
        "50",
        "--requests",
        "6",
        "--prompt-len",
        "2..4",
        "--output-len",
        "2..3",
    ]);
    assert!(ok, "{stderr}");
    assert!(table.contains("| 50 | 6 | 0 |"), "{table}");
    fails_with(
        &["bench", "serve", &run, "--prompt-len", "5..2"],
        "MIN..MAX",
    );
    fails_with(&["bench", "serve", "--url", "localhost:1"], "http://");
}

/// `estimate serve`: the cache's bytes per token and the largest batch, and storage
/// names checked.
#[test]
fn estimate_serve_reports_the_cache_and_the_decode_bound() {
    let out = succeeds_finite(&["estimate", "serve", "--model", "gpt2", "--json"]);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["estimate"]["kv_bytes_per_token"], 36_864.0, "{out}");
    assert!(j["estimate"]["max_batch"].as_u64().unwrap() > 1000, "{out}");
    let fp8 = succeeds_finite(&[
        "estimate", "serve", "--model", "gpt2", "--kv", "fp8", "--json",
    ]);
    let j8: serde_json::Value = serde_json::from_str(&fp8).unwrap();
    assert_eq!(j8["estimate"]["kv_bytes_per_token"], 18_432.0);
    fails_with(
        &["estimate", "serve", "--model", "gpt2", "--weights", "int3"],
        "unknown weight storage",
    );
    fails_with(
        &["estimate", "serve", "--model", "gpt2", "--kv", "int4"],
        "unknown KV storage",
    );
    fails_with(&["estimate", "serve"], "needs a model");
}

#[test]
fn plan_ranks_layouts_and_refuses_what_it_cannot_use() {
    let out = succeeds_finite(&[
        "plan",
        "--model",
        "gpt3-1.3b",
        "--gpus",
        "16",
        "--global-batch",
        "524288",
    ]);
    assert!(
        out.contains("Best layouts") && out.contains("dp 16 × tp 1 × pp 1"),
        "{out}"
    );
    let json = succeeds_finite(&[
        "plan",
        "--model",
        "gpt3-1.3b",
        "--gpus",
        "16",
        "--global-batch",
        "524288",
        "--json",
        "--top",
        "3",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["candidates"].as_array().map(Vec::len), Some(3), "{json}");
    // 1e6 tokens are not whole 2048-token sequences: the error names both.
    let batch = [
        "plan",
        "--model",
        "gpt3-1.3b",
        "--gpus",
        "8",
        "--global-batch",
        "1e6",
    ];
    fails_with(&batch, "sequences of 2048 tokens");
    fails_with(
        &["plan", "--model", "gpt3-1.3b", "--gpus", "8"],
        "--global-batch",
    );
    let eff = [
        "plan",
        "--model",
        "gpt2",
        "--gpus",
        "8",
        "--global-batch",
        "8192",
        "--efficiency",
        "2",
    ];
    fails_with(&eff, "efficiency");
    let nodes = [
        "plan",
        "--model",
        "gpt2",
        "--gpus",
        "16",
        "--global-batch",
        "16384",
        "--nodes",
        "3",
    ];
    fails_with(&nodes, "--nodes 3 does not divide --gpus 16");
    let published = succeeds_finite(&["plan", "--published"]);
    assert!(
        published.contains("1008B") && published.contains("calibrated"),
        "{published}"
    );
}
