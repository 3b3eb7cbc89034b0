//! The GPU puzzles page's verdict: a kernel's output buffer (with the slack after its
//! last element) against the CPU reference, cell by cell. The same rules as the native
//! checker (`brrr_exercises::puzzles::gpu::Checker::check`): every element must match
//! exactly (inputs are small integers, so every reference is exact in f32), and every
//! slack element must still be zero, or some invocation wrote past the end of `out`.

/// Zeros after `out`'s last element, as in the native checker
/// (`brrr_exercises::puzzles::gpu::OUTPUT_SLACK`): a missing guard writes there.
pub const OUTPUT_SLACK: usize = 64;

/// How many differing elements the verdict names.
pub const SHOWN_MISMATCHES: usize = 4;

/// One element that differs from the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Index in `out`.
    pub index: usize,
    /// What the kernel wrote.
    pub got: f32,
    /// What the reference says.
    pub want: f32,
}

/// A run's outcome against the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// `out` without the slack, as many elements as the reference.
    pub out: Vec<f32>,
    /// Per element of `out`: whether it matches the reference.
    pub ok: Vec<bool>,
    /// Every differing element, in index order.
    pub mismatches: Vec<Mismatch>,
    /// Slack elements that were written: (index in the whole buffer, value).
    pub overflow: Vec<(usize, f32)>,
    /// What fails the kernel although its output may be right, as the native checker
    /// finds it: a shared-memory race or a barrier in divergent control flow
    /// (`brrr_exercises::puzzles::race`), global accesses over the puzzle's budget.
    pub problems: Vec<String>,
}

impl Verdict {
    /// Whether the kernel passes: every element matches, nothing was written past the
    /// end, and shared memory is used in an order the kernel enforces.
    pub fn pass(&self) -> bool {
        self.mismatches.is_empty() && self.overflow.is_empty() && self.problems.is_empty()
    }

    /// One sentence for the reader: PASS, or the first differences.
    pub fn summary(&self) -> String {
        if self.pass() {
            return format!(
                "PASS: all {} elements match the CPU reference.",
                self.out.len()
            );
        }
        let mut parts = Vec::new();
        if !self.mismatches.is_empty() {
            let first: Vec<String> = self
                .mismatches
                .iter()
                .take(SHOWN_MISMATCHES)
                .map(|m| format!("out[{}] = {} (expected {})", m.index, m.got, m.want))
                .collect();
            let more = self.mismatches.len().saturating_sub(SHOWN_MISMATCHES);
            let tail = if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            };
            parts.push(format!(
                "{} of {} elements differ: {}{tail}",
                self.mismatches.len(),
                self.out.len(),
                first.join(", ")
            ));
        }
        if let Some(&(i, v)) = self.overflow.first() {
            parts.push(format!(
                "an invocation wrote out[{i}] = {v}, past the end of `out` ({} elements): \
                 guard the invocations that have no element",
                self.out.len()
            ));
        }
        parts.extend(self.problems.iter().cloned());
        format!("FAIL: {}.", parts.join("; "))
    }
}

/// Compares `buffer` (the output with its slack, as read back) with `want`.
pub fn judge(buffer: &[f32], want: &[f32]) -> Verdict {
    let n = want.len().min(buffer.len());
    let out = buffer[..n].to_vec();
    // A short buffer (never, with the sizes the page allocates) counts its missing
    // elements as NaN, which differs from every reference value.
    let got = |i: usize| buffer.get(i).copied().unwrap_or(f32::NAN);
    let ok: Vec<bool> = (0..want.len()).map(|i| got(i) == want[i]).collect();
    let mismatches = (0..want.len())
        .filter(|&i| !ok[i])
        .map(|i| Mismatch {
            index: i,
            got: got(i),
            want: want[i],
        })
        .collect();
    let overflow = buffer
        .iter()
        .enumerate()
        .skip(want.len())
        .filter(|(_, v)| **v != 0.0)
        .map(|(i, v)| (i, *v))
        .collect();
    Verdict {
        out,
        ok,
        mismatches,
        overflow,
        problems: Vec::new(),
    }
}

/// Row lengths of the puzzles whose arrays are matrices, stored row-major, as their
/// tasks (and WGSL) declare them: the page draws those arrays as grids.
const MATRIX_COLUMNS: [(&str, usize); 6] = [
    ("p04_map_2d", 2),
    ("p05_broadcast", 2),
    ("p07_blocks_2d", 5),
    ("p13_axis_sum", 6),
    ("p14_matmul", 5),
    ("p17_transpose", 4),
];

/// How many cells a row of an array of `len` elements has in puzzle `id`: the matrix's
/// row length for a matrix of that puzzle, else `len` (one row).
pub fn columns(id: &str, len: usize) -> usize {
    MATRIX_COLUMNS
        .iter()
        .find(|(p, _)| *p == id)
        .map(|&(_, c)| c)
        .filter(|&c| len > c && len.is_multiple_of(c))
        .unwrap_or(len.max(1))
}

/// Formats a cell's value: integers without a decimal point (every correct value is
/// one), anything else with up to three decimals.
pub fn cell_text(v: f32) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e7 {
        format!("{}", v as i64)
    } else if v.is_finite() {
        format!("{v:.3}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matching_output_passes() {
        let mut buf = vec![11.0, 12.0, 13.0];
        buf.extend([0.0; OUTPUT_SLACK]);
        let v = judge(&buf, &[11.0, 12.0, 13.0]);
        assert!(v.pass());
        assert_eq!(v.out, vec![11.0, 12.0, 13.0]);
        assert!(v.summary().starts_with("PASS"));
    }

    #[test]
    fn the_untouched_stub_fails_on_every_element() {
        let buf = vec![0.0; 4 + OUTPUT_SLACK];
        let v = judge(&buf, &[10.0, 11.0, 12.0, 13.0]);
        assert!(!v.pass());
        assert_eq!(v.ok, vec![false; 4]);
        assert_eq!(v.mismatches.len(), 4);
        assert_eq!(
            v.summary(),
            "FAIL: 4 of 4 elements differ: out[0] = 0 (expected 10), out[1] = 0 (expected 11), \
             out[2] = 0 (expected 12), out[3] = 0 (expected 13)."
        );
    }

    #[test]
    fn a_write_past_the_end_fails_even_when_out_matches() {
        let mut buf = vec![1.0, 2.0, 0.0, 0.0, 7.0];
        buf.extend([0.0; 8]);
        let v = judge(&buf, &[1.0, 2.0, 0.0, 0.0]);
        assert_eq!(v.overflow, vec![(4, 7.0)]);
        assert!(v.mismatches.is_empty());
        assert!(!v.pass());
        assert!(v.summary().contains("out[4] = 7, past the end"));
    }

    #[test]
    fn only_the_first_mismatches_are_named() {
        let v = judge(&[0.0; 10], &[1.0; 10]);
        assert!(v.summary().ends_with("and 6 more."), "{}", v.summary());
    }

    #[test]
    fn a_short_buffer_is_a_failure_not_a_panic() {
        let v = judge(&[1.0], &[1.0, 2.0]);
        assert_eq!(v.ok, vec![true, false]);
        assert!(v.mismatches[0].got.is_nan());
    }

    #[test]
    fn matrices_are_drawn_by_rows() {
        assert_eq!(columns("p14_matmul", 25), 5);
        assert_eq!(columns("p13_axis_sum", 24), 6);
        // The row sums of the axis-sum puzzle are a vector.
        assert_eq!(columns("p13_axis_sum", 4), 4);
        assert_eq!(columns("p01_map", 4), 4);
        assert_eq!(columns("p01_map", 0), 1);
    }

    #[test]
    fn cells_show_integers_plainly() {
        assert_eq!(cell_text(12.0), "12");
        assert_eq!(cell_text(-3.0), "-3");
        assert_eq!(cell_text(0.5), "0.500");
        assert_eq!(cell_text(f32::NAN), "NaN");
    }
}
