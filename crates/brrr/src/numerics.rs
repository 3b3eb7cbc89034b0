//! `brrr numerics`: the mixed-precision numerics explorer. Prints what f16, bf16 and
//! f32 represent, the autocast policy, and where a real run's gradients fall against
//! f16's range before and after loss scaling; writes the two figures as SVG.

use crate::data::{Corpus, DEFAULT_CORPUS};
use crate::train::{CHECKPOINT_FILE, read_config};
use brrr_amp::numerics::{BF16, F16, FORMATS, FateCounts, Format, Log2Histogram};
use brrr_amp::{Policy, svg};
use brrr_backend::{DType, Error, Result, block_on};
use brrr_cpu::CpuBackend;
use brrr_nn::Module;
use brrr_train::{Batcher, TrainConfig, TrainState, Trainer, val_batches};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// `brrr numerics`'s flags.
#[derive(clap::Args, Debug)]
pub struct NumericsArgs {
    /// Take the gradients from this run's checkpoint (a `brrr train` output directory);
    /// without it, a fresh tiny GPT is trained for --steps steps on the shipped corpus.
    #[arg(long)]
    pub run: Option<PathBuf>,
    /// Steps of the fresh run whose last gradients are shown.
    #[arg(long, default_value_t = 50)]
    pub steps: u64,
    /// The loss scale to show the gradients under.
    #[arg(long, default_value_t = 65536.0)]
    pub scale: f64,
    /// Where to write `formats.svg` and `gradients.svg`.
    #[arg(long, default_value = "runs/numerics")]
    pub out: PathBuf,
}

/// The report, as text; the SVGs go to `args.out`.
pub fn run(args: &NumericsArgs) -> Result<String> {
    if !(args.scale.is_finite() && args.scale > 0.0) {
        return Err(Error::invalid(
            "numerics",
            format!("--scale must be positive, got {}", args.scale),
        ));
    }
    let mut out = formats_table();
    out += &examples_table();
    out += &policy_table()?;
    let (grads, what) = gradients(args)?;
    out += &gradient_table(&grads, &what, args.scale);
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::io(format!("{}: creating", args.out.display()), e))?;
    let before = Log2Histogram::of(&grads, 1.0);
    let after = Log2Histogram::of(&grads, args.scale);
    let title = format!("gradient magnitudes of {what} against f16");
    write(
        &args.out.join("gradients.svg"),
        &svg::gradient_histogram(&title, &before, &after, args.scale),
    )?;
    write(
        &args.out.join("formats.svg"),
        &svg::format_ranges("subnormal and normal ranges", &FORMATS),
    )?;
    let _ = writeln!(
        out,
        "\nwrote {}/gradients.svg and formats.svg",
        args.out.display()
    );
    Ok(out)
}

fn write(path: &Path, text: &str) -> Result<()> {
    crate::atomic::write_atomic(path, text.as_bytes())
}

/// Each format's limits, computed from its bit layout.
pub fn formats_table() -> String {
    let mut s = String::from(
        "format  exp  mantissa  largest finite  smallest normal  smallest subnormal  epsilon    digits\n",
    );
    for f in FORMATS {
        let _ = writeln!(
            s,
            "{:<6}  {:>3}  {:>8}  {:>14.6e}  {:>15.6e}  {:>18.6e}  {:>9.3e}  {:>6.2}",
            f.name,
            f.exponent_bits,
            f.mantissa_bits,
            f.max_finite(),
            f.min_normal(),
            f.min_subnormal(),
            f.epsilon(),
            f.decimal_digits()
        );
    }
    s
}

/// Some values and what f16 and bf16 make of them.
pub fn examples_table() -> String {
    let mut s =
        String::from("\nvalue          f16 keeps       (fate)       bf16 keeps      (fate)\n");
    for x in [1e-8, 3e-6, 0.1, 1.0 + 1.0 / 512.0, 1000.3, 70000.0, 1e38] {
        let cell =
            |f: &Format| format!("{:<14.7e}  {:<11}", f.round(x), format!("{:?}", f.fate(x)));
        let _ = writeln!(s, "{x:<13.6e}  {}  {}", cell(&F16), cell(&BF16));
    }
    s
}

/// The default f16 policy, class by class.
pub fn policy_table() -> Result<String> {
    let p = Policy::new(DType::F16)?;
    let mut s = String::from("\nautocast policy (--amp fp16; bf16 the same with bf16)\n");
    for (class, dtype) in p.table() {
        let why = class.always_f32().unwrap_or("");
        let _ = writeln!(s, "  {:<40} {:<5} {why}", class.name(), dtype.to_string());
    }
    Ok(s)
}

fn gradient_table(grads: &[f32], what: &str, scale: f64) -> String {
    let mut s = format!("\ngradients of {what}: {} values\n", grads.len());
    s += "format  scale        zero   normal  subnormal  underflow (to 0)  overflow\n";
    for (f, sc) in [(F16, 1.0), (F16, scale), (BF16, 1.0)] {
        let c = FateCounts::of(&f, grads, sc);
        let _ = writeln!(
            s,
            "{:<6}  {:<10}  {:>5}  {:>7}  {:>9}  {:>9} ({:>5.2}%)  {:>8}",
            f.name,
            sc,
            c.zero,
            c.normal,
            c.subnormal,
            c.underflow,
            100.0 * c.underflow_fraction(),
            c.overflow
        );
    }
    s
}

/// Every parameter gradient of one training step, in f32, and a description.
fn gradients(args: &NumericsArgs) -> Result<(Vec<f32>, String)> {
    let backend = CpuBackend::new();
    let (mut cfg, state, what) = match &args.run {
        Some(dir) => {
            let cfg = read_config(dir)?;
            let state = TrainState::load(dir.join(CHECKPOINT_FILE))?;
            let what = format!("{} at step {}", dir.display(), state.step);
            (cfg, Some(state), what)
        }
        None => {
            let cfg = TrainConfig {
                steps: args.steps.max(1),
                corpus: DEFAULT_CORPUS.to_string(),
                ..TrainConfig::default()
            };
            let what = format!("the tiny GPT at step {}", cfg.steps);
            (cfg, None, what)
        }
    };
    // The gradients are measured in f32: what 16 bits would have to hold.
    cfg.amp = Default::default();
    let corpus = Corpus::load(&cfg.corpus)?;
    let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
    let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, 1)?;
    let steps = match &state {
        Some(s) => s.step + 1,
        None => cfg.steps,
    };
    cfg.steps = cfg.steps.max(steps);
    let mut trainer = Trainer::new(&backend, cfg, Box::new(data), val)?;
    if let Some(s) = &state {
        trainer.restore(s)?;
    }
    while trainer.steps_done() < steps {
        trainer.step_blocking()?;
    }
    let mut grads = Vec::new();
    for p in trainer.model().params() {
        grads.extend(
            block_on(p.grad.to_host())?
                .to_f64()
                .into_iter()
                .map(|x| x as f32),
        );
    }
    Ok((grads, what))
}
