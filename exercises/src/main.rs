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
    let (mut passed, mut total, mut skipped) = (0, 0, 0);
    let mut first_failure: Option<String> = None;
    let mut chapter = "";
    for ex in brrr_exercises::all() {
        if !wanted(ex.module) {
            continue;
        }
        if ex.chapter != chapter {
            chapter = ex.chapter;
            println!("\n{chapter}");
        }
        let outcome = run(ex.check);
        total += 1;
        if report(ex.module, ex.task, &ex.file(), &outcome) {
            passed += 1;
        } else if first_failure.is_none() {
            first_failure = Some(ex.file());
        }
    }
    let puzzles: Vec<_> = brrr_exercises::puzzles::all()
        .into_iter()
        .filter(|p| wanted(&format!("puzzles::{}", p.id)))
        .collect();
    if !puzzles.is_empty() {
        let checker = brrr_exercises::puzzles::gpu::Checker::new();
        match &checker {
            Ok(c) => println!("\nGPU puzzles (on {})", c.adapter()),
            Err(why) => println!("\nGPU puzzles: SKIPPED, no wgpu adapter ({why})"),
        }
        let seed = brrr_exercises::check::seed();
        for p in puzzles {
            let Ok(c) = &checker else {
                println!("  - {:<28} SKIPPED", p.id);
                skipped += 1;
                continue;
            };
            let outcome = run(|| c.check(&p, p.source(), seed));
            total += 1;
            if report(p.id, p.task, &p.file(), &outcome) {
                passed += 1;
                // What the passing kernel cost in global memory, counted by a second run.
                match c.count(&p, p.source(), &p.random_inputs(seed)) {
                    Ok(counts) => println!("      {}", counts.summary()),
                    Err(why) => println!("      global-memory accesses not counted: {why}"),
                }
            } else if first_failure.is_none() {
                first_failure = Some(p.file());
            }
        }
    }
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
