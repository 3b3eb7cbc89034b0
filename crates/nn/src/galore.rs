//! GaLore: gradient low-rank projection (Zhao et al. 2024, "GaLore: Memory-Efficient
//! LLM Training by Gradient Low-Rank Projection").
//!
//! AdamW keeps two f32 moments the size of each weight: `8·m·n` bytes for an `m × n`
//! matrix, twice the weight itself in f32. GaLore observes that the gradient of a
//! weight matrix is close to low rank (§3.2) and runs Adam in a rank-`r` subspace of it
//! instead: a projection `P` (`m × r`, orthonormal columns) taken from an SVD of the
//! gradient maps `G` to `R = Pᵀ G` (`r × n`), the moments live in `R`'s shape, and the
//! Adam direction is mapped back with `P` before it reaches the weight (Algorithm 2,
//! "Adam with GaLore"). The projection is refreshed every `T` steps, so that over a
//! run the weight still moves in many directions (§4.1: a sequence of low-rank
//! updates composes to a full-rank one). State drops from `2mn` to `mr + 2nr` floats
//! (Table 1).
//!
//! [`Projector`] is that state for one 2-D parameter; an optimizer holds one per matrix
//! it trains this way and plain AdamW moments for the rest (biases, LayerNorm gains).

use brrr_backend::{AdamWParams, Backend, DType, Error, Result};
use brrr_tensor::Tensor;
use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

/// GaLore's options.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaLoreConfig {
    /// `r`: the dimension of the subspace the moments live in. At most the smaller side
    /// of the weight; the state is `r·(min + 2·max)` floats instead of AdamW's `2·m·n`.
    pub rank: usize,
    /// `T`: the projection is recomputed from the gradient on the first step and every
    /// `T` steps after (Algorithm 2's "subspace change frequency"). An SVD is costly
    /// and the gradient's dominant subspace drifts slowly, so it is not redone each step.
    pub update_every: u32,
    /// `α`: multiplies the projected-back update. The low-rank direction has a
    /// different magnitude from a full-rank Adam step's, and `α` plays the role the
    /// learning rate would otherwise have to be re-tuned for (Algorithm 2).
    pub scale: f32,
}

impl GaLoreConfig {
    /// The state bytes of a `[rows, cols]` weight under this config:
    /// `4·r·(min + 2·max)`, the projection and two moments (Table 1's `mr + 2nr` floats
    /// with `m <= n`), against AdamW's `8·rows·cols`.
    pub fn state_bytes(&self, rows: usize, cols: usize) -> usize {
        let (small, large) = (rows.min(cols), rows.max(cols));
        4 * self.rank * (small + 2 * large)
    }
}

impl Default for GaLoreConfig {
    /// The paper's pre-training settings: `α = 0.25`, `T = 200`, rank 128.
    fn default() -> Self {
        GaLoreConfig {
            rank: 128,
            update_every: 200,
            scale: 0.25,
        }
    }
}

/// Which side of the gradient the projection multiplies: always the smaller one, so
/// the projection (`min × r`) and the moments (`r × max`) are as small as they can be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Side {
    /// `rows <= cols`: `P` holds the first `r` left singular vectors (`[rows, r]`) and
    /// `R = Pᵀ G` is `[r, cols]`.
    Left,
    /// `rows > cols`: `Q` holds the first `r` right singular vectors (`[cols, r]`) and
    /// `R = G Q` is `[rows, r]`.
    Right,
}

impl Side {
    /// The side GaLore projects a `[rows, cols]` gradient on.
    pub fn of(rows: usize, cols: usize) -> Side {
        if rows <= cols {
            Side::Left
        } else {
            Side::Right
        }
    }
}

/// A [`Projector`]'s state on the host, for checkpoints: row-major f32 vectors.
/// All three empty means no step was taken yet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProjectorState {
    /// Which side the projection is on (fixed by the weight's shape; stored to check it).
    pub side: Side,
    /// `P` (`[rows, rank]`) or `Q` (`[cols, rank]`), row-major.
    pub projection: Vec<f32>,
    /// The first moment, in the projected gradient's shape (`[rank, cols]` or `[rows, rank]`).
    pub m: Vec<f32>,
    /// The second moment, shaped as `m`.
    pub v: Vec<f32>,
}

/// The device tensors, allocated by the first refresh.
struct DeviceState<B: Backend> {
    projection: Tensor<B>,
    m: Tensor<B>,
    v: Tensor<B>,
}

/// One 2-D parameter's GaLore state: its projection matrix and AdamW moments in the
/// projected space.
///
/// A step reads the gradient back to the host only when the projection is refreshed
/// (for the SVD, on nalgebra); every other part of it runs on the device: two GEMMs and
/// one [`Backend::adamw`] on the small projected gradient.
///
/// ```
/// use brrr_backend::AdamWParams;
/// use brrr_cpu::CpuBackend;
/// use brrr_nn::{DType, GaLoreConfig, Projector, Tensor};
///
/// let cpu = CpuBackend::new();
/// let (rows, cols) = (4, 6);
/// let config = GaLoreConfig { rank: 1, update_every: 10, scale: 0.25 };
/// let mut proj = Projector::new(config, rows, cols)?;
/// let mut w = Tensor::zeros(&cpu, [rows, cols], DType::F32)?;
/// let g = Tensor::from_f32(&cpu, &[1.0; 24], [rows, cols], DType::F32)?; // rank 1
/// let hp = AdamWParams { lr: 0.1, weight_decay: 0.0, step: 1, ..AdamWParams::default() };
/// proj.step(&hp, &mut w, &g, None)?;
/// assert_eq!(proj.svd_count(), 1); // the first step takes the SVD
/// // P is the all-ones direction (entries ±1/2); Adam's first direction is ±1 per element
/// // of R = PᵀG. Mapped back and scaled, every weight moves by lr · α · 1/2 against G.
/// let w = w.to_vec_f32()?;
/// assert!(w.iter().all(|&x| (x + 0.1 * 0.25 * 0.5).abs() < 1e-6), "{w:?}");
/// // 4 · rank · (min + 2·max) bytes, instead of AdamW's 8 · rows · cols.
/// assert_eq!(proj.state_bytes(), 4 * (4 + 2 * 6));
/// assert_eq!(proj.state_bytes(), Projector::<CpuBackend>::predicted_bytes(&config, rows, cols));
/// # Ok::<(), brrr_nn::Error>(())
/// ```
pub struct Projector<B: Backend> {
    config: GaLoreConfig,
    rows: usize,
    cols: usize,
    side: Side,
    state: Option<DeviceState<B>>,
    svd_seconds: f64,
    svd_count: u32,
}

impl<B: Backend> Projector<B> {
    /// For a `[rows, cols]` weight; an error (naming GaLore) unless
    /// `1 <= rank <= min(rows, cols)` and `update_every >= 1`. Nothing is allocated
    /// until the first step (or [`Projector::refresh`]), which learns the device.
    pub fn new(config: GaLoreConfig, rows: usize, cols: usize) -> Result<Self> {
        const OP: &str = "GaLore::new";
        let max_rank = rows.min(cols);
        if config.rank == 0 || config.rank > max_rank {
            return Err(Error::invalid(
                OP,
                format!(
                    "GaLore rank {} for a [{rows}, {cols}] weight: it must be at least 1 and at \
                     most min(rows, cols) = {max_rank}",
                    config.rank
                ),
            ));
        }
        if config.update_every == 0 {
            return Err(Error::invalid(
                OP,
                "GaLore update_every must be at least 1 (the projection is refreshed every \
                 update_every steps)",
            ));
        }
        Ok(Projector {
            config,
            rows,
            cols,
            side: Side::of(rows, cols),
            state: None,
            svd_seconds: 0.0,
            svd_count: 0,
        })
    }

    /// The options this projector was built with.
    pub fn config(&self) -> &GaLoreConfig {
        &self.config
    }

    /// Which side of the gradient the projection multiplies.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The projection on the device: `P` (`[rows, rank]`) or `Q` (`[cols, rank]`), with
    /// orthonormal columns; `None` before the first step.
    pub fn projection(&self) -> Option<&Tensor<B>> {
        self.state.as_ref().map(|s| &s.projection)
    }

    /// The shape of the projection matrix.
    fn projection_dims(&self) -> [usize; 2] {
        match self.side {
            Side::Left => [self.rows, self.config.rank],
            Side::Right => [self.cols, self.config.rank],
        }
    }

    /// The shape of the projected gradient `R`, and so of the moments.
    fn low_rank_dims(&self) -> [usize; 2] {
        match self.side {
            Side::Left => [self.config.rank, self.cols],
            Side::Right => [self.rows, self.config.rank],
        }
    }

    /// One GaLore-AdamW update of `value` (the parameter, f32, or its f32 master when it
    /// has one: the compute copy is then the caller's to rewrite) from `grad` (same
    /// shape; f32, or a 16-bit float widened first). Algorithm 2, per step:
    ///
    /// 1. on the first step and whenever `(hp.step - 1) % update_every == 0`, the
    ///    projection is recomputed from a thin SVD of `grad` ([`Projector::refresh`]);
    /// 2. `R = Pᵀ G` or `R = G Q` on the device;
    /// 3. AdamW's moments are updated in `R`'s shape and `N = m̂ / (√v̂ + ε)` computed;
    /// 4. `value ← (1 − lr·weight_decay)·value − lr·scale·(P N or N Qᵀ)`.
    ///
    /// `hp` is the step's AdamW settings (`step` counts from 1 and drives both the bias
    /// correction and the refresh schedule; `grad_scale` multiplies the gradient;
    /// `range` must be `None`). `inv_scale` (one-element f32 on the device) multiplies
    /// the gradient as in [`Backend::adamw`]. There is no `found_inf`: a step whose
    /// gradient overflowed must not be passed here (a refreshing step refuses a
    /// non-finite gradient; any other would fold it into the moments).
    pub fn step(
        &mut self,
        hp: &AdamWParams,
        value: &mut Tensor<B>,
        grad: &Tensor<B>,
        inv_scale: Option<&Tensor<B>>,
    ) -> Result<()> {
        self.check_step(hp, value, grad)?;
        let grad = grad.to_dtype(DType::F32)?;
        // Algorithm 2: "if t mod T = 0 then SVD", with t counted from 0; a projector
        // with no projection yet (new mid-run) takes one whatever the step.
        if self.state.is_none() || (hp.step - 1).is_multiple_of(self.config.update_every) {
            self.refresh(&grad)?;
        }
        let low = self.project(&grad)?;
        let direction = self.adam_direction(hp, &low, inv_scale)?;
        let state = self.state.as_ref().expect("refreshed above");
        // Decay first, then the update, as PyTorch's AdamW orders them; both folded into
        // one GEMM, `value = decay·value + alpha·(P N)`, so no full-size temporary is made.
        let decay = 1.0 - hp.lr * hp.weight_decay;
        let alpha = -hp.lr * self.config.scale;
        match self.side {
            Side::Left => Tensor::matmul_into(value, &state.projection, &direction, alpha, decay),
            Side::Right => {
                let qt = state.projection.transpose(0, 1)?;
                Tensor::matmul_into(value, &direction, &qt, alpha, decay)
            }
        }
    }

    /// The checks [`Projector::step`] makes before touching anything.
    fn check_step(&self, hp: &AdamWParams, value: &Tensor<B>, grad: &Tensor<B>) -> Result<()> {
        const OP: &str = "GaLore::step";
        let want = [self.rows, self.cols];
        if value.dims() != want || grad.dims() != want {
            return Err(Error::shape(
                OP,
                format!(
                    "GaLore projector for a {want:?} weight got value {} and gradient {}",
                    value.shape(),
                    grad.shape()
                ),
            ));
        }
        if value.dtype() != DType::F32 {
            return Err(Error::invalid(
                OP,
                format!(
                    "GaLore updates an f32 value (a 16-bit parameter's f32 master), got {}",
                    value.dtype()
                ),
            ));
        }
        if !matches!(grad.dtype(), DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::invalid(
                OP,
                format!("GaLore needs a float gradient, got {}", grad.dtype()),
            ));
        }
        if hp.step == 0 || hp.range.is_some() {
            return Err(Error::invalid(
                OP,
                "GaLore takes whole buffers (range None) and steps counted from 1",
            ));
        }
        Ok(())
    }

    /// Step 3 of Algorithm 2 on the device: updates the moments from `low` (`R`) and
    /// returns `N = m̂ / (√v̂ + ε)`. [`Backend::adamw`] computes exactly that as the
    /// change of its parameter; run on a zeroed scratch buffer with `lr = −1` and no
    /// weight decay, it leaves `0 − (−1)·N = N` there, so every backend's fused AdamW
    /// serves and no new kernel is needed.
    fn adam_direction(
        &mut self,
        hp: &AdamWParams,
        low: &Tensor<B>,
        inv_scale: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        let backend = low.backend().clone();
        let state = self.state.as_mut().expect("refreshed before the direction");
        let mut direction = Tensor::zeros(&backend, low.shape().clone(), DType::F32)?;
        let hp = AdamWParams {
            lr: -1.0,
            weight_decay: 0.0,
            range: None,
            ..*hp
        };
        let inv_scale = inv_scale.map(Tensor::buffer).transpose()?;
        backend.adamw(
            &hp,
            direction.buffer_mut()?,
            low.buffer()?,
            state.m.buffer_mut()?,
            state.v.buffer_mut()?,
            inv_scale,
            None,
        )?;
        Ok(direction)
    }

    /// `R`: the gradient in the projected space, `Pᵀ G` (`[rank, cols]`) or `G Q`
    /// (`[rows, rank]`), on the device. An error before the first refresh.
    pub fn project(&self, grad: &Tensor<B>) -> Result<Tensor<B>> {
        let p = self.device_projection("GaLore::project")?;
        match self.side {
            Side::Left => p.transpose(0, 1)?.matmul(grad),
            Side::Right => grad.matmul(p),
        }
    }

    /// A projected-space matrix mapped back to the weight's shape: `P X` or `X Qᵀ`, on
    /// the device. An error before the first refresh.
    pub fn project_back(&self, low: &Tensor<B>) -> Result<Tensor<B>> {
        let p = self.device_projection("GaLore::project_back")?;
        match self.side {
            Side::Left => p.matmul(low),
            Side::Right => low.matmul(&p.transpose(0, 1)?),
        }
    }

    /// The projection, or an error naming `op` before the first refresh.
    fn device_projection(&self, op: &'static str) -> Result<&Tensor<B>> {
        self.projection().ok_or_else(|| {
            Error::invalid(
                op,
                "GaLore has no projection yet: it is computed by the first step (or refresh)",
            )
        })
    }

    /// Recomputes the projection from `grad` (`[rows, cols]`): the gradient is read
    /// back, nalgebra takes its thin SVD on the host, and the first `rank` left
    /// (`rows <= cols`) or right singular vectors are uploaded. The first call also
    /// allocates the moments (zeros). The moments are kept across a refresh, as
    /// Algorithm 2 keeps `M` and `V` when `P` changes. [`Projector::step`] calls this on
    /// its schedule; calling it directly forces a refresh.
    ///
    /// The read-back waits natively. On wasm32 nothing may block, so the read is polled
    /// once: brrr-cpu's is ready at once, a GPU's is not and is refused with an error.
    pub fn refresh(&mut self, grad: &Tensor<B>) -> Result<()> {
        const OP: &str = "GaLore::refresh";
        if grad.dims() != [self.rows, self.cols] {
            return Err(Error::shape(
                OP,
                format!(
                    "GaLore projector for a [{}, {}] weight got a gradient {}",
                    self.rows,
                    self.cols,
                    grad.shape()
                ),
            ));
        }
        let host = read_f32(&grad.to_dtype(DType::F32)?)?;
        let (vectors, seconds) = timed(|| {
            top_singular_vectors(&host, self.rows, self.cols, self.config.rank, self.side)
        });
        let vectors = vectors?;
        self.svd_seconds += seconds;
        self.svd_count += 1;
        let backend = grad.backend();
        let projection = Tensor::from_f32(backend, &vectors, self.projection_dims(), DType::F32)?;
        match &mut self.state {
            Some(state) => state.projection = projection,
            None => {
                let zeros = || Tensor::zeros(backend, self.low_rank_dims(), DType::F32);
                self.state = Some(DeviceState {
                    projection,
                    m: zeros()?,
                    v: zeros()?,
                });
            }
        }
        Ok(())
    }

    /// Bytes of optimizer state held on the device: the projection plus the two moments
    /// (f32). 0 before the first step; [`Projector::predicted_bytes`] after it.
    pub fn state_bytes(&self) -> usize {
        self.state.as_ref().map_or(0, |s| {
            s.projection.size_in_bytes() + s.m.size_in_bytes() + s.v.size_in_bytes()
        })
    }

    /// The state bytes a `[rows, cols]` weight will hold at `config`, without
    /// allocating (for a memory estimate): `4·r·(min + 2·max)`, Table 1's `mr + 2nr`
    /// floats (with `m <= n`), against AdamW's `8·rows·cols`.
    pub fn predicted_bytes(config: &GaLoreConfig, rows: usize, cols: usize) -> usize {
        config.state_bytes(rows, cols)
    }

    /// Seconds spent in SVDs so far (the decomposition itself, not the gradient's
    /// read-back); always 0 on wasm32, which has no clock to read here.
    pub fn svd_seconds(&self) -> f64 {
        self.svd_seconds
    }

    /// How many SVDs were taken (refreshes of the projection) since this projector was
    /// built or restored.
    pub fn svd_count(&self) -> u32 {
        self.svd_count
    }

    /// The state as host f32 vectors, for a checkpoint (all empty before the first
    /// step). Reads the device back, as [`Projector::refresh`] does.
    pub fn to_host(&self) -> Result<ProjectorState> {
        let Some(s) = &self.state else {
            return Ok(ProjectorState {
                side: self.side,
                projection: Vec::new(),
                m: Vec::new(),
                v: Vec::new(),
            });
        };
        Ok(ProjectorState {
            side: self.side,
            projection: read_f32(&s.projection)?,
            m: read_f32(&s.m)?,
            v: read_f32(&s.v)?,
        })
    }

    /// A projector rebuilt from [`Projector::to_host`]'s state on `backend`: the same
    /// checks as [`Projector::new`], then the side and every length against the shapes
    /// `config` and `[rows, cols]` imply. Continues bitwise as the saved one would (the
    /// SVD counters start again from 0).
    pub fn from_host(
        config: GaLoreConfig,
        rows: usize,
        cols: usize,
        state: ProjectorState,
        backend: &B,
    ) -> Result<Self> {
        const OP: &str = "GaLore::from_host";
        let mut proj = Projector::new(config, rows, cols)?;
        if state.side != proj.side {
            return Err(Error::invalid(
                OP,
                format!(
                    "GaLore state projects on the {:?} side; a [{rows}, {cols}] weight projects on \
                     the {:?} side",
                    state.side, proj.side
                ),
            ));
        }
        let lens = [state.projection.len(), state.m.len(), state.v.len()];
        if lens == [0, 0, 0] {
            return Ok(proj);
        }
        let [pr, pc] = proj.projection_dims();
        let [lr, lc] = proj.low_rank_dims();
        if lens != [pr * pc, lr * lc, lr * lc] {
            return Err(Error::shape(
                OP,
                format!(
                    "GaLore state has (projection, m, v) of {lens:?} elements; rank {} on a \
                     [{rows}, {cols}] weight needs [{pr}, {pc}] and twice [{lr}, {lc}] = {:?}",
                    config.rank,
                    [pr * pc, lr * lc, lr * lc]
                ),
            ));
        }
        let up = |v: &[f32], dims: [usize; 2]| Tensor::from_f32(backend, v, dims, DType::F32);
        proj.state = Some(DeviceState {
            projection: up(&state.projection, [pr, pc])?,
            m: up(&state.m, [lr, lc])?,
            v: up(&state.v, [lr, lc])?,
        });
        Ok(proj)
    }
}

/// The first `rank` singular vectors of the row-major `[rows, cols]` matrix `g`, by
/// descending singular value, as a row-major `[dim, rank]` matrix with orthonormal
/// columns: left ones (`dim = rows`) for [`Side::Left`], right ones (`dim = cols`) for
/// [`Side::Right`]. Only the side needed is computed. Non-finite input is refused: it
/// would give no meaningful subspace, and nalgebra's sort would panic on NaN.
fn top_singular_vectors(
    g: &[f32],
    rows: usize,
    cols: usize,
    rank: usize,
    side: Side,
) -> Result<Vec<f32>> {
    const OP: &str = "GaLore::refresh";
    if let Some(i) = g.iter().position(|x| !x.is_finite()) {
        return Err(Error::invalid(
            OP,
            format!(
                "GaLore cannot take the SVD of a gradient with a non-finite element ({} at {i})",
                g[i]
            ),
        ));
    }
    let matrix = DMatrix::from_row_slice(rows, cols, g);
    let left = side == Side::Left;
    // nalgebra's `new` iterates without bound; a cap turns a failure to converge into an
    // error instead of a hang.
    let max_iter = 100 * rows.min(cols).max(10);
    let svd = nalgebra::SVD::try_new(matrix, left, !left, 5.0 * f32::EPSILON, max_iter)
        .ok_or_else(|| {
            Error::invalid(
                OP,
                format!("GaLore's SVD did not converge in {max_iter} iterations"),
            )
        })?;
    let mut out = Vec::with_capacity(rank * if left { rows } else { cols });
    if left {
        let u = svd.u.expect("computed: compute_u was set");
        for i in 0..rows {
            out.extend((0..rank).map(|k| u[(i, k)]));
        }
    } else {
        // Vᵀ's first `rank` rows, transposed: Q[c, k] = Vᵀ[k, c].
        let v_t = svd.v_t.expect("computed: compute_v was set");
        for c in 0..cols {
            out.extend((0..rank).map(|k| v_t[(k, c)]));
        }
    }
    Ok(out)
}

/// `f()` and the seconds it took. wasm32 has no `std::time::Instant` (it panics there),
/// so the time is 0.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let t0 = std::time::Instant::now();
        let out = f();
        (out, t0.elapsed().as_secs_f64())
    }
    #[cfg(target_arch = "wasm32")]
    {
        (f(), 0.0)
    }
}

/// Reads a tensor back as f32 values. Natively this waits for the device. On wasm32
/// nothing may block, so the read is polled once: brrr-cpu's read is ready at once and
/// is used; a GPU's is not, and is refused with an error.
pub(crate) fn read_f32<B: Backend>(t: &Tensor<B>) -> Result<Vec<f32>> {
    #[cfg(not(target_arch = "wasm32"))]
    let host = brrr_backend::block_on(t.to_host())?;
    #[cfg(target_arch = "wasm32")]
    let host = {
        use std::future::Future;
        let mut read = std::pin::pin!(t.to_host());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match read.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(host) => host?,
            std::task::Poll::Pending => {
                return Err(Error::invalid(
                    "GaLore",
                    "GaLore reads the gradient back for its SVD; on wasm32 this backend's read \
                     is not ready at once, and nothing may block",
                ));
            }
        }
    };
    Ok(host.to_f32())
}
