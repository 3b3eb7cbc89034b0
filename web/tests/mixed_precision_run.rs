//! The mixed-precision page's fp16 run, natively on brrr-cpu: the same preset and
//! scaler options the page trains with in the browser show what the page promises
//! (skipped steps at the start, the scale backing off, then growing again).
#![cfg(not(target_arch = "wasm32"))]

use brrr_cpu::CpuBackend;
use brrr_train::{Batcher, Corpus, Trainer, val_batches};
use brrr_web::logic::mixed_precision::{
    AMP_PRESET, ScaleInput, ScalePoint, amp_config, amp_train_config, summarize,
};
use brrr_web::logic::sampling::preset;

const CORPUS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crates/brrr/corpus/sotu.txt"
);

#[test]
fn the_default_run_skips_backs_off_and_grows() {
    let input = ScaleInput::default();
    let amp = amp_config(&input).unwrap();
    let init = amp.scaler.init_scale;
    let cfg = amp_train_config(&preset(AMP_PRESET), input.steps, CORPUS, amp);
    let corpus = Corpus::load(CORPUS).unwrap();
    let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches).unwrap();
    let mut t = Trainer::new(&CpuBackend::new(), cfg, Box::new(data), val).unwrap();
    let mut points = Vec::new();
    while !t.is_finished() {
        let s = t.step_blocking().unwrap();
        points.push(ScalePoint {
            step: s.step,
            loss: s.loss,
            scale: s.loss_scale,
            skipped: s.skipped,
        });
    }
    let scales: Vec<String> = points
        .iter()
        .map(|p| format!("{}{}", p.scale.log2(), if p.skipped { "*" } else { "" }))
        .collect();
    println!(
        "log2 scale after each step (* skipped): {}",
        scales.join(" ")
    );
    let s = summarize(init, &points);
    println!("{s:?}");
    assert!(
        points[0].skipped,
        "2^{} overflows at the first step",
        input.init_log2
    );
    assert!(s.skipped >= 2 && s.backoffs >= 2, "{s:?}");
    assert!(s.growths >= 1, "{s:?}");
    assert!(s.applied as f64 >= 0.6 * input.steps as f64, "{s:?}");
    let first = points.first().unwrap().loss;
    let last = points.last().unwrap().loss;
    assert!(last < first - 0.5, "the loss fell from {first} to {last}");
}
