//! How much memory a configuration needs, computed with overflow checks before anything
//! is allocated, so that `--batch-size 99999999999999` is an error message rather than
//! an allocation failure that aborts the process.

use crate::config::TrainConfig;
use brrr_backend::{Error, Result};

/// Bytes a run needs, by where they live. Estimates, on the high side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryNeed {
    /// Host memory for data: one training batch and the fixed validation batches
    /// (`u32` inputs and targets, 8 bytes a token); with `--offload` also the optimizer's
    /// moments and f32 masters.
    pub host_bytes: u64,
    /// Backend memory: weights, gradients and two AdamW moments (16 bytes a parameter
    /// in f32), plus the activations one micro-batch keeps for its backward.
    pub device_bytes: u64,
}

impl MemoryNeed {
    /// Host plus device: what a run on the CPU backend needs of the machine's memory.
    pub fn total(&self) -> u64 {
        self.host_bytes.saturating_add(self.device_bytes)
    }
}

fn overflow(what: &str) -> Error {
    Error::invalid(
        "train",
        format!(
            "{what} overflows a 64-bit byte count: the sizes are far beyond any machine; \
             lower --batch-size, --seq-len, --eval-batches or the model size"
        ),
    )
}

/// Multiplies sizes, naming `what` in the error on overflow.
fn product(what: &str, factors: &[u64]) -> Result<u64> {
    factors
        .iter()
        .try_fold(1u64, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| overflow(what))
}

fn sum(what: &str, terms: &[u64]) -> Result<u64> {
    terms
        .iter()
        .try_fold(0u64, |acc, &t| acc.checked_add(t))
        .ok_or_else(|| overflow(what))
}

/// The memory `cfg` needs; errors if a product of its sizes overflows `u64`.
///
/// Activations per token of one micro-batch, in f32, counted from what the layers save
/// for the backward: per block about `16·C` values (LayerNorm inputs and outputs, the
/// `3C` of q, k, v, the attention output, the MLP's `4C` pre- and post-GELU) plus the
/// attention probabilities `2·H·T` (scores and softmax); then the logits and their
/// gradient, `2·V`. This is the tally of Korthikanti et al. 2022 ("Reducing Activation
/// Recomputation in Large Transformer Models", section 4.1) without dropout masks, in
/// 4-byte floats.
pub fn estimate(cfg: &TrainConfig) -> Result<MemoryNeed> {
    let m = &cfg.model;
    let u = |x: usize| x as u64;
    let (b, t, c, h, l, v) = (
        u(cfg.batch_size),
        u(cfg.seq_len),
        u(m.n_embd),
        u(m.n_head),
        u(m.n_layer),
        u(m.vocab_size),
    );
    let tokens = product("--batch-size × --seq-len", &[b, t])?;
    let val_tokens = product(
        "--eval-batches × --batch-size × --seq-len",
        &[u(cfg.eval_batches), tokens],
    )?;
    let host_bytes = product(
        "the data's bytes",
        &[sum("tokens", &[tokens, val_tokens])?, 8],
    )?;

    let params = sum(
        "the parameter count",
        &[
            product("the embeddings", &[sum("V + T", &[v, u(m.block_size)])?, c])?,
            product(
                "the blocks",
                &[
                    l,
                    sum("12C² + 13C", &[product("12C²", &[12, c, c])?, 13 * c])?,
                ],
            )?,
        ],
    )?;
    let state = product("the parameter state", &[params, 16])?;
    let per_block = sum(
        "a block's activations",
        &[product("16C", &[16, c])?, product("2HT", &[2, h, t])?],
    )?;
    let per_token = sum(
        "the activations per token",
        &[
            product("the blocks' activations", &[l, per_block])?,
            product("2V", &[2, v])?,
        ],
    )?;
    let acts = product("the activations", &[tokens, per_token, 4])?;
    // `--offload` moves the two moments and an f32 master (12 bytes a parameter) to the
    // host; the device keeps the weights and gradients.
    let (state, host_bytes) = match cfg.offload {
        true => (
            product("the parameter state", &[params, 8])?,
            sum(
                "the host's bytes",
                &[host_bytes, product("the offloaded state", &[params, 12])?],
            )?,
        ),
        false => (state, host_bytes),
    };
    Ok(MemoryNeed {
        host_bytes,
        device_bytes: sum("the backend's memory", &[state, acts])?,
    })
}

/// `bytes` for people: `12.3 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = bytes as f64;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < UNITS.len() {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{x:.1} {}", UNITS[i])
    }
}

/// Errors, saying what would be needed, if `need` bytes exceed `available` (`what`
/// names both, e.g. "host memory (MemAvailable)").
pub fn check_fits(need: u64, available: u64, what: &str) -> Result<()> {
    if need <= available {
        return Ok(());
    }
    Err(Error::invalid(
        "train",
        format!(
            "this configuration needs about {} of {what}, but only {} is available; \
             lower --batch-size, --seq-len, --eval-batches or the model size",
            human_bytes(need),
            human_bytes(available)
        ),
    ))
}

/// The kernel's estimate of memory available to new processes without swapping
/// (`MemAvailable` in `/proc/meminfo`), in bytes; `None` where there is no such file.
#[cfg(not(target_arch = "wasm32"))]
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

/// The `MemAvailable:  123456 kB` line of a `/proc/meminfo` text, in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_needs_a_plausible_amount() {
        let need = estimate(&TrainConfig::default()).unwrap();
        // 0.8M parameters × 16 bytes, plus 2048 tokens × (4 × (2048 + 2·4·128) + 512) × 4.
        assert!(
            need.device_bytes > 50 << 20 && need.device_bytes < 200 << 20,
            "{need:?}"
        );
        assert_eq!(need.host_bytes, (2048 + 8 * 2048) * 8);
    }

    // The sizes are flags a user types on a 64-bit host; they do not fit a 32-bit usize.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn absurd_sizes_are_errors_not_aborts() {
        let cfg = TrainConfig {
            batch_size: 99_999_999_999_999,
            ..TrainConfig::default()
        };
        let e = estimate(&cfg).unwrap_err().to_string();
        assert!(e.contains("overflows"), "{e}");
        let cfg = TrainConfig {
            eval_batches: 1_000_000_000_000,
            ..TrainConfig::default()
        };
        let need = estimate(&cfg).unwrap();
        let e = check_fits(need.total(), 8 << 30, "host memory")
            .unwrap_err()
            .to_string();
        assert!(e.contains("PiB") && e.contains("8.0 GiB"), "{e}");
    }

    #[test]
    fn meminfo_parsing() {
        let text = "MemTotal:       16323412 kB\nMemFree:  1 kB\nMemAvailable:   8000000 kB\n";
        assert_eq!(parse_mem_available(text), Some(8_192_000_000));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
