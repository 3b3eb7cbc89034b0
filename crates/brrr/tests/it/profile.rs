//! `brrr train --profile`: the table is printed, the trace holds op spans inside the
//! phases, and the run trains exactly as without profiling, on one device or many.

use brrr::metrics::read_rows;
use std::path::Path;
use std::process::Command;

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

fn small(out: &Path) -> Vec<String> {
    [
        "train",
        "--steps",
        "3",
        "--batch-size",
        "2",
        "--seq-len",
        "16",
        "--n-layer",
        "2",
        "--n-embd",
        "32",
        "--n-head",
        "2",
        "--eval-every",
        "2",
        "--eval-batches",
        "1",
        "--quiet",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([out.display().to_string()])
    .collect()
}

fn losses(dir: &Path) -> Vec<(u32, u32)> {
    read_rows(dir.join("metrics.csv"))
        .unwrap()
        .iter()
        .map(|r| (r.loss.to_bits(), r.grad_norm.to_bits()))
        .collect()
}

#[test]
fn profile_prints_the_table_and_traces_ops_inside_phases() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace.json");
    let mut argv = small(&tmp.path().join("profiled"));
    argv.extend([
        "--profile".into(),
        "--trace".into(),
        trace.display().to_string(),
    ]);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let (ok, text) = brrr(&argv);
    assert!(ok, "{text}");
    for needle in [
        "op profile: 2 step(s) after the first",
        "gemm",
        "adamw",
        "% wall",
        "longest by op and shape",
        "by phase of the step",
        "zero_grad",
        "backward",
        "by layer, all blocks together",
        "h.*.attn forward",
        "h.*.mlp backward",
        "embedding forward",
        "head backward",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    // The by-shape table names products as `gemm BATCHxMxNxK tt dtype`.
    let by_shape = |l: &str| l.starts_with("gemm ") && l.contains('x') && l.contains(" f32 ");
    assert!(text.lines().any(by_shape), "{text}");
    assert!(text.contains("regimes against this CPU"), "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let gemm = events
        .iter()
        .find(|e| e["cat"] == "op" && e["name"] == "gemm")
        .expect("a gemm span");
    assert!(gemm["args"]["flops"].as_u64().unwrap() > 0, "{gemm}");
    assert!(events.iter().any(|e| e["name"] == "forward"));

    // The same run without --profile trains bit for bit the same.
    let argv = small(&tmp.path().join("plain"));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let (ok, text) = brrr(&argv);
    assert!(ok, "{text}");
    assert_eq!(
        losses(&tmp.path().join("plain")),
        losses(&tmp.path().join("profiled"))
    );
}

/// A parallel run is profiled too: every rank runs on a profiled backend, the table is
/// world rank 0's and says so, and it trains bit for bit as without profiling.
#[test]
fn profile_times_rank_0_of_a_parallel_run() {
    let tmp = tempfile::tempdir().unwrap();
    for layout in [&["--dp", "2"][..], &["--pp", "2"]] {
        let name = layout.join("");
        let run = |dir: &str, profile: bool| {
            let mut argv = small(&tmp.path().join(format!("{name}{dir}")));
            argv.extend(layout.iter().map(|s| s.to_string()));
            if profile {
                argv.push("--profile".into());
            }
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            brrr(&argv)
        };
        let (ok, text) = run("profiled", true);
        assert!(ok, "{text}");
        for needle in [
            "one rank of 2",
            "op profile: 2 step(s) after the first",
            "gemm",
        ] {
            assert!(
                text.contains(needle),
                "{layout:?}: no {needle:?} in:\n{text}"
            );
        }
        let (ok, text) = run("plain", false);
        assert!(ok, "{text}");
        assert_eq!(
            losses(&tmp.path().join(format!("{name}plain"))),
            losses(&tmp.path().join(format!("{name}profiled"))),
            "{layout:?}"
        );
    }
}
