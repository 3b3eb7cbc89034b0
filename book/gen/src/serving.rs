//! The serving chapter's table: speculative decoding's expected tokens per target
//! forward and speed-up against `k`, from brrr-serve's formulas (Leviathan et al. 2023).

use crate::md::{Md, page};
use brrr_serve::speculative::{expected_speedup, expected_tokens_per_step};

const KS: [usize; 6] = [1, 2, 3, 4, 6, 8];

/// Rows: acceptance rates; columns: `k`; cells: tokens per step and, with a draft that
/// costs `c` of the target, the speed-up.
fn speculative_table(c: f64) -> String {
    let mut header = vec!["α".to_string()];
    header.extend(KS.iter().map(|k| format!("k = {k}")));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Md::new(&header);
    for alpha in [0.5, 0.6, 0.7, 0.8, 0.9] {
        let mut row = vec![format!("{alpha:.1}")];
        row.extend(KS.iter().map(|&k| {
            format!(
                "{:.2} / {:.2}×",
                expected_tokens_per_step(alpha, k),
                expected_speedup(alpha, k, c)
            )
        }));
        t.row(row);
    }
    t.render()
}

/// `serving-speculative.md`.
pub fn files() -> Vec<(String, String)> {
    vec![(
        "serving-speculative.md".to_string(),
        page(&speculative_table(0.1)),
    )]
}
