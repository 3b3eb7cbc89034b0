//! [`Layout`]: how a run is spread over devices (data, tensor, sequence and pipeline
//! parallelism, ZeRO), part of every [`TrainConfig`], and the one place that says which
//! features combine with which layout ([`Layout::validate`]).
//!
//! The engines live above this crate (brrr-dp, brrr-tp, brrr-pp) and brrr-launch picks
//! one from the layout; this module holds only the plain description, so a config file
//! or checkpoint says how it was trained without depending on them.

use crate::config::TrainConfig;
use brrr_backend::{Error, Result};
use serde::{Deserialize, Serialize};

/// The parallel layout of a run: `dp × tp × pp` ranks in Megatron's order (tensor
/// fastest, then pipeline, then data).
///
/// `TrainConfig::batch_size` is the global micro-batch in every layout (each of the `dp`
/// replicas trains `batch_size / dp` of its rows) and `TrainConfig::grad_accum` the
/// micro-batches per step (a pipeline's `--micro-batches`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Layout {
    /// Data-parallel replicas (`--dp`).
    pub dp: usize,
    /// Tensor-parallel ranks per layer (`--tp`, Megatron).
    pub tp: usize,
    /// Pipeline stages (`--pp`).
    pub pp: usize,
    /// Sequence parallelism with `--tp` (`--sp`, Korthikanti et al. 2022).
    pub sp: bool,
    /// ZeRO stage over the `--dp` replicas (`--zero`): 0 DDP, 1 moments, 2 + gradients,
    /// 3 + parameters sharded; with `--tp` or `--pp`, stage 1 (by whole parameters,
    /// brrr-dp's `ParamOwners`).
    pub zero: u8,
    /// The pipeline schedule with `--pp` (`--schedule`): gpipe, 1f1b, interleaved:V,
    /// zb-h1, zb-h2.
    pub schedule: String,
    /// Gradient bucket size in MiB of the `--dp` average (`--bucket-mb`); `None`:
    /// PyTorch's 25.
    pub bucket_mb: Option<f64>,
}

impl Default for Layout {
    /// One device.
    fn default() -> Self {
        Layout {
            dp: 1,
            tp: 1,
            pp: 1,
            sp: false,
            zero: 0,
            schedule: "1f1b".into(),
            bucket_mb: None,
        }
    }
}

/// Which engine runs a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// `brrr_train::Trainer`.
    OneDevice,
    /// brrr-dp's `DataParallel` (DDP and ZeRO 1-3).
    DataParallel,
    /// brrr-tp's `TpTrainer` (`dp × tp`).
    TensorParallel,
    /// brrr-pp's `PipelineEngine` (`dp × tp × pp`).
    Pipeline,
}

impl Layout {
    /// Ranks in the world: `dp · tp · pp`.
    pub fn world(&self) -> usize {
        self.dp.saturating_mul(self.tp).saturating_mul(self.pp)
    }

    /// The engine that runs this layout.
    pub fn engine(&self) -> EngineKind {
        match (self.pp > 1, self.tp > 1 || self.sp, self.world() > 1) {
            (true, _, _) => EngineKind::Pipeline,
            (false, true, _) => EngineKind::TensorParallel,
            (false, false, true) => EngineKind::DataParallel,
            // `--zero` or `--bucket-mb` on one rank is still brrr-dp's engine.
            _ if self.zero > 0 || self.bucket_mb.is_some() => EngineKind::DataParallel,
            _ => EngineKind::OneDevice,
        }
    }

    /// The layout's flags as `brrr train` takes them, e.g. `--dp 2 --tp 2 --sp`.
    pub fn flags(&self) -> String {
        let mut s = Vec::new();
        if self.dp > 1 {
            s.push(format!("--dp {}", self.dp));
        }
        if self.zero > 0 {
            s.push(format!("--zero {}", self.zero));
        }
        if self.tp > 1 {
            s.push(format!("--tp {}", self.tp));
        }
        if self.sp {
            s.push("--sp".into());
        }
        if self.pp > 1 {
            s.push(format!("--pp {} --schedule {}", self.pp, self.schedule));
        }
        match s.is_empty() {
            true => "one device".into(),
            false => s.join(" "),
        }
    }

    /// Checks the layout against the run: sizes that must divide, and the features a
    /// layout does not combine with yet, each error naming both options.
    pub fn validate(&self, cfg: &TrainConfig) -> Result<()> {
        self.validate_sizes(cfg)?;
        self.validate_features(cfg)
    }

    fn validate_sizes(&self, cfg: &TrainConfig) -> Result<()> {
        let bad = |m: String| Err(Error::invalid("train", m));
        if self.dp == 0 || self.tp == 0 || self.pp == 0 {
            return bad("--dp, --tp and --pp must be at least 1".into());
        }
        if self.zero > 3 {
            return bad(format!("--zero must be 0, 1, 2 or 3, got {}", self.zero));
        }
        if self.sp && self.tp < 2 {
            return bad("--sp needs --tp 2 or more".into());
        }
        if let Some(mb) = self.bucket_mb
            && !(mb.is_finite() && mb > 0.0)
        {
            return bad(format!("--bucket-mb must be positive, got {mb}"));
        }
        if !cfg.batch_size.is_multiple_of(self.dp) {
            return bad(format!(
                "--batch-size {} (the global batch) must be a multiple of --dp {}",
                cfg.batch_size, self.dp
            ));
        }
        let m = &cfg.model;
        if self.tp > 1 {
            let t = self.tp;
            if !m.n_head.is_multiple_of(t) {
                return bad(format!(
                    "--tp {t}: the {} attention heads do not divide by {t} ranks",
                    m.n_head
                ));
            }
            if !m.n_embd.is_multiple_of(t) {
                return bad(format!(
                    "--tp {t}: the width n_embd = {} does not divide by {t} ranks",
                    m.n_embd
                ));
            }
            if !m.vocab_size.is_multiple_of(t) {
                return bad(format!(
                    "--tp {t}: the vocabulary of {} does not divide by {t} ranks",
                    m.vocab_size
                ));
            }
        }
        if self.sp && !cfg.seq_len.is_multiple_of(self.tp) {
            return bad(format!(
                "--sp: the sequence length {} does not divide by --tp {}",
                cfg.seq_len, self.tp
            ));
        }
        if self.pp > m.n_layer {
            return bad(format!(
                "--pp {}: the model has only {} blocks to cut into stages",
                self.pp, m.n_layer
            ));
        }
        Ok(())
    }

    /// The feature matrix: what each engine does not do yet. Everything not refused
    /// here runs in every layout.
    fn validate_features(&self, cfg: &TrainConfig) -> Result<()> {
        // The engines other than one device's save and shard f32 moments only.
        if cfg.optimizer != brrr_nn::Optimizer::AdamW && self.engine() != EngineKind::OneDevice {
            return Err(Error::invalid(
                "train",
                format!(
                    "--optimizer {} with --dp, --tp or --pp: not yet; the parallel engines \
                     save and shard f32 moments only (train on one device, or use --optimizer \
                     adamw)",
                    cfg.optimizer
                ),
            ));
        }
        if let Some(ft) = &cfg.finetune
            && self.engine() != EngineKind::OneDevice
        {
            let what = match ft.lora {
                Some(_) => "--lora-rank",
                None => "brrr finetune",
            };
            return Err(Error::invalid(
                "train",
                format!(
                    "{what} with --dp, --tp or --pp: not yet; fine-tuning loads the base run's \
                     weights on one device only (fine-tune on one device)"
                ),
            ));
        }
        if cfg.offload && self.engine() != EngineKind::OneDevice {
            return Err(Error::invalid(
                "train",
                "--offload with --dp, --tp or --pp: not yet; the offloaded optimizer runs \
                 on one device's host (train on one device, or drop --offload)",
            ));
        }
        if cfg.lora().is_some() && cfg.amp.policy().is_some() {
            return Err(Error::invalid(
                "train",
                "--lora-rank with --amp: not yet; the adapters train in f32 beside f32 \
                 weights (drop --amp)",
            ));
        }
        match (self.engine(), self.zero) {
            // Not "yet": the combination gains nothing (DeepSpeed refuses it as well).
            (EngineKind::Pipeline, 2..) => Err(Error::invalid(
                "train",
                format!(
                    "--zero {} with --pp: a pipeline keeps every gradient until the \
                     step ends (it accumulates them over the micro-batches), so sharding \
                     gradients saves nothing, and sharding parameters would gather each \
                     stage's weights again for every micro-batch (DeepSpeed refuses both); \
                     use --zero 1",
                    self.zero
                ),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_checkpoint::Strategy;

    /// Sets part of a config.
    type Set = fn(&mut TrainConfig);

    fn cfg(f: impl FnOnce(&mut TrainConfig)) -> TrainConfig {
        let mut c = TrainConfig::default();
        f(&mut c);
        c
    }

    #[test]
    fn each_layout_has_its_engine() {
        let l = |f: fn(&mut Layout)| {
            let mut l = Layout::default();
            f(&mut l);
            l.engine()
        };
        assert_eq!(l(|_| {}), EngineKind::OneDevice);
        assert_eq!(l(|l| l.dp = 2), EngineKind::DataParallel);
        assert_eq!(l(|l| l.zero = 1), EngineKind::DataParallel);
        assert_eq!(l(|l| (l.dp, l.tp) = (2, 2)), EngineKind::TensorParallel);
        assert_eq!(l(|l| (l.tp, l.pp) = (2, 2)), EngineKind::Pipeline);
        assert_eq!(Layout::default().flags(), "one device");
    }

    /// A refusal names the feature's flag and the layout's.
    #[test]
    fn refusals_name_both_options() {
        for (dp, tp, pp) in [(2, 1, 1), (1, 2, 1), (2, 2, 1), (1, 1, 2), (2, 2, 2)] {
            let c = cfg(|c| {
                (c.layout.dp, c.layout.tp, c.layout.pp) = (dp, tp, pp);
                c.checkpoint = Strategy::Sqrt;
            });
            assert!(
                c.validate().is_ok(),
                "--checkpoint with --dp {dp} --tp {tp}"
            );
        }
        for (tp, pp) in [(2, 1), (1, 2), (2, 2)] {
            let c =
                cfg(|c| (c.layout.dp, c.layout.tp, c.layout.pp, c.layout.zero) = (2, tp, pp, 1));
            assert!(c.validate().is_ok(), "--zero 1 with --tp {tp} --pp {pp}");
            for zero in [2, 3] {
                let c = cfg(|c| (c.layout.tp, c.layout.pp, c.layout.zero) = (tp, pp, zero));
                match pp {
                    1 => assert!(c.validate().is_ok(), "--zero {zero} with --tp {tp}"),
                    _ => {
                        let e = c.validate().unwrap_err().to_string();
                        assert!(e.contains("--zero") && e.contains("--pp"), "{e}");
                    }
                }
            }
        }
    }

    #[test]
    fn sizes_that_do_not_divide_are_errors_naming_the_flag() {
        let cases: [(Set, &str); 6] = [
            (|c| c.layout.dp = 3, "multiple of --dp 3"),
            (|c| c.layout.tp = 3, "heads do not divide by 3"),
            (
                |c| (c.layout.tp, c.layout.sp, c.seq_len) = (2, true, 127),
                "--sp",
            ),
            (|c| c.layout.sp = true, "--sp needs --tp"),
            (|c| c.layout.pp = 5, "--pp 5"),
            (|c| c.layout.zero = 4, "--zero"),
        ];
        for (set, want) in cases {
            let e = cfg(set).validate().unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
        assert!(
            cfg(|c| (c.layout.dp, c.layout.tp, c.layout.pp) = (2, 2, 2))
                .validate()
                .is_ok()
        );
    }

    /// Configurations written before the layout existed read as one device.
    #[test]
    fn old_configs_read_as_one_device() {
        let mut text = toml::to_string(&TrainConfig::default()).unwrap();
        let at = text.find("[layout]").unwrap();
        text.truncate(at);
        let c: TrainConfig = toml::from_str(&text).unwrap();
        assert_eq!(c.layout, Layout::default());
    }
}
