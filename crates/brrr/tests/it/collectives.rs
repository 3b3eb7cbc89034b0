//! `brrr launch` and `brrr bench collectives` end to end: ranks as processes over the
//! socket transport on loopback.

use std::process::Command;
use std::time::{Duration, Instant};

fn brrr() -> Command {
    Command::new(env!("CARGO_BIN_EXE_brrr"))
}

#[test]
fn launched_ranks_compute_every_collective_and_algorithm_correctly() {
    let out = brrr()
        .args([
            "launch",
            // Explicit: a binary built with `mpi` launches over MPI by default.
            "--transport",
            "socket",
            "--nproc",
            "4",
            "--",
            "bench",
            "collectives",
            "--check",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("on 4 ranks over socket: 0 wrong elements"),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("check:").count(),
        1,
        "only rank 0 prints: {stdout}"
    );
}

#[test]
fn killing_one_rank_mid_collective_fails_the_others_within_the_timeout() {
    let t0 = Instant::now();
    let out = brrr()
        .args([
            "launch",
            "--transport",
            "socket",
            "--nproc",
            "4",
            "--grace-s",
            "20",
            "--",
            "bench",
            "collectives",
        ])
        .args([
            "--ops",
            "all-reduce",
            "--algorithms",
            "ring",
            "--max-bytes",
            "16777216",
        ])
        .args([
            "--budget-bytes",
            "1073741824",
            "--die-rank",
            "2",
            "--die-after-ms",
            "500",
        ])
        .env("BRRR_COLL_TIMEOUT_S", "5")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("rank 2: exiting on purpose"), "{stderr}");
    // Every surviving rank fails on its own, with an error that names a peer...
    for r in [0, 1, 3] {
        assert!(
            stderr.contains(&format!("rank {r} (exit 1)")),
            "rank {r}: {stderr}"
        );
    }
    assert!(
        stderr.contains("rank 2") && stderr.contains("lost its connection"),
        "{stderr}"
    );
    // ...well within timeout + grace: nobody had to be killed.
    assert!(!stderr.contains("stopping rank"), "{stderr}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

#[test]
fn the_in_process_bench_writes_json_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("busbw.svg");
    let out = brrr()
        .args([
            "bench",
            "collectives",
            "--nproc",
            "3",
            "--json",
            "--ops",
            "all-reduce,all-gather",
        ])
        .args(["--max-bytes", "65536", "--budget-bytes", "1048576", "--svg"])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    // all-reduce: 5 algorithms, all-gather: 3; sizes 256 B .. 64 KiB by 4 = 5.
    assert_eq!(rows.len(), (5 + 3) * 5);
    assert!(
        rows.iter()
            .all(|r| r["wrong"] == 0 && r["busbw_gbs"].as_f64().unwrap() > 0.0)
    );
    let ring = rows
        .iter()
        .find(|r| r["op"] == "all-reduce" && r["algorithm"] == "ring")
        .unwrap();
    assert!(ring["model_us"].as_f64().is_some());
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}
