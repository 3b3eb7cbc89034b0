use brrr_perf::comms::Collective;

/// Algorithm bandwidth times the collective's factor.
pub fn bus_bandwidth(collective: Collective, n: u64, bytes: f64, seconds: f64) -> f64 {
    let n = n as f64;
    let factor = match collective {
        Collective::AllReduce => 2.0 * (n - 1.0) / n,
        Collective::ReduceScatter | Collective::AllGather | Collective::AllToAll => (n - 1.0) / n,
        Collective::Broadcast => 1.0,
    };
    bytes / seconds * factor
}
