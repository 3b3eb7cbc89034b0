//! ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model
//! Training"): the optimizer's state and its update live on the host.
//!
//! AdamW keeps 12 bytes per parameter beyond the weights under mixed precision (an f32
//! master and two f32 moments) and 8 in f32; on a GPU those bytes are the largest share
//! of the model states. ZeRO-Offload keeps them in host memory, which is larger and
//! cheaper: the device holds the weights it computes with and their gradients; after the
//! backward each gradient goes to the host, the CPU updates the f32 master and the
//! moments, and the new weights come back (§4.1, the data-flow graph's partition).
//!
//! The three phases run as a pipeline over the parameters (§4.2 overlaps the gradient
//! copy with the backward and the weight copy with the update): while the CPU updates
//! parameter `i`, the device's gradient of parameter `i + 1` is being copied to the host
//! and parameter `i − 1`'s new weights to the device. [`OffloadTiming`] measures each
//! phase and the pipeline's wall time, so the overlap is a number, not a claim. The
//! update is brrr-cpu's AdamW kernel on the host copies, one [`AdamW`] per parameter so
//! each moves through the pipeline on its own: on the CPU backend an offloaded run
//! computes bit for bit what a run without offload computes.
//!
//! Not here yet: starting a parameter's copy while the backward still computes the
//! layers below it (that needs the backward's per-block hook), and the one-step delayed
//! update (§4.3, DPU) that hides the CPU update behind the next step's compute.

use crate::state::OptimState;
use brrr_backend::{Backend, DType, Error, HostData, Result};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, MomentState, Param};
use brrr_tensor::Tensor;

/// Seconds spent in each phase of the offloaded update, summed over the steps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OffloadTiming {
    /// Updates timed.
    pub steps: u32,
    /// Copying gradients from the device to the host.
    pub to_host: f64,
    /// The AdamW update on the host.
    pub update: f64,
    /// Copying the new weights to the device.
    pub to_device: f64,
    /// The whole pipeline, first copy to last.
    pub wall: f64,
}

impl OffloadTiming {
    /// The three phases one after another: the time without overlap.
    pub fn serial(&self) -> f64 {
        self.to_host + self.update + self.to_device
    }

    /// The longest phase: the pipeline's bound with perfect overlap.
    pub fn longest(&self) -> f64 {
        self.to_host.max(self.update).max(self.to_device)
    }

    /// The share of the time overlap could hide that it did hide:
    /// `(serial − wall) / (serial − longest)`, 0 to 1 (0 when nothing could be hidden).
    pub fn overlap(&self) -> f64 {
        let hideable = self.serial() - self.longest();
        if hideable <= 0.0 {
            return 0.0;
        }
        ((self.serial() - self.wall) / hideable).clamp(0.0, 1.0)
    }
}

/// One trained parameter's host side: its f32 master with a host gradient, and an AdamW
/// of its own.
struct HostParam {
    param: Param<CpuBackend>,
    opt: AdamW<CpuBackend>,
}

/// The offloaded optimizer of a run's trained parameters (in the model's order).
pub struct Offload {
    host: CpuBackend,
    slots: Vec<Option<HostParam>>,
    /// AdamW's update count, the same in every slot.
    step: u32,
    timing: OffloadTiming,
}

impl Offload {
    /// Takes the trained `params` to the host: each one's f32 master (or its f32 value)
    /// becomes the host master, and the device drops its master, keeping the weights it
    /// computes with. `moments` (one per parameter, as saved) and `step` continue a run;
    /// `None` and 0 start one.
    pub async fn new<B: Backend>(
        params: Vec<&mut Param<B>>,
        config: AdamWConfig,
        moments: Option<Vec<MomentState<CpuBackend>>>,
        step: u32,
    ) -> Result<Self> {
        let host = CpuBackend::new();
        let mut moments = moments.map(Vec::into_iter);
        let mut slots = Vec::with_capacity(params.len());
        for p in params {
            let master = p.master.take().unwrap_or_else(|| p.value.clone());
            if master.dtype() != DType::F32 {
                return Err(Error::invalid(
                    "offload",
                    format!(
                        "{}: the host master must be f32, got {}",
                        p.name,
                        master.dtype()
                    ),
                ));
            }
            let value = Tensor::from_host(&host, &master.to_host().await?, master.dims())?;
            let mut opt = AdamW::new(config);
            if let Some(m) = moments.as_mut().and_then(Iterator::next) {
                opt.moments = vec![m];
                opt.step = step;
            }
            slots.push(Some(HostParam {
                param: Param::new(p.name.clone(), value)?,
                opt,
            }));
        }
        Ok(Offload {
            host,
            slots,
            step,
            timing: OffloadTiming::default(),
        })
    }

    /// AdamW's update count.
    pub fn step_count(&self) -> u32 {
        self.step
    }

    /// What the updates measured so far.
    pub fn timing(&self) -> OffloadTiming {
        self.timing
    }

    /// Bytes of optimizer state on the host (the moments; the f32 masters are
    /// [`Offload::master_bytes`]).
    pub fn state_bytes(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .map(|s| s.opt.state_bytes())
            .sum()
    }

    /// GaLore's SVDs on the host so far: how many, and their seconds.
    pub fn svd_time(&self) -> (u32, f64) {
        self.slots
            .iter()
            .flatten()
            .map(|s| s.opt.svd_time())
            .fold((0, 0.0), |(n, t), (c, s)| (n + c, t + s))
    }

    /// Bytes of f32 masters on the host.
    pub fn master_bytes(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .map(|s| 4 * s.param.numel())
            .sum()
    }

    /// Parameter `i`'s host master and saved optimizer state: `(value, f32 moments,
    /// another optimizer's state)`, as a checkpoint keeps them.
    pub async fn saved(
        &self,
        i: usize,
    ) -> Result<(HostData, Option<(HostData, HostData)>, Option<OptimState>)> {
        let slot = self
            .slots
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::invalid("offload", format!("no offloaded parameter {i}")))?;
        let (m, o) = crate::trainer::saved_moments(slot.opt.moments.first()).await?;
        Ok((slot.param.value.to_host().await?, m, o))
    }

    /// One update of every parameter: `coef` multiplies each gradient (the clip factor,
    /// read from the device), `skip` (an overflow) leaves everything as it is. Gradients
    /// go to the host in reverse order, the order a backward finishes them.
    pub async fn update<B: Backend>(
        &mut self,
        params: Vec<&mut Param<B>>,
        lr: f32,
        coef: f32,
        skip: bool,
    ) -> Result<()> {
        if params.len() != self.slots.len() {
            return Err(Error::invalid(
                "offload",
                format!(
                    "{} offloaded parameters, {} trained",
                    self.slots.len(),
                    params.len()
                ),
            ));
        }
        if skip {
            return Ok(());
        }
        let t0 = Clock::now();
        let mut pipe = Pipeline::start(lr, coef);
        let mut params: Vec<Option<&mut Param<B>>> = params.into_iter().map(Some).collect();
        for i in (0..self.slots.len()).rev() {
            let device = params[i].as_deref().expect("each parameter once");
            let mut slot = self.slots[i].take().ok_or_else(|| {
                Error::invalid(
                    "offload",
                    "an earlier update failed midway: restore a checkpoint before stepping again",
                )
            })?;
            let t = Clock::now();
            let grad = Tensor::from_host(
                &self.host,
                &device.grad.to_host().await?,
                device.grad.dims(),
            )?;
            slot.param.grad = grad.to_dtype(DType::F32)?;
            self.timing.to_host += t.elapsed();
            pipe.send(i, slot)?;
            while let Some(done) = pipe.try_recv()? {
                self.put_back(&mut params, done).await?;
            }
        }
        for done in pipe.finish()? {
            self.put_back(&mut params, done).await?;
        }
        self.timing.update += pipe.update_seconds;
        self.timing.wall += t0.elapsed();
        self.timing.steps += 1;
        self.step += 1;
        Ok(())
    }

    /// Writes an updated parameter's new weights to the device and keeps its slot.
    async fn put_back<B: Backend>(
        &mut self,
        params: &mut [Option<&mut Param<B>>],
        (i, slot): (usize, HostParam),
    ) -> Result<()> {
        let t = Clock::now();
        let device = params[i].take().expect("each parameter once");
        let backend = device.value.backend().clone();
        let value = Tensor::from_host(
            &backend,
            &slot.param.value.to_host().await?,
            device.value.dims(),
        )?;
        device.value = match device.value.dtype() {
            DType::F32 => value,
            d => value.to_dtype(d)?,
        };
        self.slots[i] = Some(slot);
        self.timing.to_device += t.elapsed();
        Ok(())
    }
}

/// The host's side of the pipeline: a thread that updates each parameter it receives
/// and sends it back (natively), or the update in place (wasm32, no threads).
struct Pipeline {
    update_seconds: f64,
    #[cfg(target_arch = "wasm32")]
    lr: f32,
    #[cfg(target_arch = "wasm32")]
    coef: f32,
    #[cfg(not(target_arch = "wasm32"))]
    work: Option<std::sync::mpsc::Sender<(usize, HostParam)>>,
    #[cfg(not(target_arch = "wasm32"))]
    done: std::sync::mpsc::Receiver<Result<(usize, HostParam, f64)>>,
    #[cfg(not(target_arch = "wasm32"))]
    thread: Option<std::thread::JoinHandle<()>>,
    #[cfg(target_arch = "wasm32")]
    ready: Vec<(usize, HostParam)>,
}

/// One parameter's AdamW step on the host.
fn update_one(slot: &mut HostParam, lr: f32, coef: f32) -> Result<f64> {
    let t = Clock::now();
    slot.opt.step(vec![&mut slot.param], lr, coef)?;
    Ok(t.elapsed())
}

#[cfg(not(target_arch = "wasm32"))]
impl Pipeline {
    fn start(lr: f32, coef: f32) -> Self {
        let (work, jobs) = std::sync::mpsc::channel::<(usize, HostParam)>();
        let (finished, done) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            for (i, mut slot) in jobs {
                let r = update_one(&mut slot, lr, coef).map(|s| (i, slot, s));
                if finished.send(r).is_err() {
                    return;
                }
            }
        });
        Pipeline {
            update_seconds: 0.0,
            work: Some(work),
            done,
            thread: Some(thread),
        }
    }

    fn send(&mut self, i: usize, slot: HostParam) -> Result<()> {
        let gone = || Error::invalid("offload", "the host update thread stopped");
        self.work
            .as_ref()
            .ok_or_else(gone)?
            .send((i, slot))
            .map_err(|_| gone())
    }

    fn take(&mut self, r: Result<(usize, HostParam, f64)>) -> Result<(usize, HostParam)> {
        let (i, slot, s) = r?;
        self.update_seconds += s;
        Ok((i, slot))
    }

    fn try_recv(&mut self) -> Result<Option<(usize, HostParam)>> {
        match self.done.try_recv() {
            Ok(r) => self.take(r).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// Waits for every update still in flight.
    fn finish(&mut self) -> Result<Vec<(usize, HostParam)>> {
        self.work = None;
        let mut out = Vec::new();
        while let Ok(r) = self.done.recv() {
            out.push(self.take(r)?);
        }
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            return Err(Error::invalid("offload", "the host update thread panicked"));
        }
        Ok(out)
    }
}

#[cfg(target_arch = "wasm32")]
impl Pipeline {
    fn start(lr: f32, coef: f32) -> Self {
        Pipeline {
            update_seconds: 0.0,
            lr,
            coef,
            ready: Vec::new(),
        }
    }
    fn send(&mut self, i: usize, mut slot: HostParam) -> Result<()> {
        self.update_seconds += update_one(&mut slot, self.lr, self.coef)?;
        self.ready.push((i, slot));
        Ok(())
    }
    fn try_recv(&mut self) -> Result<Option<(usize, HostParam)>> {
        Ok(self.ready.pop())
    }
    fn finish(&mut self) -> Result<Vec<(usize, HostParam)>> {
        Ok(std::mem::take(&mut self.ready))
    }
}

/// Wall-clock time natively; nothing on wasm32, which has no `Instant` here.
struct Clock(#[cfg(not(target_arch = "wasm32"))] std::time::Instant);

impl Clock {
    fn now() -> Self {
        Clock(
            #[cfg(not(target_arch = "wasm32"))]
            std::time::Instant::now(),
        )
    }
    fn elapsed(&self) -> f64 {
        #[cfg(not(target_arch = "wasm32"))]
        return self.0.elapsed().as_secs_f64();
        #[cfg(target_arch = "wasm32")]
        return 0.0;
    }
}
