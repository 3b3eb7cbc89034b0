//! What several test files share: a small dataset of token shards.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Prepares byte-token shards in `dir/shards` from a small text and a JSON-lines file
/// of 40 documents (`brrr data prepare`, 1500 tokens a shard); returns the directory
/// and what the command printed.
pub fn prepare_shards(dir: &Path) -> (PathBuf, String) {
    let text = "It was the best of times, it was the worst of times, it was the age of wisdom. "
        .repeat(60);
    std::fs::write(dir.join("a.txt"), &text).unwrap();
    let lines: String = (0..40)
        .map(|i| format!("{{\"text\": \"document {i}: it was the epoch of belief\"}}\n"))
        .collect();
    std::fs::write(dir.join("b.jsonl"), lines).unwrap();
    let out = dir.join("shards");
    let run = Command::new(env!("CARGO_BIN_EXE_brrr"))
        .args([
            "data",
            "prepare",
            "--quiet",
            "--shard-tokens",
            "1500",
            "--out",
        ])
        .arg(&out)
        .arg(dir.join("a.txt"))
        .arg(dir.join("b.jsonl"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&run.stderr)
    );
    (out, stdout)
}
