//! `--dp × --tp` with ZeRO: brrr-dp's engine ([`DataParallel`]) over this rank's
//! tensor-parallel shard. [`TpGpt`] is a [`ReplicaModel`]: the data-parallel group of a
//! shard holds copies of the same shard, so everything ZeRO does to a whole model
//! (bucketed reduce-scatters overlapping the backward, moments, gradients and
//! parameters sharded, gathered per block at stage 3) it does to the shard, written
//! once in brrr-dp. What the shard adds: its gradient norm and overflow flag are agreed
//! over the tensor-parallel group, replicated parameters' gradients are completed over
//! it before the replicas average them (sequence parallelism), and its checkpoint is
//! the whole model put together from the shards.

use crate::config::TpConfig;
use crate::model::{TpGpt, all_reduce_grads_scaled};
use crate::shard::{shard_by_name, shard_dims_by_name, unshard_by_name};
use brrr_amp::Policy;
use brrr_backend::{Backend, DType, Error, HostData, Result};
use brrr_collectives::{Communicator, ParallelGroups};
use brrr_dp::{DataParallel, DeviceMask, DpConfig, Pieces, ReplicaModel};
use brrr_nn::{Gpt, MicroBatch, Module, Param};
use brrr_tensor::Tensor;
use brrr_train::{Batch, BatchSource, ParamState, TrainConfig, TrainState, upload_mask};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::ops::Range;
use std::sync::Arc;

/// Rank `groups`' engine of a `--dp × --tp` run through brrr-dp's [`DataParallel`]
/// (any `--zero`): the single-device model of `config.seed` sliced for this rank's
/// tensor-parallel group, trained as one replica of its data-parallel group. `data`
/// yields global batches, as [`DataParallel::new`]'s.
pub fn data_parallel<B: Backend>(
    backend: &B,
    config: TrainConfig,
    tp: TpConfig,
    groups: ParallelGroups,
    data: Box<dyn BatchSource>,
) -> Result<DataParallel<B, TpGpt<B>>> {
    config.validate()?;
    let layout = groups.layout;
    tp.validate(layout, layout.dp * layout.tp * layout.pp, &config)?;
    if layout.pp != 1 {
        return Err(Error::invalid(
            "brrr_tp::data_parallel",
            "pipeline parallelism is brrr-pp's engine, not this one",
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut gpt = Gpt::new(backend, config.model.clone(), DType::F32, &mut rng)?;
    // The shard's blocks take the switch from these (`TpBlock::from_block`).
    gpt.set_fused_attention(config.fused_attention);
    let model = TpGpt::from_gpt(&gpt, Arc::new(groups.tp), tp.sp)?;
    drop(gpt);
    let dp = DpConfig::of(&config);
    DataParallel::with_model(backend, config, dp, &groups.dp, model, data)
}

impl<B: Backend> ReplicaModel<B> for TpGpt<B> {
    fn pieces(&self) -> Pieces {
        Pieces::from_counts(
            self.wte.params().len() + self.wpe.params().len(),
            self.h.iter().map(|b| b.params().len()),
            self.ln_f.params().len(),
        )
    }

    /// The vocabulary-parallel loss reads the targets on the host.
    fn targets(&self, _backend: &B, batch: &Batch) -> Result<Arc<[u32]>> {
        Ok(batch.targets.as_slice().into())
    }

    fn embed(
        &mut self,
        _backend: &B,
        mb: MicroBatch,
        batch: &Batch,
        mask: Option<&DeviceMask<B>>,
    ) -> Result<Tensor<B>> {
        let positions = batch.mask.as_ref().map(|m| m.positions.as_slice());
        if let Some((_, segments)) = mask {
            self.set_segments(Some(segments));
        }
        self.embed_mb(mb, &batch.inputs, (batch.batch, batch.seq), positions)
    }

    fn end_mask(&mut self) {
        self.set_segments(None);
    }

    fn embed_backward(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()> {
        self.embed_backward_mb(mb, dx)
    }

    fn eval_loss(&mut self, backend: &B, batch: &Batch) -> Result<Tensor<B>> {
        let mask = upload_mask(backend, batch)?;
        let packed = batch
            .mask
            .as_ref()
            .zip(mask.as_ref())
            .map(|(m, (_, segments))| (m.positions.as_slice(), segments));
        let bt = (batch.batch, batch.seq);
        self.forward_loss_packed_mb(
            MicroBatch::default(),
            &batch.inputs,
            &batch.targets,
            bt,
            packed,
        )
    }

    fn apply_policy(&mut self, policy: &Policy) -> Result<()> {
        TpGpt::apply_policy(self, policy)
    }

    fn shard_group(&self) -> Option<&Communicator> {
        Some(self.comm())
    }

    fn replicated_params(&self) -> Vec<bool> {
        let params = self.params();
        params.iter().map(|p| self.is_replicated(&p.name)).collect()
    }

    /// Under sequence parallelism, sums the replicated parameters' gradients among
    /// `params` over the group (each rank's covers its sequence shard only).
    fn complete_grads(&mut self, params: Range<usize>) -> Result<()> {
        if !self.sp || self.comm().world_size() == 1 {
            return Ok(());
        }
        let comm = self.comm().clone();
        let replicated = self.replicated_params();
        let mut mine: Vec<&mut Param<B>> = self
            .params_mut()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| params.contains(i) && replicated[*i])
            .map(|(_, p)| p)
            .collect();
        all_reduce_grads_scaled(&comm, &mut mine, false)
    }

    /// Each parameter (and its moments) all-gathered over the group and put back
    /// together as the single-device model holds it.
    fn whole_state(&self, local: TrainState) -> Result<TrainState> {
        let comm = self.comm();
        let n = comm.world_size();
        let whole =
            |name: &str, host: &HostData, dims: &[usize]| -> Result<(HostData, Vec<usize>)> {
                let gathered = comm.all_gather(&host.to_f32())?;
                let (values, dims) = unshard_by_name(name, &gathered, dims, n)?;
                Ok((HostData::F32(values), dims))
            };
        let mut params = Vec::with_capacity(local.params.len());
        for p in &local.params {
            let (value, shape) = whole(&p.name, &p.value, &p.shape)?;
            let moments = match &p.moments {
                Some((m, v)) => Some((
                    whole(&p.name, m, &p.shape)?.0,
                    whole(&p.name, v, &p.shape)?.0,
                )),
                None => None,
            };
            params.push(ParamState {
                name: p.name.clone(),
                shape,
                value,
                moments,
                optim: None,
            });
        }
        Ok(TrainState { params, ..local })
    }

    /// Each parameter (and its moments) sliced as this rank holds it.
    fn local_state(&self, whole: &TrainState) -> Result<TrainState> {
        let backend = self.wpe.weight.value.backend().clone();
        let comm = self.comm();
        let (r, n, heads) = (comm.rank(), comm.world_size(), self.config.n_head);
        let cut = |name: &str, host: &HostData, shape: &[usize]| -> Result<HostData> {
            let full = Tensor::from_host(&backend, host, shape.to_vec())?;
            Ok(HostData::F32(
                shard_by_name(name, &full, heads, r, n)?.to_vec_f32()?,
            ))
        };
        let mut params = Vec::with_capacity(whole.params.len());
        for p in &whole.params {
            let moments = match &p.moments {
                Some((m, v)) => Some((cut(&p.name, m, &p.shape)?, cut(&p.name, v, &p.shape)?)),
                None => None,
            };
            params.push(ParamState {
                name: p.name.clone(),
                shape: shard_dims_by_name(&p.name, &p.shape, n),
                value: cut(&p.name, &p.value, &p.shape)?,
                moments,
                optim: None,
            });
        }
        Ok(TrainState {
            config: whole.config.clone(),
            step: whole.step,
            adamw_step: whole.adamw_step,
            data_position: whole.data_position.clone(),
            data_fingerprint: whole.data_fingerprint.clone(),
            params,
            loss_scaler: whole.loss_scaler,
        })
    }

    fn describe(&self) -> String {
        let sp = if self.sp { " --sp" } else { "" };
        format!(" × --tp {}{sp}", self.comm().world_size())
    }
}
