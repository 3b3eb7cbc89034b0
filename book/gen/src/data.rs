//! The data-loading chapter's tables: a packed row's positions and segments, and
//! imbalance before and after length balancing, computed by `brrr_data`.

use crate::md::{Md, page};
use brrr_data::pack::{
    balance, imbalance, long_tailed_lengths, pack_documents, rank_costs, round_robin,
};

/// Five documents packed into rows of 12 slots.
fn packing_table() -> Result<String, String> {
    let docs: Vec<Vec<u32>> = [6usize, 4, 9, 3, 5]
        .iter()
        .enumerate()
        .map(|(d, &n)| (0..n as u32).map(|i| 100 * (d as u32 + 1) + i).collect())
        .collect();
    let seq = 12;
    let p = pack_documents(&docs, seq).map_err(|e| e.to_string())?;
    let mut header = vec!["row".to_string(), "".to_string()];
    header.extend((0..seq).map(|s| s.to_string()));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Md::new(&header).left(&[0, 1]);
    for r in 0..p.rows {
        let at = |v: &[u32], s: usize| v[r * seq + s].to_string();
        let cells = |name: &str, f: &dyn Fn(usize) -> String| {
            let mut c = vec![if name == "input" {
                r.to_string()
            } else {
                String::new()
            }];
            c.push(name.to_string());
            c.extend((0..seq).map(f));
            c
        };
        t.row(cells("input", &|s| at(&p.inputs, s)));
        t.row(cells("target", &|s| match p.targets[r * seq + s] {
            x if x < 0 => "·".into(),
            x => x.to_string(),
        }));
        t.row(cells("position", &|s| at(&p.positions, s)));
        t.row(cells("segment", &|s| at(&p.segments, s)));
    }
    Ok(page(&format!(
        "{}\nDocuments of 6, 4, 9, 3 and 5 tokens (token `100·d + i` is token `i` of document \
         `d`), packed first-fit decreasing into rows of {seq} slots: {} rows, {:.0}% of the \
         slots hold a target (`·`: padding, ignored by the loss).\n",
        t.render(),
        p.rows,
        100.0 * p.fill()
    )))
}

/// Round robin against LPT on `Σ len²`, long-tailed lengths.
fn balance_table() -> Result<String, String> {
    let mut t = Md::new(&[
        "sequences",
        "ranks",
        "imbalance, round robin",
        "imbalance, balanced",
        "lower bound (longest sequence alone)",
    ]);
    for (n, world) in [(256usize, 4usize), (1024, 8), (4096, 64)] {
        let lens = long_tailed_lengths(n, 8192, 7);
        let before = imbalance(&rank_costs(&lens, &round_robin(n, world), world));
        let costs = rank_costs(
            &lens,
            &balance(&lens, world).map_err(|e| e.to_string())?,
            world,
        );
        let mean = costs.iter().sum::<f64>() / world as f64;
        let biggest = lens.iter().map(|&l| (l * l) as f64).fold(0.0, f64::max);
        t.row(vec![
            n.to_string(),
            world.to_string(),
            format!("{before:.2}"),
            format!("{:.2}", imbalance(&costs)),
            format!("{:.2}", biggest.max(mean) / mean),
        ]);
    }
    Ok(page(&t.render()))
}

pub fn files() -> Result<Vec<(String, String)>, String> {
    Ok(vec![
        ("data-packing.md".into(), packing_table()?),
        ("data-balance.md".into(), balance_table()?),
    ])
}
