//! The server's counters and latency histograms, written in Prometheus's text format
//! (version 0.0.4) for `GET /metrics`. Written out rather than taken from a metrics
//! crate: a dozen numbers and three histograms are all a serving engine reports.

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A Prometheus histogram: cumulative counts per bucket, a sum and a count.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    /// Records one observation of `seconds`.
    pub fn observe(&mut self, seconds: f64) {
        for (c, &le) in self.counts.iter_mut().zip(&BUCKETS) {
            if seconds <= le {
                *c += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (c, le) in self.counts.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

/// Everything `/metrics` reports. Counters only grow; gauges are set by the engine
/// loop after every step.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests accepted by the engine.
    pub requests: AtomicU64,
    /// Requests that finished (a stop, the length limit or the context).
    pub finished: AtomicU64,
    /// Requests cancelled: the client went away or timed out.
    pub aborted: AtomicU64,
    /// Requests refused with a 4xx.
    pub rejected: AtomicU64,
    /// Prompt tokens of accepted requests.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Prompt tokens whose KV blocks came from the prefix cache.
    pub prefix_hit_tokens: AtomicU64,
    /// Requests running (in the batch).
    pub running: AtomicU64,
    /// Requests waiting for room.
    pub waiting: AtomicU64,
    /// KV-cache blocks referenced by requests.
    pub kv_blocks_used: AtomicU64,
    /// KV-cache blocks in all.
    pub kv_blocks_total: AtomicU64,
    /// Requests preempted for lack of blocks.
    pub preemptions: AtomicU64,
    /// Time to first token, per request.
    pub ttft: Mutex<Histogram>,
    /// Time per output token after the first, per request.
    pub tpot: Mutex<Histogram>,
    /// Arrival to last token, per finished request.
    pub e2e: Mutex<Histogram>,
}

fn observe(h: &Mutex<Histogram>, seconds: f64) {
    if let Ok(mut h) = h.lock() {
        h.observe(seconds);
    }
}

impl Metrics {
    /// Records a first token after `seconds`.
    pub fn first_token(&self, seconds: f64) {
        observe(&self.ttft, seconds);
    }

    /// Records a finished request: `tokens` generated, the first after `ttft`, the last
    /// after `total` seconds.
    pub fn request_done(&self, tokens: u64, ttft: f64, total: f64) {
        if tokens > 1 {
            observe(&self.tpot, (total - ttft) / (tokens - 1) as f64);
        }
        observe(&self.e2e, total);
    }

    /// Every counter and gauge: name, Prometheus type, help text, value.
    fn scalars(&self) -> [(&'static str, &'static str, &'static str, &AtomicU64); 12] {
        let c = "counter";
        let g = "gauge";
        [
            (
                "brrr_requests_total",
                c,
                "Requests accepted.",
                &self.requests,
            ),
            (
                "brrr_requests_finished_total",
                c,
                "Requests finished.",
                &self.finished,
            ),
            (
                "brrr_requests_aborted_total",
                c,
                "Requests cancelled (client gone or timed out).",
                &self.aborted,
            ),
            (
                "brrr_requests_rejected_total",
                c,
                "Requests refused with a 4xx.",
                &self.rejected,
            ),
            (
                "brrr_prompt_tokens_total",
                c,
                "Prompt tokens of accepted requests.",
                &self.prompt_tokens,
            ),
            (
                "brrr_generation_tokens_total",
                c,
                "Tokens generated.",
                &self.generated_tokens,
            ),
            (
                "brrr_prefix_cache_hit_tokens_total",
                c,
                "Prompt tokens taken from the prefix cache.",
                &self.prefix_hit_tokens,
            ),
            (
                "brrr_preemptions_total",
                c,
                "Requests preempted for lack of KV blocks.",
                &self.preemptions,
            ),
            (
                "brrr_requests_running",
                g,
                "Requests in the batch.",
                &self.running,
            ),
            (
                "brrr_requests_waiting",
                g,
                "Requests queued.",
                &self.waiting,
            ),
            (
                "brrr_kv_blocks_used",
                g,
                "KV-cache blocks in use.",
                &self.kv_blocks_used,
            ),
            (
                "brrr_kv_blocks_total",
                g,
                "KV-cache blocks in all.",
                &self.kv_blocks_total,
            ),
        ]
    }

    /// The Prometheus text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, kind, help, v) in self.scalars() {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
                v.load(Relaxed)
            );
        }
        let prompt = self.prompt_tokens.load(Relaxed);
        let rate = self.prefix_hit_tokens.load(Relaxed) as f64 / prompt.max(1) as f64;
        let _ = writeln!(
            out,
            "# HELP brrr_prefix_cache_hit_rate Share of prompt tokens taken from the prefix cache.\n\
             # TYPE brrr_prefix_cache_hit_rate gauge\nbrrr_prefix_cache_hit_rate {rate}"
        );
        let histograms = [
            (
                &self.ttft,
                "brrr_time_to_first_token_seconds",
                "Time to first token.",
            ),
            (
                &self.tpot,
                "brrr_time_per_output_token_seconds",
                "Time per output token after the first.",
            ),
            (
                &self.e2e,
                "brrr_request_latency_seconds",
                "Arrival to last token.",
            ),
        ];
        for (h, name, help) in histograms {
            if let Ok(h) = h.lock() {
                h.render(&mut out, name, help);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_has_cumulative_buckets() {
        let m = Metrics::default();
        m.requests.fetch_add(3, Relaxed);
        m.first_token(0.003);
        m.first_token(0.2);
        let text = m.render();
        assert!(text.contains("brrr_requests_total 3\n"), "{text}");
        assert!(text.contains("brrr_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("brrr_time_to_first_token_seconds_bucket{le=\"0.25\"} 2\n"));
        assert!(text.contains("brrr_time_to_first_token_seconds_count 2\n"));
        assert!(text.contains("# TYPE brrr_kv_blocks_used gauge\n"));
    }
}
