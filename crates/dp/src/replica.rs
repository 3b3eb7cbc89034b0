//! The data-parallel dimension of the other engines (brrr-tp's `TpTrainer`, brrr-pp's
//! pipeline stages, whose ranks hold a shard or a stage of the model, not a whole
//! [`brrr_nn::Gpt`]): their gradients averaged over the replicas in buckets
//! ([`average_grads`], `--bucket-mb`), and ZeRO stage 1 over any list of parameters
//! ([`ParamOwners`], `--zero 1`).

use brrr_backend::{Backend, DType, Error, Result};
use brrr_collectives::{Communicator, ReduceOp};
use brrr_nn::{AdamW, Param};
use brrr_tensor::Tensor;

/// Averages the gradients of `params` over `comm`, packed into buckets of about
/// `bucket_bytes` (f32; a parameter larger than a bucket is a bucket of its own): one
/// all-reduce per bucket, fewer and larger messages than one per parameter, less host
/// memory than one for everything. The buckets follow the parameters' order, so every
/// rank packs the same ones.
pub fn average_grads<B: Backend>(
    comm: &Communicator,
    params: &mut [&mut Param<B>],
    bucket_bytes: usize,
) -> Result<()> {
    if comm.world_size() < 2 {
        return Ok(());
    }
    let cap = (bucket_bytes / 4).max(1);
    let mut start = 0;
    while start < params.len() {
        let mut end = start;
        let mut len = 0;
        while end < params.len() && (end == start || len + params[end].grad.elem_count() <= cap) {
            len += params[end].grad.elem_count();
            end += 1;
        }
        let mut flat = Vec::with_capacity(len);
        for p in &params[start..end] {
            flat.extend(p.grad.to_vec_f32()?);
        }
        comm.all_reduce(&mut flat, ReduceOp::Avg)?;
        let mut at = 0;
        for p in &mut params[start..end] {
            let (n, g) = (p.grad.elem_count(), &p.grad);
            p.grad =
                Tensor::from_f32(g.backend(), &flat[at..at + n], g.shape().clone(), g.dtype())?;
            at += n;
        }
        start = end;
    }
    Ok(())
}

/// ZeRO stage 1 by whole parameters, as PyTorch's `ZeroRedundancyOptimizer`: each
/// parameter is owned by one data-parallel rank (the largest first, each to the rank
/// that owns the fewest elements so far), which alone keeps its AdamW moments and
/// updates it; then every rank's updated parameters are broadcast to the others. The
/// moments, two thirds of f32 training's model state beyond the weights, shrink by the
/// group's size (Rajbhandari et al. 2020, `P_os`); the f32 masters of `--amp` stay on
/// every rank.
///
/// The gradients it reads are already averaged over the group, and each owner runs the
/// same AdamW kernel on the same inputs as a replicated optimizer, so the weights are
/// bit for bit those of `--zero 0`.
#[derive(Clone, Debug)]
pub struct ParamOwners {
    owner: Vec<usize>,
    rank: usize,
    world: usize,
}

impl ParamOwners {
    /// Owners for parameters of `numels` elements over `world` ranks, seen from `rank`.
    pub fn new(numels: &[usize], rank: usize, world: usize) -> Result<Self> {
        if world == 0 || rank >= world {
            return Err(Error::invalid(
                "ParamOwners",
                format!("rank {rank} of a world of {world}"),
            ));
        }
        let mut order: Vec<usize> = (0..numels.len()).collect();
        // Largest first; equal sizes in parameter order (stable), so every rank agrees.
        order.sort_by_key(|&i| std::cmp::Reverse(numels[i]));
        let (mut load, mut owner) = (vec![0usize; world], vec![0; numels.len()]);
        for i in order {
            let r = (0..world).min_by_key(|&r| (load[r], r)).unwrap_or(0);
            owner[i] = r;
            load[r] += numels[i];
        }
        Ok(ParamOwners { owner, rank, world })
    }

    /// The rank that owns parameter `i`.
    pub fn owner(&self, i: usize) -> usize {
        self.owner[i]
    }

    /// Elements each rank owns, of parameters of `numels`.
    pub fn loads(&self, numels: &[usize]) -> Vec<usize> {
        let mut load = vec![0; self.world];
        for (i, n) in numels.iter().enumerate() {
            load[self.owner[i]] += n;
        }
        load
    }

    /// Where parameter `i`'s moments are in this rank's optimizer (`None`: another
    /// rank owns it).
    pub fn position(&self, i: usize) -> Option<usize> {
        (self.owner[i] == self.rank)
            .then(|| self.owner[..i].iter().filter(|&&o| o == self.rank).count())
    }

    /// Of a list with one entry per parameter, this rank's entries, in order (what
    /// `AdamW::moments` holds on this rank).
    pub fn mine<T>(&self, all: Vec<T>) -> Vec<T> {
        all.into_iter()
            .zip(&self.owner)
            .filter(|&(_, &o)| o == self.rank)
            .map(|(x, _)| x)
            .collect()
    }

    /// One optimizer step: `opt` (this rank's AdamW, over its parameters only) steps
    /// the owned ones as `AdamW::step_scaled` would, then each rank's new values are
    /// broadcast over `comm` (the f32 master under `--amp`, from which the others round
    /// their compute copy as the owner's kernel did).
    #[allow(clippy::too_many_arguments)]
    pub fn step<B: Backend>(
        &self,
        comm: &Communicator,
        opt: &mut AdamW<B>,
        params: Vec<&mut Param<B>>,
        lr: f32,
        coef: f32,
        inv_scale: Option<&Tensor<B>>,
        found_inf: Option<&Tensor<B>>,
    ) -> Result<()> {
        if params.len() != self.owner.len() || comm.world_size() != self.world {
            return Err(Error::invalid(
                "ParamOwners::step",
                format!(
                    "owners of {} parameters over {} ranks, given {} over {}",
                    self.owner.len(),
                    self.world,
                    params.len(),
                    comm.world_size()
                ),
            ));
        }
        let mut params = params;
        let mine: Vec<&mut Param<B>> = self.mine(params.iter_mut().map(|p| &mut **p).collect());
        opt.step_scaled(mine, lr, coef, inv_scale, found_inf)?;
        for r in 0..self.world {
            let theirs: Vec<&mut Param<B>> = params
                .iter_mut()
                .zip(&self.owner)
                .filter(|&(_, &o)| o == r)
                .map(|(p, _)| &mut **p)
                .collect();
            broadcast_values(comm, r, theirs)?;
        }
        Ok(())
    }

    /// Parameter `i`'s moments on the host, from its owner (collective over `comm`:
    /// every rank calls it for the same `i`); `None` before the first step.
    pub fn moments<B: Backend>(
        &self,
        comm: &Communicator,
        opt: &AdamW<B>,
        i: usize,
        numel: usize,
    ) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
        // The step count is the same on every rank, whatever each owns.
        if opt.step == 0 {
            return Ok(None);
        }
        let mut buf = vec![0.0f32; 2 * numel];
        if let Some(k) = self.position(i) {
            let (m, v) = opt
                .moments
                .get(k)
                .ok_or_else(|| {
                    Error::invalid("ParamOwners", format!("no moments for parameter {i}"))
                })?
                .f32_moments("ParamOwners")?;
            buf[..numel].copy_from_slice(&m.to_vec_f32()?);
            buf[numel..].copy_from_slice(&v.to_vec_f32()?);
        }
        comm.broadcast(&mut buf, self.owner[i])?;
        let v = buf.split_off(numel);
        Ok(Some((buf, v)))
    }
}

/// Broadcasts `params`' values from rank `root` (packed in one message); the other
/// ranks take them: the f32 master where there is one, the compute copy rounded from
/// it.
fn broadcast_values<B: Backend>(
    comm: &Communicator,
    root: usize,
    params: Vec<&mut Param<B>>,
) -> Result<()> {
    let mut flat = Vec::new();
    for p in &params {
        flat.extend(p.master.as_ref().unwrap_or(&p.value).to_vec_f32()?);
    }
    if flat.is_empty() {
        return Ok(());
    }
    comm.broadcast(&mut flat, root)?;
    if comm.rank() == root {
        return Ok(());
    }
    let mut at = 0;
    for p in params {
        let n = p.value.elem_count();
        let (backend, shape) = (p.value.backend().clone(), p.value.shape().clone());
        let f32s = Tensor::from_f32(&backend, &flat[at..at + n], shape, DType::F32)?;
        p.value = f32s.to_dtype(p.value.dtype())?;
        if let Some(m) = &mut p.master {
            *m = f32s;
        }
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_go_first_to_the_least_loaded_rank() {
        let numels = [10, 400, 30, 400, 5];
        let o = ParamOwners::new(&numels, 0, 2).unwrap();
        assert_eq!((o.owner(1), o.owner(3)), (0, 1));
        // 400, 400, then 30 to rank 0 (a tie goes to the lower rank), 10 and 5 to rank 1.
        assert_eq!(o.loads(&numels), vec![400 + 30, 400 + 10 + 5]);
        assert_eq!(
            (o.position(1), o.position(2), o.position(3)),
            (Some(0), Some(1), None)
        );
        assert_eq!(o.mine(vec!['a', 'b', 'c', 'd', 'e']), vec!['b', 'c']);
        assert!(ParamOwners::new(&numels, 2, 2).is_err());
    }
}
