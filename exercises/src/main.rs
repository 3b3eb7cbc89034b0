//! The exercise runner: every exercise (and GPU puzzle) with pass/fail, in book order.
//!
//! ```text
//! cargo run -p brrr-exercises                    # all
//! cargo run -p brrr-exercises -- roofline        # those whose name contains "roofline"
//! cargo run -p brrr-exercises --features solutions   # the reference solutions
//! ```
//! Exits with status 1 while any selected exercise fails.

use brrr_exercises::check::Outcome;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs one check, turning a panic in the reader's code into a failure message.
fn run(check: impl FnOnce() -> Outcome) -> Outcome {
    match catch_unwind(AssertUnwindSafe(check)) {
        Ok(outcome) => outcome,
        Err(panic) => Err(format!(
            "panicked: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)")
        )),
    }
}

/// A pass/fail line, and the reason under a failure.
fn report(name: &str, task: &str, file: &str, outcome: &Outcome) -> bool {
    match outcome {
        Ok(()) => {
            println!("  ✓ {name:<28} {task}");
            true
        }
        Err(e) => {
            println!("  ✗ {name:<28} {task}");
            println!("      in {file}:");
            for line in e.lines() {
                println!("      {line}");
            }
            false
        }
    }
}

/// What the run has seen so far.
#[derive(Default)]
struct Tally {
    passed: usize,
    total: usize,
    skipped: usize,
    /// The file of the first failure in book order: where the reader goes next.
    first_failure: Option<String>,
}

impl Tally {
    fn record(&mut self, passed: bool, file: String) {
        self.total += 1;
        if passed {
            self.passed += 1;
        } else if self.first_failure.is_none() {
            self.first_failure = Some(file);
        }
    }
}

/// Runs `exercises`, printing each chapter's title before its first exercise.
fn run_exercises(exercises: &[brrr_exercises::Exercise], tally: &mut Tally) {
    let mut chapter = "";
    for ex in exercises {
        if ex.chapter != chapter {
            chapter = ex.chapter;
            println!("\n{chapter}");
        }
        let outcome = run(ex.check);
        let passed = report(ex.module, ex.task, &ex.file(), &outcome);
        tally.record(passed, ex.file());
    }
}

/// Runs the GPU puzzles on a wgpu adapter, or reports them SKIPPED without one.
fn run_puzzles(puzzles: Vec<brrr_exercises::puzzles::Puzzle>, tally: &mut Tally) {
    if puzzles.is_empty() {
        return;
    }
    let checker = brrr_exercises::puzzles::gpu::Checker::new();
    match &checker {
        Ok(c) => println!("\nGPU puzzles (on {})", c.adapter()),
        Err(why) => println!("\nGPU puzzles: SKIPPED, no wgpu adapter ({why})"),
    }
    let seed = brrr_exercises::check::seed();
    for p in puzzles {
        let Ok(c) = &checker else {
            println!("  - {:<28} SKIPPED", p.id);
            tally.skipped += 1;
            continue;
        };
        let outcome = run(|| c.check(&p, p.source(), seed));
        let passed = report(p.id, p.task, &p.file(), &outcome);
        if passed {
            // What the passing kernel cost in global memory, counted by a second run.
            match c.count(&p, p.source(), &p.random_inputs(seed)) {
                Ok(counts) => println!("      {}", counts.summary()),
                Err(why) => println!("      global-memory accesses not counted: {why}"),
            }
        }
        tally.record(passed, p.file());
    }
}

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f));
    // The reader's panics become failure lines; their default messages would only clutter.
    std::panic::set_hook(Box::new(|_| {}));
    let mode = if cfg!(feature = "solutions") {
        "reference solutions (--features solutions)"
    } else {
        "your code (the stubs until you fill them in)"
    };
    println!("brrr exercises: {mode}");
    let all = brrr_exercises::all();
    // The book puts the GPU puzzles right after the kernels chapter.
    let last_kernels = all
        .iter()
        .rposition(|ex| ex.module.starts_with("kernels::"))
        .unwrap_or(0);
    let (before, after): (Vec<_>, Vec<_>) = all
        .into_iter()
        .enumerate()
        .filter(|(_, ex)| wanted(ex.module))
        .partition(|(i, _)| *i <= last_kernels);
    let strip = |v: Vec<(usize, _)>| v.into_iter().map(|(_, ex)| ex).collect::<Vec<_>>();
    let puzzles: Vec<_> = brrr_exercises::puzzles::all()
        .into_iter()
        .filter(|p| wanted(&format!("puzzles::{}", p.id)))
        .collect();
    let mut tally = Tally::default();
    run_exercises(&strip(before), &mut tally);
    run_puzzles(puzzles, &mut tally);
    run_exercises(&strip(after), &mut tally);
    let Tally {
        passed,
        total,
        skipped,
        first_failure,
    } = tally;
    if skipped > 0 {
        println!("\n{passed}/{total} passed, {skipped} SKIPPED (no wgpu adapter)");
    } else {
        println!("\n{passed}/{total} passed");
    }
    match first_failure {
        Some(file) => {
            println!("next: {file}");
            std::process::exit(1);
        }
        None if total > 0 => println!("next: nothing left here, every one selected passes"),
        None => println!("next: no exercise's name contains {}", filter.join(" or ")),
    }
}
