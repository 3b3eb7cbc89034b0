//! Chapter "Mixed precision": the formats' limits and rounding from `brrr_amp::numerics`,
//! the autocast policy, a step's memory per `--amp` mode measured by brrr-cpu's
//! counters, and the gradient histogram of a real (short, deterministic) run.

use crate::md::{Md, page, sig3};
use brrr_amp::numerics::{BF16, F16, FORMATS, FateCounts, Log2Histogram};
use brrr_amp::{AmpConfig, AmpMode, Policy, svg};
use brrr_backend::{Backend, DType, Result};
use brrr_cpu::CpuBackend;
use brrr_nn::Module;
use brrr_train::data::{Batcher, Corpus, SYNTHETIC, synthetic_corpus, val_batches};

/// The corpus `brrr train` ships with.
const CORPUS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../crates/brrr/corpus/sotu.txt"
);
use brrr_train::{TrainConfig, Trainer};

fn formats_table() -> String {
    let mut t = Md::new(&[
        "format",
        "exponent bits",
        "mantissa bits",
        "largest finite",
        "smallest normal",
        "smallest subnormal",
        "epsilon (2^-m)",
        "decimal digits",
    ]);
    for f in FORMATS {
        t.row(vec![
            format!("`{}`", f.name),
            f.exponent_bits.to_string(),
            f.mantissa_bits.to_string(),
            format!("{:.4e}", f.max_finite()),
            format!("{:.4e}", f.min_normal()),
            format!("{:.4e}", f.min_subnormal()),
            format!("{:.3e}", f.epsilon()),
            format!("{:.2}", f.decimal_digits()),
        ]);
    }
    page(&t.render())
}

fn rounding_table() -> String {
    let mut t = Md::new(&["value", "in f16", "f16 fate", "in bf16", "bf16 fate"]);
    for x in [1e-8, 3e-6, 0.1, 1.0 + 1.0 / 512.0, 1000.3, 70000.0] {
        t.row(vec![
            format!("{x:e}"),
            format!("{:.7e}", F16.round(x)),
            format!("{:?}", F16.fate(x)),
            format!("{:.7e}", BF16.round(x)),
            format!("{:?}", BF16.fate(x)),
        ]);
    }
    page(&t.render())
}

fn policy_table() -> Result<String> {
    let (h, b) = (Policy::new(DType::F16)?, Policy::new(DType::BF16)?);
    let mut t = Md::new(&["op class", "`--amp fp16`", "`--amp bf16`", "why f32"]).left(&[0, 3]);
    for (class, dtype) in h.table() {
        t.row(vec![
            class.name().to_string(),
            dtype.to_string(),
            b.dtype(class).to_string(),
            class.always_f32().unwrap_or("").to_string(),
        ]);
    }
    Ok(page(&t.render()))
}

fn trainer(mode: AmpMode, steps: u64) -> Result<(CpuBackend, Trainer<CpuBackend>)> {
    let cfg = TrainConfig {
        steps,
        corpus: SYNTHETIC.into(),
        eval_every: u64::MAX,
        eval_batches: 1,
        amp: AmpConfig::new(mode),
        ..TrainConfig::default()
    };
    let corpus = synthetic_corpus(cfg.seed)?;
    let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
    let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, 1)?;
    let be = CpuBackend::new();
    let t = Trainer::new(&be, cfg, Box::new(data), val)?;
    Ok((be, t))
}

/// The second step of the default model (the first creates AdamW's moments): bytes
/// held before it, and its peak above them.
fn memory_table() -> Result<String> {
    let mut t = Md::new(&[
        "`--amp`",
        "held between steps",
        "activation peak of a step",
        "× f32",
    ]);
    let mut base = None;
    for mode in [AmpMode::Off, AmpMode::Bf16, AmpMode::Fp16] {
        let (be, mut tr) = trainer(mode, 2)?;
        tr.step_blocking()?;
        let held = be.memory_stats().bytes_in_use;
        tr.step_blocking()?;
        let act = be.memory_stats().peak_bytes - held;
        let b = *base.get_or_insert(act);
        t.row(vec![
            mode.name().to_string(),
            brrr_perf::table::bytes_binary(held as f64),
            brrr_perf::table::bytes_binary(act as f64),
            sig3(act as f64 / b as f64),
        ]);
    }
    Ok(page(&t.render()))
}

/// The gradients of the default model after 20 f32 steps on the shipped corpus.
fn gradients() -> Result<Vec<f32>> {
    let cfg = TrainConfig {
        steps: 20,
        corpus: CORPUS.into(),
        eval_batches: 1,
        ..TrainConfig::default()
    };
    let corpus = Corpus::load(CORPUS)?;
    let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
    let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, 1)?;
    let mut tr = Trainer::new(&CpuBackend::new(), cfg, Box::new(data), val)?;
    while !tr.is_finished() {
        tr.step_blocking()?;
    }
    let mut g = Vec::new();
    for p in tr.model().params() {
        g.extend(
            brrr_backend::block_on(p.grad.to_host())?
                .to_f64()
                .into_iter()
                .map(|x| x as f32),
        );
    }
    Ok(g)
}

fn gradient_files() -> Result<Vec<(String, String)>> {
    let g = gradients()?;
    let scale = 65536.0;
    let mut t = Md::new(&[
        "stored as",
        "loss scale",
        "normal",
        "subnormal",
        "flushed to 0",
        "overflow",
    ]);
    for (f, s) in [(F16, 1.0), (F16, scale), (BF16, 1.0)] {
        let c = FateCounts::of(&f, &g, s);
        t.row(vec![
            f.name.to_string(),
            format!("{s}"),
            c.normal.to_string(),
            c.subnormal.to_string(),
            format!("{} ({:.2}%)", c.underflow, 100.0 * c.underflow_fraction()),
            c.overflow.to_string(),
        ]);
    }
    let svg = svg::gradient_histogram(
        "gradients of the default GPT after 20 steps, against f16",
        &Log2Histogram::of(&g, 1.0),
        &Log2Histogram::of(&g, scale),
        scale,
    );
    Ok(vec![
        ("amp-gradients.md".into(), page(&t.render())),
        ("amp-gradients.svg".into(), svg),
    ])
}

/// Every file of the chapter.
pub fn files() -> Result<Vec<(String, String)>> {
    let mut v = vec![
        ("amp-formats.md".into(), formats_table()),
        ("amp-rounding.md".into(), rounding_table()),
        ("amp-policy.md".into(), policy_table()?),
        ("amp-memory.md".into(), memory_table()?),
        (
            "amp-ranges.svg".into(),
            svg::format_ranges(
                "where each format has normal (blue) and subnormal values",
                &FORMATS,
            ),
        ),
    ];
    v.extend(gradient_files()?);
    Ok(v)
}
