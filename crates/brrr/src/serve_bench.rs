//! `brrr bench serve`: a load generator for `brrr serve`. Requests arrive as a Poisson
//! process at each offered rate (exponential gaps), with prompt and output lengths
//! drawn uniformly from ranges and an optional shared system prompt; each is streamed,
//! so the client times its first token and the gaps after it. Per rate: throughput,
//! time to first token (TTFT) and time per output token (TPOT) at p50 and p99, and
//! goodput (requests per second meeting both latency targets), and an SVG of p99 TPOT
//! against throughput. It starts the server in-process on a loopback port, or loads
//! one already running (`--url`).

use crate::data::DEFAULT_CORPUS;
use crate::serve_cmd::{self, ServeArgs};
use brrr_backend::{Error, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Flags of `brrr bench serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeBenchArgs {
    /// A run directory to serve in-process (else --url).
    #[arg(required_unless_present = "url", conflicts_with = "url")]
    pub dir: Option<PathBuf>,
    /// A running server, `http://HOST:PORT`.
    #[arg(long)]
    pub url: Option<String>,
    /// Offered request rates, per second.
    #[arg(long, value_delimiter = ',', default_values_t = vec![2.0, 4.0, 8.0, 16.0])]
    pub rates: Vec<f64>,
    /// Requests per rate.
    #[arg(long, default_value_t = 64)]
    pub requests: usize,
    /// Prompt length range in bytes, `MIN..MAX` (drawn from the corpus's last tenth).
    #[arg(long, default_value = "16..64")]
    pub prompt_len: String,
    /// Output length range in tokens, `MIN..MAX` (each request's max_tokens).
    #[arg(long, default_value = "16..48")]
    pub output_len: String,
    /// Bytes of a system prompt every request starts with (0: none).
    #[arg(long, default_value_t = 0)]
    pub shared_prefix: usize,
    /// TTFT target for goodput, in ms.
    #[arg(long, default_value_t = 1000.0)]
    pub slo_ttft_ms: f64,
    /// TPOT target for goodput, in ms.
    #[arg(long, default_value_t = 100.0)]
    pub slo_tpot_ms: f64,
    /// Write the latency-against-throughput plot here (SVG).
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Seed of arrivals, lengths and prompts.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// One request's timings.
#[derive(Clone, Copy, Debug)]
struct Sample {
    ttft: f64,
    tpot: Option<f64>,
    tokens: usize,
}

/// One offered rate's figures.
#[derive(Clone, Debug)]
pub struct RateRow {
    /// Offered requests per second.
    pub rate: f64,
    /// Requests that completed.
    pub completed: usize,
    /// Requests that failed (an error status or a cut stream).
    pub failed: usize,
    /// Output tokens per second over the rate's wall time.
    pub tokens_per_s: f64,
    /// TTFT p50 and p99, seconds.
    pub ttft: (f64, f64),
    /// TPOT p50 and p99, seconds.
    pub tpot: (f64, f64),
    /// Completed requests per second meeting both targets.
    pub goodput: f64,
}

fn range(s: &str, what: &str) -> Result<(usize, usize)> {
    let bad = || {
        Error::invalid(
            "bench serve",
            format!("{what} must be MIN..MAX with 1 <= MIN <= MAX, got {s:?}"),
        )
    };
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let (a, b): (usize, usize) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// `host:port` of an `http://host:port` URL.
fn authority(url: &str) -> Result<String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        Error::invalid(
            "bench serve",
            format!("--url {url:?} must start with http://"),
        )
    })?;
    Ok(rest.trim_end_matches('/').to_string())
}

/// Streams one completion and times it; `None` if it failed.
fn one_request(addr: &str, body: &str) -> Option<Sample> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(600))).ok()?;
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: brrr\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    if !line.starts_with("HTTP/1.1 200") {
        return None;
    }
    let (mut first, mut last, mut tokens) = (None, t0.elapsed(), 0);
    loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let Some(data) = line.trim_end().strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let v: serde_json::Value = serde_json::from_str(data).ok()?;
        last = t0.elapsed();
        first.get_or_insert(last);
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            tokens = n as usize;
        }
    }
    let ttft = first?.as_secs_f64();
    let tpot = (tokens > 1).then(|| (last.as_secs_f64() - ttft) / (tokens - 1) as f64);
    Some(Sample { ttft, tpot, tokens })
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The request bodies of one rate, and their send times from its start.
fn workload(
    args: &ServeBenchArgs,
    text: &[u8],
    rng: &mut ChaCha8Rng,
    rate: f64,
) -> Result<Vec<(f64, String)>> {
    let (pmin, pmax) = range(&args.prompt_len, "--prompt-len")?;
    let (omin, omax) = range(&args.output_len, "--output-len")?;
    let gaps = Exp::new(rate)
        .map_err(|_| Error::invalid("bench serve", format!("rate {rate} must be positive")))?;
    let prefix = String::from_utf8_lossy(&text[..args.shared_prefix.min(text.len())]).to_string();
    let mut at = 0.0;
    (0..args.requests)
        .map(|_| {
            at += gaps.sample(rng);
            let len = rng.random_range(pmin..=pmax);
            let start = rng.random_range(0..text.len().saturating_sub(len).max(1));
            let own = String::from_utf8_lossy(&text[start..(start + len).min(text.len())]);
            let body = serde_json::json!({
                "prompt": format!("{prefix}{own}"),
                "max_tokens": rng.random_range(omin..=omax),
                "temperature": 0,
                "stream": true,
            });
            Ok((at, body.to_string()))
        })
        .collect()
}

/// Sends one rate's requests on schedule, one thread each, and gathers the figures.
fn run_rate(
    args: &ServeBenchArgs,
    addr: &str,
    text: &[u8],
    rate: f64,
    rng: &mut ChaCha8Rng,
) -> Result<RateRow> {
    let work = workload(args, text, rng, rate)?;
    let t0 = Instant::now();
    let handles: Vec<_> = work
        .into_iter()
        .map(|(at, body)| {
            let wait = Duration::from_secs_f64(at).saturating_sub(t0.elapsed());
            std::thread::sleep(wait);
            let addr = addr.to_string();
            std::thread::spawn(move || one_request(&addr, &body))
        })
        .collect();
    let samples: Vec<Option<Sample>> = handles
        .into_iter()
        .map(|h| h.join().ok().flatten())
        .collect();
    let wall = t0.elapsed().as_secs_f64();
    let ok: Vec<Sample> = samples.iter().flatten().copied().collect();
    let mut ttft: Vec<f64> = ok.iter().map(|s| s.ttft).collect();
    let mut tpot: Vec<f64> = ok.iter().filter_map(|s| s.tpot).collect();
    let good = ok
        .iter()
        .filter(|s| {
            s.ttft * 1e3 <= args.slo_ttft_ms && s.tpot.is_none_or(|t| t * 1e3 <= args.slo_tpot_ms)
        })
        .count();
    Ok(RateRow {
        rate,
        completed: ok.len(),
        failed: samples.len() - ok.len(),
        tokens_per_s: ok.iter().map(|s| s.tokens).sum::<usize>() as f64 / wall,
        ttft: (percentile(&mut ttft, 0.5), percentile(&mut ttft, 0.99)),
        tpot: (percentile(&mut tpot, 0.5), percentile(&mut tpot, 0.99)),
        goodput: good as f64 / wall,
    })
}

/// Runs `brrr bench serve`: each rate in turn against one server.
pub fn run(args: &ServeBenchArgs, progress: &mut dyn FnMut(&str)) -> Result<Vec<RateRow>> {
    let text = std::fs::read(DEFAULT_CORPUS)
        .map_err(|e| Error::io(format!("reading {DEFAULT_CORPUS}"), e))?;
    let text = text[text.len() * 9 / 10..].to_vec();
    match (&args.url, &args.dir) {
        (Some(url), _) => rates(args, &authority(url)?, &text, progress),
        (None, Some(dir)) => {
            let serve = ServeArgs::for_bench(dir.clone())?;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                serve_cmd::run(&serve, &mut |url| {
                    let _ = tx.send(url.to_string());
                })
            });
            let url = rx.recv_timeout(Duration::from_secs(120)).map_err(|_| {
                Error::invalid("bench serve", "the in-process server did not start")
            })?;
            progress(&format!("serving {} at {url}", dir.display()));
            rates(args, &authority(&url)?, &text, progress)
        }
        (None, None) => Err(Error::invalid(
            "bench serve",
            "give a run directory or --url",
        )),
    }
}

fn rates(
    args: &ServeBenchArgs,
    addr: &str,
    text: &[u8],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<RateRow>> {
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut rows = Vec::new();
    for &rate in &args.rates {
        progress(&format!("{} requests at {rate} per second", args.requests));
        rows.push(run_rate(args, addr, text, rate, &mut rng)?);
    }
    if let Some(path) = &args.svg {
        crate::atomic::write_atomic(path, latency_svg(&rows)?.as_bytes())?;
    }
    Ok(rows)
}

/// The table of every rate.
pub fn table(rows: &[RateRow]) -> String {
    let mut out = String::from(
        "| offered req/s | completed | failed | tokens/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | goodput req/s |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} |",
            r.rate,
            r.completed,
            r.failed,
            r.tokens_per_s,
            1e3 * r.ttft.0,
            1e3 * r.ttft.1,
            1e3 * r.tpot.0,
            1e3 * r.tpot.1,
            r.goodput
        );
    }
    out
}

/// p99 TPOT and p99 TTFT against output tokens per second, one point per rate.
fn latency_svg(rows: &[RateRow]) -> Result<String> {
    use plotters::prelude::*;
    let err =
        |e: &dyn std::fmt::Display| Error::invalid("bench serve", format!("plotting failed: {e}"));
    let x_max = rows.iter().map(|r| r.tokens_per_s).fold(1.0, f64::max) * 1.1;
    let y_max = rows
        .iter()
        .flat_map(|r| [r.tpot.1, r.ttft.1])
        .filter(|y| y.is_finite())
        .fold(1e-3, f64::max)
        * 1e3
        * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "latency against throughput (brrr bench serve)",
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("output tokens per second")
            .y_desc("ms (p99)")
            .draw()
            .map_err(|e| err(&e))?;
        let series = [
            (
                "TTFT p99",
                RGBColor(31, 119, 180),
                rows.iter()
                    .map(|r| (r.tokens_per_s, 1e3 * r.ttft.1))
                    .collect::<Vec<_>>(),
            ),
            (
                "TPOT p99",
                RGBColor(214, 39, 40),
                rows.iter()
                    .map(|r| (r.tokens_per_s, 1e3 * r.tpot.1))
                    .collect(),
            ),
        ];
        for (name, c, pts) in series {
            let pts: Vec<(f64, f64)> = pts.into_iter().filter(|p| p.1.is_finite()).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}
