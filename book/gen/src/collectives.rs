//! Chapter "Collectives": what each all-reduce algorithm's schedule costs, counted from
//! the schedules brrr-collectives builds (steps are latencies, the busiest rank's bytes
//! are the bandwidth term), next to brrr-perf's alpha-beta times on an H100 node.

use crate::md::{Md, page, sig3};
use brrr_collectives::{Algorithm, Collective, Schedule, plan};
use brrr_perf::comms::{self, Link, collective_time};

/// Elements the busiest rank sends over the whole schedule.
fn busiest_sends(s: &Schedule) -> usize {
    let mut per_rank = vec![0usize; s.world];
    for t in s.steps.iter().flat_map(|st| &st.transfers) {
        if t.src != t.dst {
            per_rank[t.src] += t.src_range.len();
        }
    }
    per_rank.into_iter().max().unwrap_or(0)
}

fn algorithm_table() -> Result<String, String> {
    let len = 8 * 9 * 5 * 7; // divisible by every world size below
    let mut t = Md::new(&[
        "algorithm",
        "n = 8: steps",
        "messages",
        "busiest rank sends (× S)",
        "n = 6: steps",
        "busiest rank sends (× S)",
    ]);
    for alg in Collective::AllReduce.algorithms() {
        let mut cells = vec![format!("`{}`", alg.name())];
        for n in [8, 6] {
            let s = plan(Collective::AllReduce, alg, n, len, 0).map_err(|e| e.to_string())?;
            let (messages, _) = s.message_count();
            cells.push(s.steps.len().to_string());
            if n == 8 {
                cells.push(messages.to_string());
            }
            cells.push(format!("{:.3}", busiest_sends(&s) as f64 / len as f64));
        }
        t.row(cells);
    }
    Ok(page(&t.render()))
}

fn model_table() -> Result<String, String> {
    let gpu = brrr_perf::specs::gpu("h100-sxm").map_err(|e| e.to_string())?;
    let link = Link::intra_node(&gpu).map_err(|e| e.to_string())?;
    let mut t = Md::new(&["buffer", "ring (µs)", "tree (µs)", "faster"]);
    for bytes in [4e3, 64e3, 1e6, 16e6, 256e6] {
        let time = |a| {
            collective_time(comms::Collective::AllReduce, a, 8, bytes, link)
                .map_err(|e| e.to_string())
        };
        let (ring, tree) = (time(comms::Algorithm::Ring)?, time(comms::Algorithm::Tree)?);
        t.row(vec![
            brrr_perf::table::bytes(bytes),
            sig3(ring * 1e6),
            sig3(tree * 1e6),
            if ring < tree { "ring" } else { "tree" }.to_string(),
        ]);
    }
    Ok(page(&format!(
        "{}\nα = {} µs, β = {} GB/s per direction (`Link::intra_node`, 8 GPUs).\n",
        t.render(),
        sig3(link.alpha_s * 1e6),
        sig3(link.bandwidth / 1e9)
    )))
}

/// The chapter's generated files.
pub fn files() -> Result<Vec<(String, String)>, String> {
    let _ = Algorithm::ALL;
    Ok(vec![
        ("collectives-algorithms.md".into(), algorithm_table()?),
        ("collectives-model.md".into(), model_table()?),
    ])
}
