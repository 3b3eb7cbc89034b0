//! `brrr bench collectives`, in the manner of nccl-tests: for each collective and
//! algorithm, a sweep of buffer sizes with the time per call, the algorithm bandwidth
//! `algbw = S/t`, the bus bandwidth `busbw = algbw × factor` (nccl-tests'
//! doc/PERFORMANCE.md factors, from `brrr_perf::comms::Collective::bus_factor`) and the
//! number of wrong elements against a reference. Each sweep is fitted to `t = a + b·S`,
//! and where `brrr-perf` models the algorithm, `a` and `b` are turned into its `α` and `β`
//! so that the model's prediction stands next to the measurement. The ceiling is this
//! machine's `memcpy` bandwidth, measured in the same run.
//!
//! Ranks are threads of this process (`--nproc`), or processes when started by
//! `brrr launch`, torchrun, srun or mpirun.

use brrr_backend::{Error, Result};
use brrr_collectives::{Algorithm, Collective, Communicator, ReduceOp, verify};
use brrr_perf::comms::{self, Link};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// Flags of `brrr bench collectives`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchCollectivesArgs {
    /// In-process ranks (threads), when this process was not started by a launcher.
    #[arg(long, default_value_t = 4)]
    pub nproc: usize,
    /// Collectives to time (default: all).
    #[arg(long, value_delimiter = ',')]
    pub ops: Vec<String>,
    /// Algorithms to time (default: every one that implements the collective).
    #[arg(long, value_delimiter = ',')]
    pub algorithms: Vec<String>,
    /// Smallest buffer, bytes.
    #[arg(long, default_value_t = 256)]
    pub min_bytes: usize,
    /// Largest buffer, bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub max_bytes: usize,
    /// Size multiplier between points of the sweep.
    #[arg(long, default_value_t = 4)]
    pub factor: usize,
    /// Bytes moved per point (iterations = this / size, within 3..=200).
    #[arg(long, default_value_t = 64 << 20)]
    pub budget_bytes: usize,
    /// Only check every collective and algorithm against the reference (no timing).
    #[arg(long)]
    pub check: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write the all-reduce bus bandwidth plot here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Fault injection for tests: this rank's process exits `--die-after-ms` into the
    /// sweep, in the middle of whatever collective is running.
    #[arg(long, hide = true)]
    pub die_rank: Option<usize>,
    /// See `--die-rank`.
    #[arg(long, hide = true, default_value_t = 300)]
    pub die_after_ms: u64,
    /// How `--die-rank` fails: `exit` (the process ends: its peers see the connection
    /// drop, or the MPI runtime aborts the job) or `hang` (it stops answering but stays
    /// alive: its peers must time out on their own).
    #[arg(long, hide = true, default_value = "exit", value_parser = ["exit", "hang"])]
    pub die_how: String,
}

/// One point of a sweep.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Collective name.
    pub op: &'static str,
    /// Algorithm name.
    pub algorithm: &'static str,
    /// Buffer size in nccl-tests' convention.
    pub bytes: usize,
    /// Elements (f32).
    pub count: usize,
    /// Timed calls.
    pub iters: usize,
    /// Time per call, the slowest rank's.
    pub time_us: f64,
    /// `bytes / time`.
    pub algbw_gbs: f64,
    /// `algbw × bus factor`.
    pub busbw_gbs: f64,
    /// Wrong elements, summed over ranks.
    pub wrong: usize,
    /// brrr-perf's alpha-beta time with this sweep's fitted α and β (where modelled).
    pub model_us: Option<f64>,
}

/// `t = a + b·S` fitted to one sweep, and brrr-perf's α, β where it models the algorithm.
#[derive(Debug, Clone, Serialize)]
pub struct Fit {
    /// Collective name.
    pub op: &'static str,
    /// Algorithm name.
    pub algorithm: &'static str,
    /// `a`: the time of an empty call.
    pub latency_us: f64,
    /// `1/b`: bytes per second for large buffers.
    pub asymptotic_algbw_gbs: f64,
    /// brrr-perf's α for this fit, where it models the algorithm.
    pub alpha_us: Option<f64>,
    /// brrr-perf's β for this fit, where it models the algorithm.
    pub beta_gbs: Option<f64>,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Ranks.
    pub world: usize,
    /// Transport name.
    pub transport: &'static str,
    /// The ceiling: memcpy bandwidth measured in the same run.
    pub memcpy_gbs: f64,
    /// Every point.
    pub rows: Vec<Row>,
    /// One fit per sweep.
    pub fits: Vec<Fit>,
    /// All-reduce: the smallest size from which ring beats tree at every larger size.
    pub ring_tree_crossover_bytes: Option<usize>,
}

fn perf_collective(c: Collective) -> comms::Collective {
    match c {
        Collective::AllReduce => comms::Collective::AllReduce,
        Collective::ReduceScatter => comms::Collective::ReduceScatter,
        Collective::AllGather => comms::Collective::AllGather,
        Collective::Broadcast => comms::Collective::Broadcast,
        Collective::AllToAll => comms::Collective::AllToAll,
    }
}

/// brrr-perf's algorithm for ours, where its cost formula describes ours.
fn perf_algorithm(c: Collective, a: Algorithm) -> Option<comms::Algorithm> {
    match (c, a) {
        (_, Algorithm::Ring) => Some(comms::Algorithm::Ring),
        (Collective::AllReduce | Collective::Broadcast, Algorithm::Tree) => {
            Some(comms::Algorithm::Tree)
        }
        _ => None,
    }
}

/// The coefficients of α and of `S/β` in brrr-perf's formula: its time with (α=1, S=0) and
/// with (α=0, β=1, S=1).
fn model_coefficients(c: Collective, a: Algorithm, n: usize) -> Option<(f64, f64)> {
    let pa = perf_algorithm(c, a)?;
    let pc = perf_collective(c);
    let k_alpha = comms::collective_time(pc, pa, n as u64, 0.0, Link::new(1.0, 1.0).ok()?).ok()?;
    let k_beta = comms::collective_time(pc, pa, n as u64, 1.0, Link::new(0.0, 1.0).ok()?).ok()?;
    (k_alpha > 0.0 && k_beta > 0.0).then_some((k_alpha, k_beta))
}

/// Weighted least squares of `t = a + b·S` with weights `1/t²` (relative errors), so
/// that the microsecond points count as much as the millisecond ones.
pub fn fit_line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y) in points {
        let w = 1.0 / (y * y).max(1e-30);
        sw += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let det = sw * sxx - sx * sx;
    if points.len() < 2 || det.abs() < 1e-300 {
        return None;
    }
    let b = (sw * sxy - sx * sy) / det;
    let a = (sy - b * sx) / sw;
    Some((a.max(0.0), b))
}

/// Bytes per second of a large `copy_from_slice`, median of 5.
pub fn memcpy_bandwidth() -> f64 {
    let n = 16 << 20; // 64 MiB of f32
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let mut t: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            dst.copy_from_slice(&src);
            std::hint::black_box(&mut dst);
            t0.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    (n * 4) as f64 / t[2]
}

fn selected(args: &BenchCollectivesArgs) -> Result<Vec<(Collective, Algorithm)>> {
    let ops = if args.ops.is_empty() {
        Collective::ALL.to_vec()
    } else {
        args.ops
            .iter()
            .map(|s| Collective::parse(s))
            .collect::<Result<_, _>>()?
    };
    let algs = if args.algorithms.is_empty() {
        Algorithm::ALL.to_vec()
    } else {
        args.algorithms
            .iter()
            .map(|s| Algorithm::parse(s))
            .collect::<Result<_, _>>()?
    };
    let pairs: Vec<_> = ops
        .iter()
        .flat_map(|&c| {
            algs.iter()
                .filter(move |a| a.supports(c))
                .map(move |&a| (c, a))
        })
        .collect();
    if pairs.is_empty() {
        return Err(Error::invalid(
            "bench collectives",
            "no algorithm implements the chosen collectives",
        ));
    }
    Ok(pairs)
}

fn sizes(args: &BenchCollectivesArgs) -> Result<Vec<usize>> {
    if args.min_bytes < 4
        || args.max_bytes < args.min_bytes
        || args.max_bytes > 1 << 30
        || args.factor < 2
    {
        return Err(Error::invalid(
            "bench collectives",
            "need 4 <= --min-bytes <= --max-bytes <= 1 GiB and --factor >= 2",
        ));
    }
    let mut v = Vec::new();
    let mut s = args.min_bytes;
    while s <= args.max_bytes {
        v.push(s);
        s = s.saturating_mul(args.factor);
    }
    Ok(v)
}

/// Times one point on every rank; returns (max time per call over ranks, wrong elements
/// summed over ranks). nccl-tests sizes: all-gather's is the output, reduce-scatter's the
/// input, all-to-all's one rank's whole buffer.
fn measure(
    comm: &Communicator,
    c: Collective,
    a: Algorithm,
    bytes: usize,
    iters: usize,
) -> Result<(usize, f64, usize)> {
    let n = comm.world_size();
    let count = (bytes / 4).max(1);
    let per_rank = match c {
        Collective::AllGather | Collective::AllToAll => (count / n).max(1),
        _ => count,
    };
    let count = match c {
        Collective::AllGather | Collective::AllToAll => per_rank * n,
        _ => count,
    };
    let wrong = verify::check(comm, c, a, per_rank, bytes as u64)?;
    let mut buf = vec![1.0f32; per_rank * if c == Collective::AllToAll { n } else { 1 }];
    let call = |buf: &mut Vec<f32>| -> Result<(), brrr_collectives::CollError> {
        match c {
            Collective::AllReduce => comm.all_reduce_with(buf, ReduceOp::Sum, a, 0),
            Collective::ReduceScatter => comm.reduce_scatter_with(buf, ReduceOp::Sum, a).map(drop),
            Collective::AllGather => comm.all_gather_with(buf, a).map(drop),
            Collective::Broadcast => comm.broadcast_with(buf, 0, a),
            Collective::AllToAll => comm.all_to_all_with(buf, a).map(drop),
        }
    };
    call(&mut buf)?; // warm-up
    comm.barrier()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        call(&mut buf)?;
    }
    let mut t = [(t0.elapsed().as_secs_f64() / iters as f64) as f32];
    comm.all_reduce_with(&mut t, ReduceOp::Max, Algorithm::Ring, 0)?;
    let mut w = [wrong as f32];
    comm.all_reduce_with(&mut w, ReduceOp::Sum, Algorithm::Ring, 0)?;
    Ok((count, f64::from(t[0]), w[0] as usize))
}

/// The sweep on one rank; every rank returns the same rows.
pub fn sweep(comm: &Communicator, args: &BenchCollectivesArgs) -> Result<Vec<Row>> {
    let n = comm.world_size();
    let mut rows = Vec::new();
    if args.die_rank == Some(comm.rank()) {
        let (rank, ms) = (comm.rank(), args.die_after_ms);
        if args.die_how == "hang" {
            // Stops answering mid-sweep: no more sends or receives from this rank.
            std::thread::sleep(std::time::Duration::from_millis(ms));
            eprintln!("rank {rank}: hanging on purpose (--die-rank --die-how hang)");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            eprintln!("rank {rank}: exiting on purpose (--die-rank)");
            std::process::exit(3);
        });
    }
    for (c, a) in selected(args)? {
        for bytes in sizes(args)? {
            let iters = (args.budget_bytes / bytes).clamp(3, 200);
            let (count, t, wrong) = measure(comm, c, a, bytes, iters)?;
            let size = (count * 4) as f64;
            let algbw = size / t;
            rows.push(Row {
                op: c.name(),
                algorithm: a.name(),
                bytes: count * 4,
                count,
                iters,
                time_us: t * 1e6,
                algbw_gbs: algbw / 1e9,
                busbw_gbs: algbw * perf_collective(c).bus_factor(n as u64) / 1e9,
                wrong,
                model_us: None,
            });
        }
    }
    Ok(rows)
}

/// Fits every sweep and fills in the model column.
pub fn analyse(world: usize, transport: &'static str, memcpy: f64, mut rows: Vec<Row>) -> Report {
    let mut fits = Vec::new();
    let mut keys: Vec<(&'static str, &'static str)> =
        rows.iter().map(|r| (r.op, r.algorithm)).collect();
    keys.dedup();
    for (op, alg) in keys {
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.op == op && r.algorithm == alg)
            .map(|r| (r.bytes as f64, r.time_us * 1e-6))
            .collect();
        let Some((a, b)) = fit_line(&pts) else {
            continue;
        };
        let (c, al) = (
            Collective::parse(op).expect("own name"),
            Algorithm::parse(alg).expect("own name"),
        );
        let model = model_coefficients(c, al, world).and_then(|(ka, kb)| {
            let link = Link::new(a / ka, kb / b.max(1e-30)).ok()?;
            Some((link, a / ka, kb / b))
        });
        if let Some((link, _, _)) = model {
            for r in rows.iter_mut().filter(|r| r.op == op && r.algorithm == alg) {
                r.model_us = comms::collective_time(
                    perf_collective(c),
                    perf_algorithm(c, al).expect("modelled"),
                    world as u64,
                    r.bytes as f64,
                    link,
                )
                .ok()
                .map(|t| t * 1e6);
            }
        }
        fits.push(Fit {
            op,
            algorithm: alg,
            latency_us: a * 1e6,
            asymptotic_algbw_gbs: if b > 0.0 {
                1.0 / b / 1e9
            } else {
                f64::INFINITY
            },
            alpha_us: model.map(|(_, al, _)| al * 1e6),
            beta_gbs: model.map(|(_, _, be)| be / 1e9),
        });
    }
    let crossover = crossover(&rows, "ring", "tree");
    Report {
        world,
        transport,
        memcpy_gbs: memcpy / 1e9,
        rows,
        fits,
        ring_tree_crossover_bytes: crossover,
    }
}

/// The smallest all-reduce size from which `big` is faster than `small` at every larger
/// size measured.
pub fn crossover(rows: &[Row], big: &str, small: &str) -> Option<usize> {
    let time = |alg: &str, bytes: usize| {
        rows.iter()
            .find(|r| r.op == "all-reduce" && r.algorithm == alg && r.bytes == bytes)
            .map(|r| r.time_us)
    };
    let mut sizes: Vec<usize> = rows
        .iter()
        .filter(|r| r.op == "all-reduce")
        .map(|r| r.bytes)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut answer = None;
    for &s in sizes.iter().rev() {
        match (time(big, s), time(small, s)) {
            (Some(b), Some(t)) if b < t => answer = Some(s),
            _ => break,
        }
    }
    answer
}

/// The report as nccl-tests-like text.
pub fn format_report(r: &Report) -> String {
    let mut s = format!(
        "# brrr bench collectives: {} ranks, {} transport, memcpy {:.2} GB/s (the ceiling)\n",
        r.world, r.transport, r.memcpy_gbs
    );
    s += &format!(
        "{:>15} {:>11} {:>11} {:>10} {:>11} {:>10} {:>10} {:>7} {:>11}\n",
        "op",
        "algorithm",
        "size (B)",
        "count",
        "time (us)",
        "algbw GB/s",
        "busbw GB/s",
        "#wrong",
        "model (us)"
    );
    for row in &r.rows {
        let model = row.model_us.map_or("-".to_string(), |m| format!("{m:.1}"));
        s += &format!(
            "{:>15} {:>11} {:>11} {:>10} {:>11.1} {:>10.3} {:>10.3} {:>7} {:>11}\n",
            row.op,
            row.algorithm,
            row.bytes,
            row.count,
            row.time_us,
            row.algbw_gbs,
            row.busbw_gbs,
            row.wrong,
            model
        );
    }
    s += "\n# fit t = a + S/bw per sweep; alpha, beta: brrr-perf's cost formula solved for this fit\n";
    s += &format!(
        "{:>15} {:>11} {:>10} {:>10} {:>10} {:>10}\n",
        "op", "algorithm", "a (us)", "bw GB/s", "alpha (us)", "beta GB/s"
    );
    for f in &r.fits {
        let opt = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
        s += &format!(
            "{:>15} {:>11} {:>10.1} {:>10.3} {:>10} {:>10}\n",
            f.op,
            f.algorithm,
            f.latency_us,
            f.asymptotic_algbw_gbs,
            opt(f.alpha_us, 2),
            opt(f.beta_gbs, 3)
        );
    }
    let wrong: usize = r.rows.iter().map(|x| x.wrong).sum();
    s += &format!(
        "\n# out of bounds values : {wrong} {}\n",
        if wrong == 0 { "OK" } else { "FAILED" }
    );
    s += &match r.ring_tree_crossover_bytes {
        Some(b) => format!("# all-reduce: ring beats tree from {b} bytes up\n"),
        None => "# all-reduce: no ring-vs-tree crossover in this sweep\n".to_string(),
    };
    s
}

/// The all-reduce bus bandwidth against size, one line per algorithm, with the memcpy
/// ceiling, as SVG.
pub fn busbw_svg(r: &Report) -> Result<String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| {
        Error::invalid("bench collectives", format!("plotting failed: {e}"))
    };
    let ar: Vec<&Row> = r.rows.iter().filter(|x| x.op == "all-reduce").collect();
    if ar.is_empty() {
        return Err(Error::invalid(
            "bench collectives",
            "the plot needs all-reduce rows",
        ));
    }
    let x_min = ar.iter().map(|x| x.bytes).min().unwrap_or(1).max(1) as f64;
    let x_max = ar.iter().map(|x| x.bytes).max().unwrap_or(1).max(2) as f64;
    let y_max = ar.iter().map(|x| x.busbw_gbs).fold(r.memcpy_gbs, f64::max) * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "all-reduce bus bandwidth, {} ranks, {} transport",
                    r.world, r.transport
                ),
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_max)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("buffer size (bytes)")
            .y_desc("busbw (GB/s)")
            .x_label_formatter(&|x| format_bytes(*x))
            .draw()
            .map_err(|e| err(&e))?;
        let colours = [
            RGBColor(31, 119, 180),
            RGBColor(255, 127, 14),
            RGBColor(44, 160, 44),
            RGBColor(214, 39, 40),
            RGBColor(148, 103, 189),
        ];
        let mut algs: Vec<&str> = ar.iter().map(|x| x.algorithm).collect();
        algs.dedup();
        for (i, alg) in algs.iter().enumerate() {
            let c = colours[i % colours.len()];
            let pts: Vec<(f64, f64)> = ar
                .iter()
                .filter(|x| x.algorithm == *alg)
                .map(|x| (x.bytes as f64, x.busbw_gbs))
                .collect();
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(*alg)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(LineSeries::new(
                vec![(x_min, r.memcpy_gbs), (x_max, r.memcpy_gbs)],
                grey.stroke_width(1),
            ))
            .map_err(|e| err(&e))?
            .label("memcpy (ceiling)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// Axis labels in decimal units: a log axis puts its ticks at powers of ten.
fn format_bytes(b: f64) -> String {
    match b {
        b if b >= 1e6 => format!("{:.0}M", b / 1e6),
        b if b >= 1e3 => format!("{:.0}k", b / 1e3),
        b => format!("{b:.0}"),
    }
}

/// The whole command: launched (one rank per process, rank 0 prints) or in-process.
pub fn run(args: &BenchCollectivesArgs) -> Result<String> {
    let launched = brrr_collectives::env::LaunchEnv::from_env()?;
    if launched.world_size > 1 {
        let comm = brrr_collectives::from_env()?;
        let out = run_rank(&comm, args)?;
        return Ok(if comm.rank() == 0 { out } else { String::new() });
    }
    if args.nproc == 0 || args.nproc > 64 {
        return Err(Error::invalid(
            "bench collectives",
            format!("--nproc {} (1..=64)", args.nproc),
        ));
    }
    let mut outs = brrr_collectives::run_in_process(args.nproc, |c| {
        run_rank(c, args)
            .map_err(|e| brrr_collectives::CollError::invalid("bench collectives", e.to_string()))
    });
    outs.swap_remove(0).map_err(Error::from)
}

fn run_rank(comm: &Communicator, args: &BenchCollectivesArgs) -> Result<String> {
    if args.check {
        let lens = [0, 1, 5, 7, 13, 100, 1001];
        let (wrong, calls) = verify::check_all(comm, &lens)?;
        let mut w = [wrong as f32];
        comm.all_reduce(&mut w, ReduceOp::Sum)?;
        let total = w[0] as usize;
        let msg = format!(
            "check: {calls} calls (every collective and algorithm, lengths {lens:?}) on {} ranks over {}: {total} wrong elements\n",
            comm.world_size(),
            comm.transport()
        );
        if total > 0 {
            return Err(Error::invalid("bench collectives", msg));
        }
        return Ok(msg);
    }
    // Rank 0 alone, the others idle in the barrier: threads copying at the same time
    // would share the memory bandwidth being measured.
    let mut memcpy = [0.0f32];
    if comm.rank() == 0 {
        memcpy[0] = memcpy_bandwidth() as f32;
    }
    comm.broadcast_with(&mut memcpy, 0, Algorithm::Naive)?;
    let memcpy = f64::from(memcpy[0]);
    let rows = sweep(comm, args)?;
    let report = analyse(comm.world_size(), comm.transport(), memcpy, rows);
    if comm.rank() == 0
        && let Some(path) = &args.svg
    {
        brrr_perf::plot::write_svg(path, &busbw_svg(&report)?)
            .map_err(|e| Error::invalid("bench collectives", e.to_string()))?;
    }
    if report.rows.iter().any(|r| r.wrong > 0) {
        return Err(Error::invalid(
            "bench collectives",
            format!("wrong results:\n{}", format_report(&report)),
        ));
    }
    if args.json {
        serde_json::to_string_pretty(&report)
            .map(|s| s + "\n")
            .map_err(|e| Error::invalid("bench collectives", e.to_string()))
    } else {
        Ok(format_report(&report))
    }
}
