//! Packing keeps every document whole and separate; balancing evens out `Σ len²`.

use brrr_data::pack::{
    IGNORE, balance, imbalance, long_tailed_lengths, pack_documents, rank_costs, round_robin,
};

#[test]
fn packed_rows_hold_each_document_with_restarted_positions() {
    let docs: Vec<Vec<u32>> = [5usize, 12, 3, 9, 2, 1, 7, 30]
        .iter()
        .enumerate()
        .map(|(d, &n)| (0..n as u32).map(|i| 1000 * d as u32 + i).collect())
        .collect();
    let seq = 10;
    let p = pack_documents(&docs, seq).unwrap();
    assert_eq!(p.inputs.len(), p.rows * seq);
    // Every predicted pair (d[k], d[k+1]) of every document appears exactly once, at
    // its position within its piece (pieces start every `seq` tokens).
    let mut pairs = Vec::new();
    for i in 0..p.rows * seq {
        if p.targets[i] != IGNORE {
            pairs.push((p.inputs[i], p.targets[i] as u32));
            assert_eq!(p.positions[i], p.inputs[i] % 1000 % seq as u32);
        }
    }
    let mut want: Vec<(u32, u32)> = docs
        .iter()
        .flat_map(|d| d.windows(2).map(|w| (w[0], w[1])).collect::<Vec<_>>())
        .collect();
    want.sort();
    pairs.sort();
    assert_eq!(pairs, want);
    // Segments change exactly where positions restart.
    for r in 0..p.rows {
        for t in 1..seq {
            let i = r * seq + t;
            let restart = p.positions[i] == 0;
            assert_eq!(
                p.segments[i] != p.segments[i - 1],
                restart,
                "row {r} slot {t}"
            );
        }
    }
    // First-fit decreasing leaves little padding.
    assert!(p.fill() > 0.8, "fill {}", p.fill());
    assert!(pack_documents(&docs, 0).is_err());
}

#[test]
fn balancing_evens_out_a_long_tail() {
    let lens = long_tailed_lengths(512, 4096, 1);
    let world = 8;
    let before = imbalance(&rank_costs(&lens, &round_robin(lens.len(), world), world));
    let assign = balance(&lens, world).unwrap();
    let after = imbalance(&rank_costs(&lens, &assign, world));
    assert!(before > 1.3, "the tail makes round robin uneven: {before}");
    assert!(after < before, "{after} < {before}");
    // LPT is within 4/3 of optimal, and the optimum is at least the largest item.
    let total: f64 = lens.iter().map(|&l| (l * l) as f64).sum();
    let biggest = lens.iter().map(|&l| (l * l) as f64).fold(0.0, f64::max);
    let lower = (total / world as f64).max(biggest) / (total / world as f64);
    assert!(
        after <= lower * 4.0 / 3.0 + 1e-9,
        "{after} vs bound {lower}"
    );
    assert!(balance(&lens, 0).is_err());
}
