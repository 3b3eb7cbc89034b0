//! [`DataParallel`] as a [`brrr_train::Engine`]: the one training loop
//! (`brrr_train::run`) drives it as it drives one device.

use crate::engine::DataParallel;
use crate::model::ReplicaModel;
use brrr_backend::{Backend, Result};
use brrr_train::run_dir::DP_DIR;
use brrr_train::{Batch, Engine, StepStats, TrainConfig};
use std::path::Path;

/// Overlap measured over the steps the loop timed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timed {
    start: Option<u64>,
    hidden: f64,
    steps: u32,
}

impl<B: Backend, M: ReplicaModel<B>> DataParallel<B, M> {
    /// The fixed batches [`Engine::evaluate`] scores (global batches: every rank
    /// evaluates all of them on the whole model).
    pub fn set_validation(&mut self, val: Vec<Batch>) {
        self.val = val;
    }
}

impl<B: Backend, M: ReplicaModel<B>> Engine for DataParallel<B, M> {
    fn config(&self) -> &TrainConfig {
        DataParallel::config(self)
    }

    fn steps_done(&self) -> u64 {
        self.step
    }

    async fn step(&mut self) -> Result<StepStats> {
        let start = *self.timed.start.get_or_insert(self.step);
        let s = DataParallel::step(self)?;
        // A process's first step warms caches and allocators: not timed.
        if s.step > start + 1 {
            self.timed.hidden += self.report.hidden_fraction;
            self.timed.steps += 1;
        }
        Ok(s)
    }

    async fn evaluate(&mut self) -> Result<f32> {
        let val = std::mem::take(&mut self.val);
        let loss = DataParallel::evaluate(self, &val);
        self.val = val;
        loss
    }

    /// Every rank writes `dir/dp/dp-rank{r}-of{n}.bin` (atomic, fsynced). Shards of a
    /// tensor-parallel model instead put the whole model together (collective over both
    /// groups), which the first rank writes as one checkpoint: `brrr sample` and a run in
    /// any layout read it.
    async fn save_to(&mut self, dir: &Path) -> Result<()> {
        let Some(group) = self.model.shard_group() else {
            return self.save_shard(&dir.join(DP_DIR)).map(drop);
        };
        let writer = self.rank == 0 && group.rank() == 0;
        let state = self.model.whole_state(self.gather_state()?)?;
        match writer {
            true => brrr_train::save_state(&state, dir),
            false => Ok(()),
        }
    }

    /// This layout's shards when `dir` has them, else one whole checkpoint (a run of
    /// another layout, consolidated): the replicas then take their chunks of it (of
    /// their tensor-parallel shard of it).
    async fn restore_from(&mut self, dir: &Path) -> Result<()> {
        let shards = dir.join(DP_DIR);
        let whole = dir.join(brrr_train::CHECKPOINT_FILE);
        let own = crate::shard_path(&shards, self.rank, self.dp.world).exists();
        if self.model.shard_group().is_some() || (!own && whole.exists()) {
            let state = brrr_train::load_state(dir)?;
            return self.restore_state(&self.model.local_state(&state)?);
        }
        self.load_shard(&shards)
    }

    fn describe(&self) -> String {
        format!(
            "data parallel: --dp {} --zero {}{} ({} transport), {} buckets",
            self.dp.world,
            self.dp.zero,
            self.model.describe(),
            self.comm.transport(),
            self.groups.len()
        )
    }

    fn report(&self) -> Vec<String> {
        let r = &self.report;
        let mean_hidden = match self.timed.steps {
            0 => 0.0,
            n => self.timed.hidden / f64::from(n),
        };
        let mut lines = vec![format!(
            "data parallel (rank {}, last step): {} bytes sent, model states {} bytes on \
             the device (peak {}), {:.0}% of the bucket collectives hidden behind the \
             backward (mean over timed steps)",
            self.rank,
            r.comm.bytes_sent(),
            r.model_state_bytes,
            r.peak_bytes,
            100.0 * mean_hidden
        )];
        if self.dp.zero == 3 {
            lines.push(format!(
                "ZeRO-3 all-gathers (rank {}, last step): {:.0}% of their time hidden behind \
                 compute by prefetching the next block",
                self.rank,
                100.0 * r.gather_hidden_fraction()
            ));
        }
        lines
    }
}
