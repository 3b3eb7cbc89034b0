//! The feature matrix: every training flag × every layout, generated from the two lists
//! below (not a hand-written subset). Each cell either trains and matches the
//! one-device run with the same flag (training and validation losses, within a stated
//! tolerance) or is refused before anything is written, with an error naming both the
//! flag and the layout.
//!
//! The table of results (worst difference per cell) is printed, and written to the
//! file named by `BRRR_MATRIX_OUT` when it is set (the README's table comes from it).

use brrr::metrics::read_rows;
use brrr::train::{self, AmpArg, AttentionArg, TrainArgs};
use brrr_checkpoint::Strategy;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A layout: its name (its flags) and how it sets them.
struct Layout {
    name: &'static str,
    set: fn(&mut TrainArgs),
}

/// A feature: its flags, how it sets them, and the tolerance its cells are held to.
struct Feature {
    name: &'static str,
    set: fn(&mut TrainArgs, &Fixture),
    /// Largest relative difference from one device allowed for a loss.
    tol: f32,
    /// The flag a refusal must name.
    flag: &'static str,
}

fn layouts() -> Vec<Layout> {
    fn pp(a: &mut TrainArgs, s: &str) {
        a.pp = Some(2);
        a.schedule = Some(s.into());
    }
    vec![
        Layout {
            name: "one device",
            set: |_| {},
        },
        Layout {
            name: "--dp 2",
            set: |a| a.dp = Some(2),
        },
        Layout {
            name: "--tp 2",
            set: |a| a.tp = Some(2),
        },
        Layout {
            name: "--tp 2 --sp",
            set: |a| {
                a.tp = Some(2);
                a.sp = true;
            },
        },
        Layout {
            name: "--pp 2 gpipe",
            set: |a| pp(a, "gpipe"),
        },
        Layout {
            name: "--pp 2 1f1b",
            set: |a| pp(a, "1f1b"),
        },
        Layout {
            name: "--pp 2 interleaved:2",
            set: |a| pp(a, "interleaved:2"),
        },
        Layout {
            name: "--pp 2 zb-h1",
            set: |a| pp(a, "zb-h1"),
        },
        Layout {
            name: "--pp 2 zb-h2",
            set: |a| pp(a, "zb-h2"),
        },
        Layout {
            name: "--dp 2 --tp 2",
            set: |a| {
                a.dp = Some(2);
                a.tp = Some(2);
            },
        },
        Layout {
            name: "--dp 2 --pp 2",
            set: |a| {
                a.dp = Some(2);
                pp(a, "1f1b");
            },
        },
        Layout {
            name: "--dp 2 --tp 2 --pp 2",
            set: |a| {
                a.dp = Some(2);
                a.tp = Some(2);
                pp(a, "1f1b");
            },
        },
    ]
}

/// f32 runs agree with one device to f32 rounding (partial sums in another order);
/// 16-bit runs round each partial product to bf16/fp16, so their sums differ more
/// (measured at most 4e-5, under `--tp`, whose all-reduced partial products are rounded
/// to 16 bits again).
const F32: f32 = 1e-4;
const HALF: f32 = 1e-3;

fn features() -> Vec<Feature> {
    fn ck(a: &mut TrainArgs, s: &str) {
        a.checkpoint = Some(s.parse::<Strategy>().unwrap());
    }
    vec![
        Feature {
            name: "f32",
            set: |_, _| {},
            tol: F32,
            flag: "",
        },
        Feature {
            name: "--amp bf16",
            set: |a, _| a.amp = Some(AmpArg::Bf16),
            tol: HALF,
            flag: "--amp",
        },
        Feature {
            name: "--amp fp16",
            set: |a, _| a.amp = Some(AmpArg::Fp16),
            tol: HALF,
            flag: "--amp",
        },
        Feature {
            name: "--checkpoint every:2",
            set: |a, _| ck(a, "every:2"),
            tol: F32,
            flag: "--checkpoint",
        },
        Feature {
            name: "--checkpoint sqrt",
            set: |a, _| ck(a, "sqrt"),
            tol: F32,
            flag: "--checkpoint",
        },
        Feature {
            name: "--checkpoint selective",
            set: |a, _| ck(a, "selective"),
            tol: F32,
            flag: "--checkpoint",
        },
        Feature {
            name: "--zero 1",
            set: |a, _| a.zero = Some(1),
            tol: F32,
            flag: "--zero",
        },
        Feature {
            name: "--zero 2",
            set: |a, _| a.zero = Some(2),
            tol: F32,
            flag: "--zero",
        },
        Feature {
            name: "--zero 3",
            set: |a, _| a.zero = Some(3),
            tol: F32,
            flag: "--zero",
        },
        Feature {
            name: "--bucket-mb 0.01",
            set: |a, _| a.bucket_mb = Some(0.01),
            tol: F32,
            flag: "--bucket-mb",
        },
        Feature {
            name: "--attention composite",
            set: |a, _| a.attention = Some(AttentionArg::Composite),
            tol: F32,
            flag: "--attention",
        },
        Feature {
            name: "--optimizer adamw8bit",
            set: |a, _| a.optimizer = Some(brrr_nn::Optimizer::AdamW8bit),
            tol: F32,
            flag: "--optimizer",
        },
        Feature {
            name: "--optimizer galore:8",
            set: |a, _| a.optimizer = Some("galore:8".parse().unwrap()),
            tol: F32,
            flag: "--optimizer",
        },
        Feature {
            name: "--offload",
            set: |a, _| a.offload = true,
            tol: F32,
            flag: "--offload",
        },
        Feature {
            name: "--grad-accum 1",
            set: |a, _| a.grad_accum = Some(1),
            tol: F32,
            flag: "--micro-batches",
        },
        Feature {
            name: "--data",
            set: |a, f| a.data = Some(f.shards.clone()),
            tol: F32,
            flag: "--data",
        },
        Feature {
            name: "--data --doc-mask",
            set: |a, f| {
                a.data = Some(f.shards.clone());
                a.doc_mask = true;
            },
            tol: F32,
            flag: "--doc-mask",
        },
        Feature {
            name: "--prefetch 0",
            set: |a, _| a.prefetch = Some(0),
            tol: F32,
            flag: "--prefetch",
        },
        Feature {
            name: "--prefetch 3",
            set: |a, _| a.prefetch = Some(3),
            tol: F32,
            flag: "--prefetch",
        },
        Feature {
            name: "--stop-after 2, --resume",
            set: |_, _| {},
            tol: F32,
            flag: "--resume",
        },
        Feature {
            name: "--trace",
            set: |a, f| a.trace = Some(f.dir.join("trace.json")),
            tol: F32,
            flag: "--trace",
        },
        Feature {
            name: "--profile",
            set: |a, _| a.profile = true,
            tol: F32,
            flag: "--profile",
        },
    ]
}

/// What every cell shares: a scratch directory and token shards.
struct Fixture {
    dir: PathBuf,
    shards: PathBuf,
}

fn fixture(dir: &Path) -> Fixture {
    Fixture {
        dir: dir.to_path_buf(),
        shards: crate::common::prepare_shards(dir).0,
    }
}

fn base(out: PathBuf) -> TrainArgs {
    TrainArgs {
        steps: Some(3),
        batch_size: Some(4),
        seq_len: Some(16),
        grad_accum: Some(2),
        warmup_steps: Some(1),
        eval_every: Some(3),
        eval_batches: Some(2),
        n_layer: Some(4),
        n_head: Some(4),
        n_embd: Some(32),
        block_size: Some(16),
        synthetic: true,
        out: Some(out),
        quiet: true,
        force: true,
        ..TrainArgs::default()
    }
}

/// A cell's outcome: its losses (training, validation) per step, or the refusal.
type Cell = Result<Vec<(f32, Option<f32>)>, String>;

fn rows(out: &Path) -> Vec<(f32, Option<f32>)> {
    read_rows(out.join("metrics.csv"))
        .unwrap()
        .iter()
        .map(|r| (r.loss, r.val_loss))
        .collect()
}

fn run_cell(layout: &Layout, feature: &Feature, fx: &Fixture, id: usize) -> Cell {
    let out = fx.dir.join(format!("cell{id}"));
    let mut a = base(out.clone());
    (layout.set)(&mut a);
    (feature.set)(&mut a, fx);
    if a.data.is_some() {
        a.synthetic = false;
    }
    if feature.name.starts_with("--stop-after") {
        a.stop_after = Some(2);
        if let Err(e) = train::run(&a) {
            assert!(
                !out.join("metrics.csv").exists(),
                "refused ({e}), yet wrote {}",
                out.display()
            );
            return Err(e.to_string());
        }
        let resume = TrainArgs {
            resume: Some(out.clone()),
            out: None,
            stop_after: None,
            force: false,
            ..a
        };
        train::run(&resume).map_err(|e| format!("resuming: {e}"))?;
        return Ok(rows(&out));
    }
    match train::run(&a) {
        Ok(_) => {
            if let Some(trace) = &a.trace {
                let written = std::fs::metadata(trace).is_ok_and(|m| m.len() > 0);
                assert!(written, "{}: no trace", trace.display());
            }
            Ok(rows(&out))
        }
        Err(e) => {
            assert!(
                !out.join("metrics.csv").exists(),
                "refused ({e}), yet wrote {}",
                out.display()
            );
            Err(e.to_string())
        }
    }
}

/// The worst relative difference of `got` from `want`, losses and validation losses.
fn worst(got: &[(f32, Option<f32>)], want: &[(f32, Option<f32>)]) -> Result<f32, String> {
    if got.len() != want.len() {
        return Err(format!("{} rows, one device has {}", got.len(), want.len()));
    }
    let mut w = 0.0f32;
    for ((a, va), (b, vb)) in got.iter().zip(want) {
        w = w.max((a - b).abs() / b.abs());
        match (va, vb) {
            (Some(x), Some(y)) => w = w.max((x - y).abs() / y.abs()),
            (None, None) => {}
            other => return Err(format!("validation rows differ: {other:?}")),
        }
    }
    Ok(w)
}

#[test]
fn every_flag_in_every_layout_matches_one_device_or_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = fixture(tmp.path());
    let (layouts, mut features) = (layouts(), features());
    // While working on one feature: `BRRR_MATRIX_FEATURES=doc-mask` runs only the rows
    // whose name contains it (the test command runs them all).
    if let Ok(only) = std::env::var("BRRR_MATRIX_FEATURES") {
        features.retain(|f| f.name.contains(only.as_str()));
    }
    let mut table = String::from("| flag |");
    for l in &layouts {
        let _ = write!(table, " {} |", l.name);
    }
    table.push_str("\n|---|");
    table.push_str(&"---|".repeat(layouts.len()));
    table.push('\n');
    let (mut ran, mut refused, mut failures) = (0, 0, Vec::new());
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    let mut id = 0;
    for f in &features {
        let _ = write!(table, "| `{}` |", f.name);
        let mut reference: Option<Cell> = None;
        for l in &layouts {
            id += 1;
            let cell = run_cell(l, f, &fx, id);
            let text = match (&cell, &reference) {
                (Ok(got), None | Some(Ok(_))) => {
                    let want = match &reference {
                        Some(Ok(w)) => w,
                        _ => got,
                    };
                    match worst(got, want) {
                        Ok(w) if w <= f.tol => {
                            ran += 1;
                            match w {
                                0.0 => "0".into(),
                                w => format!("{w:.0e}"),
                            }
                        }
                        Ok(w) => {
                            failures.push(format!(
                                "{} × {}: off by {w:e} (> {:e})",
                                f.name, l.name, f.tol
                            ));
                            format!("**{w:.0e}**")
                        }
                        Err(e) => {
                            failures.push(format!("{} × {}: {e}", f.name, l.name));
                            "**rows**".into()
                        }
                    }
                }
                (Ok(_), Some(Err(_))) => {
                    failures.push(format!(
                        "{} × {}: ran, but one device refuses it",
                        f.name, l.name
                    ));
                    "**ran**".into()
                }
                (Err(e), _) => {
                    let names_layout = ["--dp", "--tp", "--sp", "--pp"]
                        .iter()
                        .any(|x| e.contains(x));
                    if l.name == "one device" || !e.contains(f.flag) || !names_layout {
                        failures.push(format!("{} × {}: {e}", f.name, l.name));
                    }
                    refused += 1;
                    // The reason, without the rank or path that differs per cell.
                    let why = e.split_once(": ").map_or(e.as_str(), |(_, w)| w);
                    let why = why.trim_start_matches("invalid argument: ");
                    let why = why.split(" (this run").next().unwrap_or(why).to_string();
                    *reasons.entry(why).or_insert(0) += 1;
                    "refused".into()
                }
            };
            if reference.is_none() {
                reference = Some(cell);
            }
            let _ = write!(table, " {text} |");
        }
        table.push('\n');
    }
    let cells = layouts.len() * features.len();
    let _ = writeln!(
        table,
        "\n{cells} cells ({} flags × {} layouts): {ran} train and match one device, {refused} are refused.",
        features.len(),
        layouts.len()
    );
    if !reasons.is_empty() {
        let _ = writeln!(table, "\nRefusals, by reason (cells):\n");
    }
    for (why, n) in &reasons {
        let _ = writeln!(table, "- {why} ({n})");
    }
    println!("{table}");
    if let Ok(path) = std::env::var("BRRR_MATRIX_OUT") {
        std::fs::write(path, &table).unwrap();
    }
    assert!(failures.is_empty(), "{}\n{table}", failures.join("\n"));
}
