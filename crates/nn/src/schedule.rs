/// Linear warmup then cosine decay to `min_lr` (Loshchilov & Hutter 2017, SGDR, without
/// restarts; the schedule of GPT-3, Brown et al. 2020, App. B).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CosineSchedule {
    /// The peak learning rate, reached at the end of warmup.
    pub max_lr: f64,
    /// The floor the decay ends at, and the rate after `total_steps`.
    pub min_lr: f64,
    /// Steps of linear warmup (0: none).
    pub warmup_steps: u64,
    /// The step at which the decay reaches `min_lr` (warmup included).
    pub total_steps: u64,
}

impl CosineSchedule {
    /// Learning rate at `step` (counting from 0): `max_lr·(step+1)/warmup` during
    /// warmup, then `min + ½(max − min)(1 + cos(π·p))` with `p` the fraction of the
    /// decay done; `min_lr` after `total_steps`.
    pub fn lr(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return self.max_lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        if step >= self.total_steps {
            return self.min_lr;
        }
        let decay = (self.total_steps - self.warmup_steps).max(1) as f64;
        let p = (step - self.warmup_steps) as f64 / decay;
        self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1.0 + (std::f64::consts::PI * p).cos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_peak_and_floor() {
        let s = CosineSchedule {
            max_lr: 1.0,
            min_lr: 0.1,
            warmup_steps: 10,
            total_steps: 110,
        };
        assert!((s.lr(0) - 0.1).abs() < 1e-12);
        assert!((s.lr(9) - 1.0).abs() < 1e-12);
        assert!((s.lr(10) - 1.0).abs() < 1e-12);
        assert!((s.lr(60) - 0.55).abs() < 1e-12, "halfway is the midpoint");
        assert!((s.lr(200) - 0.1).abs() < 1e-12);
        assert!(
            (1..200).all(|i| i <= 10 || s.lr(i) <= s.lr(i - 1)),
            "decays monotonically"
        );
    }
}
