//! What every exercise's check uses: a fresh seed per run (printed, so a failure can be
//! reproduced with `BRRR_SEED`), tolerant comparisons, and the stubs' "not done yet".

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The result of a check: `Err` says what was wrong, in words a reader can act on.
pub type Outcome = Result<(), String>;

/// A seed for this run: `BRRR_SEED` if set (to reproduce a failure), else the clock, so
/// that every run draws fresh inputs and a solution cannot be fitted to one of them.
pub fn seed() -> u64 {
    if let Some(s) = std::env::var("BRRR_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        return s;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5eed)
}

/// A generator seeded with [`seed`], and the seed (for the failure message).
pub fn rng() -> (ChaCha8Rng, u64) {
    let s = seed();
    (ChaCha8Rng::seed_from_u64(s), s)
}

/// Relative difference `|got − want| / max(|want|, floor)`.
pub fn rel_diff(got: f64, want: f64, floor: f64) -> f64 {
    let d = (got - want).abs() / want.abs().max(floor);
    if d.is_nan() { f64::INFINITY } else { d }
}

/// `Ok` if `got` is within relative tolerance `rtol` of `want`; a failure says so when
/// `got` is a simple multiple of `want`, the mark of a slip rather than a wrong method.
pub fn close(what: &str, got: f64, want: f64, rtol: f64) -> Outcome {
    if rel_diff(got, want, 1e-300) <= rtol {
        Ok(())
    } else {
        let hint = ratio_hint(got, want).map_or(String::new(), |h| format!(" ({h})"));
        Err(format!("{what}: got {got}, expected {want}{hint}"))
    }
}

/// What `got / want` suggests when it is a small whole number, its inverse, or a sign:
/// a factor counted twice or forgotten (an FMA's two FLOPs, a read and a write, both
/// halves of an all-reduce).
pub fn ratio_hint(got: f64, want: f64) -> Option<String> {
    if want == 0.0 || !got.is_finite() || !want.is_finite() {
        return None;
    }
    let r = got / want;
    let near = |x: f64| (r - x).abs() <= 1e-6 * x.abs();
    if near(-1.0) {
        return Some("the right size with the wrong sign".into());
    }
    for k in 2..=16u32 {
        let k = f64::from(k);
        if near(k) {
            return Some(format!(
                "exactly {k}× too large: is a factor counted twice?"
            ));
        }
        if near(1.0 / k) {
            return Some(format!("exactly 1/{k} of it: is a factor of {k} missing?"));
        }
    }
    None
}

/// Every failure of several checks, one per line, so a reader sees all the outputs that
/// are wrong at once and not only the first.
pub fn every(outcomes: impl IntoIterator<Item = Outcome>) -> Outcome {
    let errors: Vec<String> = outcomes.into_iter().filter_map(Result::err).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

/// `outcome`, with `hint` added to its failure when `slip` says the reader's answer has
/// the shape of a known mistake.
pub fn hint_if(outcome: Outcome, slip: bool, hint: &str) -> Outcome {
    match outcome {
        Err(e) if slip => Err(format!("{e}\nhint: {hint}")),
        other => other,
    }
}

/// `Ok` if every element of `got` is within `atol + rtol·|want|` of `want`; the error
/// names the first element that is not.
pub fn all_close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) -> Outcome {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: got {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= atol + rtol * w.abs();
        if !ok || g.is_nan() != w.is_nan() {
            let hint = ratio_hint(*g, *w).map_or(String::new(), |h| format!(" ({h})"));
            return Err(format!("{what}[{i}]: got {g}, expected {w}{hint}"));
        }
    }
    Ok(())
}

/// Widens f32s for [`all_close`].
pub fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// Adds the seed to a failure message.
pub fn with_seed(outcome: Outcome, seed: u64) -> Outcome {
    outcome.map_err(|e| format!("{e} (inputs from BRRR_SEED={seed})"))
}

/// What a stub returns where its type allows an error.
pub fn not_done(what: &str) -> String {
    format!("{what}: not implemented yet")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simple_multiple_is_named_and_anything_else_is_not() {
        assert!(ratio_hint(2.0, 1.0).unwrap().contains("2×"));
        assert!(ratio_hint(0.25, 1.0).unwrap().contains("1/4"));
        assert!(ratio_hint(-3.0, 3.0).unwrap().contains("sign"));
        assert_eq!(ratio_hint(1.3, 1.0), None);
        assert_eq!(ratio_hint(1.0, 0.0), None);
        assert!(close("x", 6.0, 3.0, 1e-9).unwrap_err().contains("2×"));
    }

    #[test]
    fn every_failure_is_reported_and_hints_only_follow_failures() {
        let e = every([Err("a".into()), Ok(()), Err("b".into())]).unwrap_err();
        assert_eq!(e, "a\nb");
        assert_eq!(every([Ok(()), Ok(())]), Ok(()));
        assert_eq!(hint_if(Ok(()), true, "h"), Ok(()));
        assert_eq!(
            hint_if(Err("e".into()), true, "h"),
            Err("e\nhint: h".into())
        );
        assert_eq!(hint_if(Err("e".into()), false, "h"), Err("e".into()));
    }
}
