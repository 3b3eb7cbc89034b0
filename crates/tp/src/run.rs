//! [`TpTrainer`] as a [`brrr_train::Engine`]: it draws its global batches from its own
//! source, saves the whole model gathered from the shards (the single-device
//! checkpoint, which `brrr sample` and a one-device `--resume` read), and restores from
//! such a checkpoint by slicing it as [`crate::TpGpt`] holds it, so a run may change
//! between one device and `--tp` at a checkpoint.

use crate::shard::shard_by_name;
use crate::trainer::TpTrainer;
use brrr_backend::{Backend, Error, HostData, Result};
use brrr_nn::Module;
use brrr_tensor::Tensor;
use brrr_train::{Batch, BatchSource, Engine, StepStats, TrainConfig, TrainState};
use std::path::Path;

impl<B: Backend> TpTrainer<B> {
    /// Gives the engine its batches (global batches of `config.batch_size` rows; every
    /// rank draws the same and trains its data-parallel rows) and its validation
    /// batches (global too).
    pub fn set_data(&mut self, data: Box<dyn BatchSource>, val: Vec<Batch>) {
        self.data = Some(data);
        self.val = val;
    }

    /// Records each step's phases (`step`, `forward+backward`, `reduce grads`, `clip`,
    /// `adamw`, `evaluate`, `checkpoint`) into `tracer`.
    pub fn set_tracer(&mut self, tracer: std::sync::Arc<brrr_perf::trace::Tracer>) {
        self.tracer = tracer;
    }

    fn source(&mut self) -> Result<&mut Box<dyn BatchSource>> {
        self.data.as_mut().ok_or_else(|| {
            Error::invalid(
                "TpTrainer",
                "no batch source: call TpTrainer::set_data first",
            )
        })
    }

    /// Continues from a single-device `state` (what [`TpTrainer::state`] gathers): each
    /// parameter and its AdamW moments sliced for this rank, the step counts, and the
    /// batch source's position.
    pub fn restore(&mut self, state: &TrainState) -> Result<()> {
        const OP: &str = "TpTrainer::restore";
        if state.config.model != self.config.model {
            return Err(Error::invalid(
                OP,
                format!(
                    "the saved model {:?} is not this run's {:?}",
                    state.config.model, self.config.model
                ),
            ));
        }
        let comm = self.model.comm().clone();
        let (r, n, heads) = (comm.rank(), comm.world_size(), self.config.model.n_head);
        let backend = self.backend.clone();
        let shard = |name: &str, host: &HostData, shape: &[usize]| -> Result<Tensor<B>> {
            let full = Tensor::from_host(&backend, host, shape.to_vec())?;
            shard_by_name(name, &full, heads, r, n)
        };
        let mut moments = Vec::new();
        for p in self.model.params_mut() {
            let saved = state.param(&p.name).ok_or_else(|| {
                Error::Parse(format!("checkpoint has no tensor \"model.{}\"", p.name))
            })?;
            let value = shard(&p.name, &saved.value, &saved.shape)?;
            if value.dims() != p.value.dims() {
                return Err(Error::shape(
                    OP,
                    format!(
                        "{}: the checkpoint's slice is {:?}, this rank holds {:?}",
                        p.name,
                        value.dims(),
                        p.value.dims()
                    ),
                ));
            }
            match &mut p.master {
                // Mixed precision: the saved f32 weights become the master, and the
                // compute copy is rounded from them (as `brrr_train::load_params`).
                Some(master) => {
                    p.value = value.to_dtype(p.value.dtype())?;
                    *master = value;
                }
                None => p.value = value,
            }
            if state.adamw_step > 0 {
                let (m, v) = saved.moments.as_ref().ok_or_else(|| {
                    Error::Parse(format!("checkpoint has no tensor \"adamw.m.{}\"", p.name))
                })?;
                moments.push(brrr_nn::MomentState::F32(
                    shard(&p.name, m, &saved.shape)?,
                    shard(&p.name, v, &saved.shape)?,
                ));
            }
        }
        self.opt.moments = match &self.owners {
            Some(o) if !moments.is_empty() => o.mine(moments),
            _ => moments,
        };
        self.opt.step = state.adamw_step;
        self.step = state.step;
        // A checkpoint without the scaler's state leaves the scale at its initial value.
        if let (Some(s), Some(ls)) = (&mut self.scaler, &state.loss_scaler) {
            s.restore_state(ls.scale, &[ls.growth_tracker, ls.hysteresis_tracker])?;
        }
        let data = self.source()?;
        if state.data_fingerprint != data.fingerprint() {
            return Err(Error::invalid(
                OP,
                "the data differs from the one this run was trained on",
            ));
        }
        data.set_position(&state.data_position)
    }

    /// Whether this rank writes the shared files: tensor rank 0 of data-parallel rank 0.
    fn is_writer(&self) -> bool {
        self.model.comm().rank() == 0 && self.dp.rank() == 0
    }
}

impl<B: Backend> Engine for TpTrainer<B> {
    fn config(&self) -> &TrainConfig {
        &self.config
    }

    fn steps_done(&self) -> u64 {
        self.step
    }

    async fn step(&mut self) -> Result<StepStats> {
        let k = self.config.grad_accum;
        let data = self.source()?;
        let batches = (0..k)
            .map(|_| data.next_batch())
            .collect::<Result<Vec<Batch>>>()?;
        TpTrainer::step(self, &batches)
    }

    async fn evaluate(&mut self) -> Result<f32> {
        let tracer = self.tracer.clone();
        let _span = tracer.span("evaluate");
        let val = std::mem::take(&mut self.val);
        let loss = TpTrainer::evaluate(self, &val);
        self.val = val;
        loss
    }

    /// The whole model gathered over the tensor-parallel group (collective), written by
    /// tensor rank 0 of data-parallel rank 0 as `dir/checkpoint.safetensors`.
    async fn save_to(&mut self, dir: &Path) -> Result<()> {
        let tracer = self.tracer.clone();
        let _span = tracer.span("checkpoint");
        let (position, fingerprint) = {
            let data = self.source()?;
            (data.position(), data.fingerprint())
        };
        let state = self.state(position, fingerprint)?;
        match self.is_writer() {
            true => brrr_train::save_state(&state, dir),
            false => Ok(()),
        }
    }

    async fn restore_from(&mut self, dir: &Path) -> Result<()> {
        let state = brrr_train::load_state(dir)?;
        self.restore(&state)
    }

    fn describe(&self) -> String {
        let tp = self.model.comm().world_size();
        format!(
            "tensor parallel: --dp {} --tp {tp}{} ({} transport)",
            self.dp.world_size(),
            if self.model.sp { " --sp" } else { "" },
            self.model.comm().transport()
        )
    }
}
