//! A run directory, the same in every layout, as an [`Observer`]:
//!
//! ```text
//! config.toml              the TrainConfig, layout included (what --resume continues)
//! metrics.csv              one row per step (crate::metrics)
//! loss.svg                 drawn at every checkpoint
//! checkpoint.safetensors   one device, and tensor-parallel runs (gathered)
//! dp/dp-rank{r}-of{n}.bin  data-parallel shards (brrr-dp)
//! pp/pp-stage{s}-of{n}…    pipeline stages (brrr-pp)
//! ```
//!
//! The rules: a fresh run refuses a directory that holds a run unless told to replace
//! it ([`RunDir::check_new`] with `force`), and then removes the replaced run's
//! checkpoints so none outlives it; a resumed run trims `metrics.csv` to the step it
//! resumes from, so the finished file equals an uninterrupted run's; temporary files a
//! killed save left are removed. Only the lead rank (world rank 0) writes the shared
//! files; every rank saves its own part of the checkpoint ([`RunDir::follower`]). The
//! lead holds an exclusive lock on `.lock` in the directory while the run lives, so a
//! second `brrr train` into the same directory is refused instead of interleaving its
//! metrics and checkpoints with the first's.

use crate::atomic::write_atomic;
use crate::config::TrainConfig;
use crate::engine::{CHECKPOINT_FILE, Evaluation, Observer, StepStats};
use crate::metrics::{MetricsWriter, Row, plot_csv_svg};
use brrr_backend::{Error, Result};
use std::path::{Path, PathBuf};

/// The lock file the lead rank holds for as long as it writes the directory.
pub const LOCK_FILE: &str = ".lock";
/// The run's configuration.
pub const CONFIG_FILE: &str = "config.toml";
/// One row per step.
pub const METRICS_FILE: &str = "metrics.csv";
/// The loss curve.
pub const PLOT_FILE: &str = "loss.svg";
/// Data-parallel checkpoint shards, one per rank.
pub const DP_DIR: &str = "dp";
/// Pipeline stage checkpoints, one per stage (and tensor rank).
pub const PP_DIR: &str = "pp";

/// The files of a run directory (beside the shard folders).
pub const RUN_FILES: [&str; 4] = [CONFIG_FILE, METRICS_FILE, PLOT_FILE, CHECKPOINT_FILE];

/// The lead rank's view of a run directory (or a follower's: see [`RunDir::follower`]).
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    /// `None` on followers.
    metrics: Option<MetricsWriter>,
    /// The evaluation of the step being reported (`on_eval` comes before `on_step`).
    pending_val: Option<Evaluation>,
    /// The lead's lock on [`LOCK_FILE`], released when the run ends (`None` on followers).
    _lock: Option<DirLock>,
}

impl RunDir {
    /// Errors if `dir` holds a run and `force` is off; writes nothing. Call it before
    /// anything else of the run is written or computed.
    pub fn check_new(dir: &Path, force: bool) -> Result<()> {
        if force {
            return Ok(());
        }
        let mut found: Vec<&str> = RUN_FILES
            .into_iter()
            .filter(|f| dir.join(f).exists())
            .collect();
        found.extend(
            [DP_DIR, PP_DIR]
                .into_iter()
                .filter(|d| has_files(&dir.join(d))),
        );
        if found.is_empty() {
            return Ok(());
        }
        Err(Error::file(
            dir,
            format!(
                "already holds a run ({}): pass --resume {} to continue it, --force to \
                 replace it, or another --out",
                found.join(", "),
                dir.display()
            ),
        ))
    }

    /// A fresh run in `dir` (the lead rank): creates the directory, removes a replaced
    /// run's checkpoints and plot, and writes `config.toml` and the metrics header.
    pub fn create(dir: &Path, cfg: &TrainConfig) -> Result<Self> {
        make_dir(dir)?;
        let lock = lock_dir(dir)?;
        remove_stale_temp_files(dir)?;
        for f in [CHECKPOINT_FILE, PLOT_FILE] {
            remove_if_present(&dir.join(f))?;
        }
        for d in [DP_DIR, PP_DIR] {
            remove_checkpoint_folder(&dir.join(d))?;
        }
        write_config(dir, cfg)?;
        Ok(RunDir {
            dir: dir.to_path_buf(),
            metrics: Some(MetricsWriter::create(dir.join(METRICS_FILE))?),
            pending_val: None,
            _lock: Some(lock),
        })
    }

    /// The run saved in `from`, resuming after step `start_step` in `dir` (the same
    /// directory, or a new one that receives copies of its config and metrics): writes
    /// `cfg` (what `--resume` changed) and trims the metrics to `start_step`.
    pub fn resume(dir: &Path, from: &Path, cfg: &TrainConfig, start_step: u64) -> Result<Self> {
        make_dir(dir)?;
        let lock = lock_dir(dir)?;
        remove_stale_temp_files(dir)?;
        if !same_dir(dir, from) {
            for f in [CONFIG_FILE, METRICS_FILE] {
                std::fs::copy(from.join(f), dir.join(f))
                    .map_err(|e| Error::io(format!("copying {f} from {}", from.display()), e))?;
            }
        }
        write_config(dir, cfg)?;
        Ok(RunDir {
            dir: dir.to_path_buf(),
            metrics: Some(MetricsWriter::resume(dir.join(METRICS_FILE), start_step)?),
            pending_val: None,
            _lock: Some(lock),
        })
    }

    /// A rank other than the lead: it saves its own part of each checkpoint into `dir`
    /// and writes nothing else.
    pub fn follower(dir: &Path) -> Self {
        RunDir {
            dir: dir.to_path_buf(),
            metrics: None,
            pending_val: None,
            _lock: None,
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads and validates `config.toml` of the run in `dir`.
    pub fn read_config(dir: &Path) -> Result<TrainConfig> {
        let path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::io(format!("{}: reading run config", path.display()), e))?;
        let cfg: TrainConfig = toml::from_str(&text)
            .map_err(|e| Error::file(&path, format!("invalid config: {e}")))?;
        cfg.validate()?;
        Ok(cfg)
    }
}

impl Observer for RunDir {
    fn on_eval(&mut self, eval: &Evaluation) -> Result<()> {
        self.pending_val = Some(*eval);
        Ok(())
    }

    fn on_step(&mut self, s: &StepStats) -> Result<()> {
        let val = self.pending_val.take().filter(|e| e.step == s.step);
        match &mut self.metrics {
            Some(m) => m.append(&Row::from_stats(s, val.map(|e| e.loss))),
            None => Ok(()),
        }
    }

    fn checkpoint_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    fn on_checkpoint(&mut self, _step: u64) -> Result<()> {
        match &self.metrics {
            Some(m) => plot_csv_svg(m.path(), self.dir.join(PLOT_FILE)),
            None => Ok(()),
        }
    }
}

fn make_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("{}: creating the run directory", dir.display()), e))
}

/// An exclusive lock on a run directory: the open, locked [`LOCK_FILE`], removed when
/// the run ends so a finished directory holds only the run's files.
#[derive(Debug)]
struct DirLock {
    file: std::fs::File,
    path: PathBuf,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Removed while still locked, so no other writer can hold the old file meanwhile.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// Takes the exclusive lock on `dir`'s [`LOCK_FILE`] without waiting: another process
/// holding it is writing this run now. The operating system releases the lock when the
/// file closes, so a killed run never leaves the directory locked.
fn lock_dir(dir: &Path) -> Result<DirLock> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| {
            Error::io(
                format!("{}: opening the run's lock file", path.display()),
                e,
            )
        })?;
    match file.try_lock() {
        Ok(()) => Ok(DirLock { file, path }),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::file(
            dir,
            "another brrr train is writing this run directory now (it holds .lock): wait \
             for it to finish, or pass another --out",
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(
            format!("{}: locking the run directory", path.display()),
            e,
        )),
    }
}

fn has_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(format!("{}: removing", path.display()), e))
        }
        _ => Ok(()),
    }
}

/// Removes the checkpoint files of a shard folder (`dp/`, `pp/`) of a replaced run:
/// only files with the `.bin` extension, so nothing else a user put there is lost.
fn remove_checkpoint_folder(dir: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "bin") {
            remove_if_present(&path)?;
        }
    }
    Ok(())
}

fn write_config(dir: &Path, cfg: &TrainConfig) -> Result<()> {
    let text = toml::to_string_pretty(cfg)
        .map_err(|e| Error::invalid("train", format!("serialising config: {e}")))?;
    write_atomic(dir.join(CONFIG_FILE), text.as_bytes())
}

/// Whether `a` and `b` name the same directory.
pub fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Removes `.NAME.tmp*` files of the run's own files, which [`write_atomic`] leaves
/// only when the process was killed while saving.
fn remove_stale_temp_files(dir: &Path) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("{}: listing", dir.display()), e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if RUN_FILES
            .iter()
            .any(|f| name.starts_with(&format!(".{f}.tmp")))
        {
            remove_if_present(&entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Observer;

    fn stats(step: u64) -> StepStats {
        StepStats {
            step,
            loss: 5.0 - step as f32 / 10.0,
            grad_norm: 1.0,
            lr: 1e-3,
            tokens: 64,
            loss_scale: 1.0,
            skipped: false,
            seconds: Some(0.01),
            peak_bytes: 0,
            activation_peak_bytes: 0,
        }
    }

    /// Two writers of one run directory: the second is refused while the first lives,
    /// and the directory is free again once it ends.
    #[test]
    fn a_second_writer_is_refused_while_the_first_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let cfg = TrainConfig::default();
        let first = RunDir::create(&dir, &cfg).unwrap();
        let e = RunDir::create(&dir, &cfg).unwrap_err().to_string();
        assert!(e.contains("another brrr train is writing"), "{e}");
        let e = RunDir::resume(&dir, &dir, &cfg, 0).unwrap_err().to_string();
        assert!(e.contains("another brrr train is writing"), "{e}");
        drop(first);
        assert!(
            !dir.join(LOCK_FILE).exists(),
            "the finished run left its lock file"
        );
        RunDir::create(&dir, &cfg).unwrap();
    }

    #[test]
    fn a_run_is_refused_unless_forced_and_a_forced_run_leaves_no_old_shards() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        RunDir::check_new(&dir, false).unwrap();
        let cfg = TrainConfig::default();
        let mut run = RunDir::create(&dir, &cfg).unwrap();
        run.on_step(&stats(1)).unwrap();
        std::fs::create_dir_all(dir.join(DP_DIR)).unwrap();
        std::fs::write(dir.join(DP_DIR).join("dp-rank0-of2.bin"), b"old").unwrap();
        std::fs::write(dir.join(DP_DIR).join("notes.txt"), b"mine").unwrap();
        let e = RunDir::check_new(&dir, false).unwrap_err().to_string();
        assert!(e.contains("--force") && e.contains("dp"), "{e}");
        RunDir::check_new(&dir, true).unwrap();
        drop(run); // the first run has ended (its lock with it)
        RunDir::create(&dir, &cfg).unwrap();
        assert!(!dir.join(DP_DIR).join("dp-rank0-of2.bin").exists());
        assert!(
            dir.join(DP_DIR).join("notes.txt").exists(),
            "not ours: kept"
        );
        assert_eq!(RunDir::read_config(&dir).unwrap(), cfg);
    }

    #[test]
    fn a_resumed_run_trims_the_metrics_to_its_checkpoint() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let cfg = TrainConfig::default();
        let mut run = RunDir::create(&dir, &cfg).unwrap();
        for s in 1..=5 {
            run.on_step(&stats(s)).unwrap();
        }
        run.on_checkpoint(5).unwrap();
        assert!(dir.join(PLOT_FILE).exists());
        let elsewhere = tmp.path().join("other");
        let mut run = RunDir::resume(&elsewhere, &dir, &cfg, 3).unwrap();
        run.on_step(&stats(4)).unwrap();
        let steps: Vec<u64> = crate::metrics::read_rows(elsewhere.join(METRICS_FILE))
            .unwrap()
            .iter()
            .map(|r| r.step)
            .collect();
        assert_eq!(steps, [1, 2, 3, 4]);
        assert_eq!(run.checkpoint_dir(), Some(elsewhere.as_path()));
        assert!(RunDir::follower(&dir).checkpoint_dir().is_some());
    }
}
