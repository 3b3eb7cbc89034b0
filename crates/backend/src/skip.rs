//! Reporting something absent (a GPU, a driver, a compiler) as skipped, by name, so that
//! the test command can list every skip in its summary instead of counting it as a pass.

/// The environment variable naming a file that collects skip lines. The test command
/// sets it; a test run without it only prints.
pub const SKIP_LOG_ENV: &str = "BRRR_SKIP_LOG";

/// Prints `WHAT: SKIPPED (reason)` to stderr and, where [`SKIP_LOG_ENV`] names a file,
/// appends the same line to it. Test runners capture the output of passing tests, so the
/// file is how a skip reaches the summary of the test command.
pub fn report_skipped(what: &str, reason: &str) {
    let line = format!("{what}: SKIPPED ({reason})");
    eprintln!("{line}");
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        use std::io::Write;
        // One short append per skip, in one write: tests in parallel processes append to
        // the same file, and `writeln!` on a `File` may split the line and its newline
        // into two writes that another process's line can fall between. A failure to
        // record it must not fail the test.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut f) = file {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    #[test]
    fn a_skip_is_appended_to_the_named_file() {
        let dir = std::env::temp_dir().join(format!("brrr-skip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips");
        // SAFETY: no other test of this crate reads or writes this variable.
        unsafe { std::env::set_var(super::SKIP_LOG_ENV, &log) };
        super::report_skipped("gpu", "none here");
        super::report_skipped("nvrtc", "not found");
        unsafe { std::env::remove_var(super::SKIP_LOG_ENV) };
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            text,
            "gpu: SKIPPED (none here)\nnvrtc: SKIPPED (not found)\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
