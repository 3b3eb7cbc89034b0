//! `brrr launch` takes its ranks with it: a SIGINT, SIGTERM or SIGKILL sent to the
//! launcher alone leaves no rank running (they ran on as orphans).
#![cfg(target_os = "linux")]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The pids whose parent is `parent` (from /proc/PID/stat's fourth field).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| stat(*pid).is_some_and(|(_, ppid)| ppid == parent))
        .collect()
}

/// A process's state letter and parent pid.
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let mut rest = text[text.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Running, not gone and not a zombie.
fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z' && state != 'X')
}

fn launch(out: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_brrr"))
        .args([
            "launch",
            "--transport",
            "socket",
            "--nproc",
            "2",
            "--grace-s",
            "5",
            "--",
        ])
        .args([
            "train",
            "--synthetic",
            "--steps",
            "1000000",
            "--quiet",
            "--force",
        ])
        .args([
            "--n-layer",
            "1",
            "--n-embd",
            "32",
            "--n-head",
            "2",
            "--seq-len",
            "16",
        ])
        .args(["--batch-size", "2", "--eval-every", "1000000", "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_rank_ends_when_the_launcher_is_signalled_or_killed() {
    let tmp = tempfile::tempdir().unwrap();
    for sig in ["INT", "TERM", "KILL"] {
        let mut launcher = launch(&tmp.path().join(sig));
        let mut ranks = Vec::new();
        wait_until("both ranks started", Duration::from_secs(30), || {
            ranks = children_of(launcher.id());
            ranks.len() == 2
        });
        // Let them get into training (past the rendezvous).
        std::thread::sleep(Duration::from_millis(500));
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &launcher.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig}");
        wait_until(
            &format!("ranks {ranks:?} gone after SIG{sig} to the launcher"),
            Duration::from_secs(20),
            || ranks.iter().all(|&r| !alive(r)),
        );
        let exit = launcher.wait().unwrap();
        assert!(
            !exit.success(),
            "the launcher reported success after SIG{sig}"
        );
    }
}
