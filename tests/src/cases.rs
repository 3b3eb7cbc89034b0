//! The cases: every op of the trait on several shapes, with inputs drawn per case.

use crate::compare::{Tol, compare, compare_codes, tolerance};
use crate::{Outcome, SuiteOptions};
use brrr_backend::{
    AdamWParams, AdamWTensors, Backend, BinaryOp, DType, ElemRange, EmbeddingSpec, GemmSpec,
    HostData, LayerNormSpec, Layout, QuantizedMoments, ReduceOp, Result, ScaleUpdateParams,
    SegmentMask, Shape, SoftmaxSpec, UnaryOp,
};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// Every op name the suite knows.
pub const OPS: &[&str] = &[
    "fill",
    "copy_strided",
    "cast",
    "gemm",
    "unary",
    "binary",
    "axpy",
    "reduce",
    "softmax",
    "softmax_backward",
    "softmax_segmented",
    "layernorm",
    "layernorm_backward",
    "gelu",
    "gelu_backward",
    "embedding",
    "embedding_backward",
    "scatter_rows",
    "cross_entropy",
    "cross_entropy_backward",
    "adamw",
    "adamw_master",
    "adamw_8bit",
    "multi_tensor_fill",
    "multi_tensor_sum_squares",
    "multi_tensor_adamw",
    "clip_coefficient",
    "unscale_check_finite",
    "update_loss_scale",
    "attention",
    "attention_backward",
    "hostile",
];

/// The core the browser run covers.
pub const CORE_OPS: &[&str] = &[
    "gemm",
    "softmax",
    "layernorm",
    "attention",
    "attention_backward",
    "adamw",
];

/// An embedding-shaped case's spec, buffer length and label: a `[rows, dim]` table with
/// `n` ids of `idt`, the whole buffer or (`flat = Some((at, after))`) a part of a flat one.
fn table_case(
    rows: usize,
    dim: usize,
    n: usize,
    idt: DType,
    flat: Option<(usize, usize)>,
) -> (EmbeddingSpec, usize, String) {
    let (at, after) = flat.unwrap_or((0, 0));
    let total = at + rows * dim + after;
    match flat {
        None => (
            EmbeddingSpec::new(dim),
            total,
            format!("rows={rows} dim={dim} ids={n} {idt}"),
        ),
        Some(_) => (
            EmbeddingSpec::new(dim).table_at(at, rows),
            total,
            format!("rows={rows} dim={dim} ids={n} {idt} table at {at} of {total}"),
        ),
    }
}

/// A launch description; `run` executes it on any backend.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Fill(f64),
    Copy {
        src: Layout,
        dst: Layout,
    },
    Cast,
    Gemm(GemmSpec),
    Unary(UnaryOp),
    Binary {
        op: BinaryOp,
        a: Layout,
        b: Layout,
    },
    /// alpha and where in y (None: all of it).
    Axpy(f32, Option<usize>),
    Reduce {
        op: ReduceOp,
        outer: usize,
        n: usize,
        inner: usize,
    },
    Softmax(SoftmaxSpec),
    SoftmaxBackward(SoftmaxSpec),
    /// Inputs: segment ids (u32), x.
    SoftmaxSegmented(SoftmaxSpec, SegmentMask),
    LayerNorm(LayerNormSpec),
    LayerNormBackward(LayerNormSpec),
    Gelu,
    GeluBackward,
    Embedding(EmbeddingSpec),
    EmbeddingBackward(EmbeddingSpec),
    ScatterRows(EmbeddingSpec),
    CrossEntropy(usize),
    CrossEntropyBackward(usize),
    AdamW {
        p: AdamWParams,
        inv: bool,
        found: bool,
    },
    /// Inputs: grad (+ inv_scale) (+ found_inf); outputs: master, copy, m, v.
    AdamWMaster {
        p: AdamWParams,
        inv: bool,
        found: bool,
    },
    /// Inputs: grad, maps (+ inv_scale) (+ found_inf); outputs: param, codes, absmax.
    AdamW8bit {
        p: AdamWParams,
        inv: bool,
        found: bool,
    },
    /// Outputs: the buffers.
    MultiFill(f64),
    /// Inputs: the buffers; output: the sum.
    MultiSumSquares,
    /// Inputs: each slot's gradient (+ inv_scale) (+ found_inf); outputs: per slot
    /// param (the copy beside a master), (master), m, v.
    MultiAdamW {
        p: AdamWParams,
        slots: Vec<crate::multi::AdamWSlot>,
        inv: bool,
        found: bool,
    },
    /// Input: sumsq; outputs: norm, coef.
    ClipCoefficient(f64),
    Unscale,
    UpdateScale(ScaleUpdateParams),
    Attention(Attn),
    AttentionBackward(Attn),
}

/// Causal self-attention composed of the trait's ops: S = Q Kᵀ, P = softmax(scale·S)
/// (causal), O = P V; the backward through the same three ops.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attn {
    bh: usize,
    t: usize,
    d: usize,
    scale: f32,
}

impl Attn {
    fn scores(&self) -> GemmSpec {
        let (t, d) = (self.t, self.d);
        GemmSpec {
            batch: self.bh,
            m: t,
            n: t,
            k: d,
            trans_a: false,
            trans_b: true,
            alpha: 1.0,
            beta: 0.0,
            stride_a: t * d,
            stride_b: t * d,
            stride_c: t * t,
            offset_a: 0,
            offset_b: 0,
            offset_c: 0,
        }
    }
    fn softmax(&self) -> SoftmaxSpec {
        SoftmaxSpec {
            rows: self.bh * self.t,
            cols: self.t,
            scale: self.scale,
            causal: true,
        }
    }
    /// [t, t] · [t, d] (optionally the first transposed).
    fn tt_td(&self, trans_a: bool) -> GemmSpec {
        let (t, d) = (self.t, self.d);
        GemmSpec {
            batch: self.bh,
            m: t,
            n: d,
            k: t,
            trans_a,
            trans_b: false,
            alpha: 1.0,
            beta: 0.0,
            stride_a: t * t,
            stride_b: t * d,
            stride_c: t * d,
            offset_a: 0,
            offset_b: 0,
            offset_c: 0,
        }
    }

    fn probs<X: Backend>(&self, x: &X, q: &X::Buffer, k: &X::Buffer) -> Result<X::Buffer> {
        let dt = x.dtype(q);
        let n = self.bh * self.t * self.t;
        let mut s = x.zeros(dt, n)?;
        let mut p = x.zeros(dt, n)?;
        x.gemm(&self.scores(), q, k, &mut s)?;
        x.softmax(&self.softmax(), &s, &mut p)?;
        Ok(p)
    }
}

impl Op {
    pub(crate) fn run<X: Backend>(
        &self,
        x: &X,
        ins: &[X::Buffer],
        outs: &mut [X::Buffer],
    ) -> Result<()> {
        match self {
            Op::Fill(v) => x.fill(&mut outs[0], *v),
            Op::Copy { src, dst } => x.copy_strided(&ins[0], src, &mut outs[0], dst),
            Op::Cast => x.cast(&ins[0], &mut outs[0]),
            Op::Gemm(s) => x.gemm(s, &ins[0], &ins[1], &mut outs[0]),
            Op::Unary(op) => x.unary(*op, &ins[0], &mut outs[0]),
            Op::Binary { op, a, b } => x.binary(*op, &ins[0], a, &ins[1], b, &mut outs[0]),
            Op::Axpy(alpha, at) => x.axpy(*alpha, &ins[0], &mut outs[0], *at),
            Op::Reduce {
                op,
                outer,
                n,
                inner,
            } => x.reduce(*op, &ins[0], *outer, *n, *inner, &mut outs[0]),
            Op::Softmax(s) => x.softmax(s, &ins[0], &mut outs[0]),
            Op::SoftmaxBackward(s) => x.softmax_backward(s, &ins[0], &ins[1], &mut outs[0]),
            Op::SoftmaxSegmented(s, m) => x.softmax_segmented(s, m, &ins[0], &ins[1], &mut outs[0]),
            Op::LayerNorm(s) => {
                let [y, mean, rstd] = outs else {
                    unreachable!("layernorm has three outputs")
                };
                x.layernorm(s, &ins[0], &ins[1], &ins[2], y, mean, rstd)
            }
            Op::LayerNormBackward(s) => {
                let [dx, dg, db] = outs else {
                    unreachable!("layernorm_backward has three outputs")
                };
                x.layernorm_backward(s, &ins[0], &ins[1], &ins[2], &ins[3], &ins[4], dx, dg, db)
            }
            Op::Gelu => x.gelu(&ins[0], &mut outs[0]),
            Op::GeluBackward => x.gelu_backward(&ins[0], &ins[1], &mut outs[0]),
            Op::Embedding(s) => x.embedding(s, &ins[0], &ins[1], &mut outs[0]),
            Op::EmbeddingBackward(s) => x.embedding_backward(s, &ins[0], &ins[1], &mut outs[0]),
            Op::ScatterRows(s) => x.scatter_rows(s, &ins[0], &ins[1], &mut outs[0]),
            Op::CrossEntropy(vocab) => x.cross_entropy(&ins[0], &ins[1], *vocab, &mut outs[0]),
            Op::CrossEntropyBackward(vocab) => {
                x.cross_entropy_backward(&ins[0], &ins[1], &ins[2], *vocab, &mut outs[0])
            }
            Op::AdamW { p, inv, found } => {
                let [param, m, v] = outs else {
                    unreachable!("adamw has three outputs")
                };
                let inv_scale = inv.then(|| &ins[1]);
                let found_inf = found.then(|| &ins[if *inv { 2 } else { 1 }]);
                x.adamw(p, param, &ins[0], m, v, inv_scale, found_inf)
            }
            Op::AdamWMaster { p, inv, found } => {
                let [master, copy, m, v] = outs else {
                    unreachable!("adamw_master has four outputs")
                };
                let inv_scale = inv.then(|| &ins[1]);
                let found_inf = found.then(|| &ins[if *inv { 2 } else { 1 }]);
                x.adamw_master(p, master, copy, &ins[0], m, v, inv_scale, found_inf)
            }
            Op::AdamW8bit { p, inv, found } => {
                let [param, codes, absmax] = outs else {
                    unreachable!("adamw_8bit has three outputs")
                };
                let inv_scale = inv.then(|| &ins[2]);
                let found_inf = found.then(|| &ins[if *inv { 3 } else { 2 }]);
                let mut state = QuantizedMoments {
                    codes,
                    absmax,
                    maps: &ins[1],
                };
                x.adamw_8bit(p, param, &ins[0], &mut state, inv_scale, found_inf)
            }
            Op::MultiFill(v) => x.multi_tensor_fill(&mut outs.iter_mut().collect::<Vec<_>>(), *v),
            Op::MultiSumSquares => {
                let [sum] = outs else {
                    unreachable!("multi_tensor_sum_squares has one output")
                };
                x.multi_tensor_sum_squares(&ins.iter().collect::<Vec<_>>(), sum)
            }
            Op::MultiAdamW {
                p,
                slots,
                inv,
                found,
            } => {
                let k = slots.len();
                let inv_scale = inv.then(|| &ins[k]);
                let found_inf = found.then(|| &ins[k + usize::from(*inv)]);
                let mut rest = &mut outs[..];
                let mut list = Vec::with_capacity(k);
                for (s, grad) in slots.iter().zip(ins) {
                    let (mine, tail) =
                        std::mem::take(&mut rest).split_at_mut(3 + usize::from(s.master));
                    rest = tail;
                    let (param, master, m, v) = match mine {
                        [param, master, m, v] => (param, Some(master), m, v),
                        [param, m, v] => (param, None, m, v),
                        _ => unreachable!("a slot has three or four outputs"),
                    };
                    list.push(AdamWTensors {
                        param,
                        master,
                        grad,
                        m,
                        v,
                        decay: s.decay,
                    });
                }
                x.multi_tensor_adamw(p, &mut list, inv_scale, found_inf)
            }
            Op::ClipCoefficient(max_norm) => {
                let [norm, coef] = outs else {
                    unreachable!("clip_coefficient has two outputs")
                };
                x.clip_coefficient(&ins[0], *max_norm, norm, coef)
            }
            Op::Unscale => {
                let [grads, found] = outs else {
                    unreachable!("unscale has two outputs")
                };
                x.unscale_check_finite(grads, &ins[0], found)
            }
            Op::UpdateScale(p) => {
                let [scale, tracker] = outs else {
                    unreachable!("update_loss_scale has two outputs")
                };
                x.update_loss_scale(p, scale, tracker, &ins[0])
            }
            Op::Attention(a) => {
                let p = a.probs(x, &ins[0], &ins[1])?;
                x.gemm(&a.tt_td(false), &p, &ins[2], &mut outs[0])
            }
            Op::AttentionBackward(a) => {
                let (q, k, v, dout) = (&ins[0], &ins[1], &ins[2], &ins[3]);
                let dt = x.dtype(q);
                let p = a.probs(x, q, k)?;
                let [dq, dk, dv] = outs else {
                    unreachable!("attention_backward has three outputs")
                };
                // dV = Pᵀ dO
                x.gemm(&a.tt_td(true), &p, dout, dv)?;
                // dP = dO Vᵀ
                let n = a.bh * a.t * a.t;
                let mut dp = x.zeros(dt, n)?;
                let dp_spec = GemmSpec {
                    batch: a.bh,
                    m: a.t,
                    n: a.t,
                    k: a.d,
                    trans_a: false,
                    trans_b: true,
                    alpha: 1.0,
                    beta: 0.0,
                    stride_a: a.t * a.d,
                    stride_b: a.t * a.d,
                    stride_c: a.t * a.t,
                    offset_a: 0,
                    offset_b: 0,
                    offset_c: 0,
                };
                x.gemm(&dp_spec, dout, v, &mut dp)?;
                // dS = softmax'(P, dP) (the scale included)
                let mut ds = x.zeros(dt, n)?;
                x.softmax_backward(&a.softmax(), &p, &dp, &mut ds)?;
                // dQ = dS K, dK = dSᵀ Q
                x.gemm(&a.tt_td(false), &ds, k, dq)?;
                x.gemm(&a.tt_td(true), &ds, q, dk)
            }
        }
    }
}

/// An output buffer: its initial contents, and whether it is compared.
#[derive(Clone, Debug)]
pub(crate) struct Out {
    name: &'static str,
    init: HostData,
    compared: bool,
    /// 8-bit codes packed four to a `u32`: compared code by code, a neighbouring code
    /// allowed for a few (see [`compare_codes`]).
    codes: bool,
}

const INT_POISON: i64 = 0x7EAD_BEEF;

impl Out {
    /// Filled with NaN (integers: 0x7EADBEEF): every element must be written.
    pub(crate) fn poison(name: &'static str, dtype: DType, len: usize) -> Out {
        let v = if dtype.is_float() {
            f64::NAN
        } else {
            INT_POISON as f64
        };
        Out {
            name,
            init: HostData::from_f64(dtype, &vec![v; len]),
            compared: true,
            codes: false,
        }
    }
    /// Starts from data (accumulating outputs, partially written views).
    pub(crate) fn init(name: &'static str, init: HostData) -> Out {
        Out {
            name,
            init,
            compared: true,
            codes: false,
        }
    }
    /// Quantisation codes, four to a word, starting from `init`.
    pub(crate) fn codes(name: &'static str, init: HostData) -> Out {
        Out {
            name,
            init,
            compared: true,
            codes: true,
        }
    }
    pub(crate) fn ignored(name: &'static str, init: HostData) -> Out {
        Out {
            name,
            init,
            compared: false,
            codes: false,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub(crate) op_name: &'static str,
    pub(crate) dtype: DType,
    pub(crate) label: String,
    op: Op,
    inputs: Vec<HostData>,
    outputs: Vec<Out>,
    tol: Tol,
}

/// Case-local random numbers.
pub(crate) struct Gen(ChaCha8Rng);

impl Gen {
    fn new(seed: u64, op: &str, label: &str, dtype: DType) -> Gen {
        // FNV-1a over the case's identity: every case has its own stream.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for b in op
            .bytes()
            .chain([0])
            .chain(label.bytes())
            .chain([0])
            .chain(dtype.as_str().bytes())
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Gen(ChaCha8Rng::seed_from_u64(h))
    }
    fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.0.next_u64() % n as u64) as usize
    }
    fn vals(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    /// `n` random words (any four bytes: 8-bit codes).
    fn words(&mut self, n: usize) -> HostData {
        HostData::U32((0..n).map(|_| self.0.next_u32()).collect())
    }
    pub(crate) fn data(&mut self, dtype: DType, n: usize, lo: f64, hi: f64) -> HostData {
        HostData::from_f64(dtype, &self.vals(n, lo, hi))
    }
    /// Magnitudes in [lo, hi] with random signs (keeps divisors away from 0).
    fn signed(&mut self, dtype: DType, n: usize, lo: f64, hi: f64) -> HostData {
        let v: Vec<f64> = (0..n)
            .map(|_| {
                let m = self.uniform(lo, hi);
                if self.0.next_u32() & 1 == 0 { m } else { -m }
            })
            .collect();
        HostData::from_f64(dtype, &v)
    }
}

pub(crate) struct Builder<'a> {
    opts: &'a SuiteOptions,
    dtype: DType,
    out: Vec<Case>,
}

impl Builder<'_> {
    pub(crate) fn add(
        &mut self,
        op_name: &'static str,
        label: impl Into<String>,
        f: impl FnOnce(&mut Gen, DType) -> (Op, Vec<HostData>, Vec<Out>, Tol),
    ) {
        self.add_as(op_name, self.dtype, label, f);
    }

    fn add_as(
        &mut self,
        op_name: &'static str,
        dtype: DType,
        label: impl Into<String>,
        f: impl FnOnce(&mut Gen, DType) -> (Op, Vec<HostData>, Vec<Out>, Tol),
    ) {
        if !self.opts.wants(op_name) {
            return;
        }
        let label = label.into();
        let mut g = Gen::new(self.opts.seed, op_name, &label, dtype);
        let (op, inputs, outputs, tol) = f(&mut g, dtype);
        self.out.push(Case {
            op_name,
            dtype,
            label,
            op,
            inputs,
            outputs,
            tol,
        });
    }
}

fn lay(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout {
        shape: Shape::new(shape.to_vec()),
        strides: strides.to_vec(),
        offset,
    }
}

fn host_softmax(x: &[f64], s: &SoftmaxSpec) -> Vec<f64> {
    let mut y = vec![0.0; s.rows * s.cols];
    for r in 0..s.rows {
        let valid = if s.causal { r % s.cols + 1 } else { s.cols };
        let row = &x[r * s.cols..r * s.cols + valid];
        let mx = row
            .iter()
            .map(|v| v * f64::from(s.scale))
            .fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = row
            .iter()
            .map(|v| (v * f64::from(s.scale) - mx).exp())
            .collect();
        let sum: f64 = e.iter().sum();
        for j in 0..valid {
            y[r * s.cols + j] = e[j] / sum;
        }
    }
    y
}

/// The AdamW cases' three settings, each with its label's tail: a plain step 1; step 10
/// with a device-side inverse scale (`amp`: inputs `inv_scale = 1/1024` and `found_inf`);
/// and a step 3 that `found_inf = 1` skips (`skip`).
pub(crate) fn adamw_variants() -> [(AdamWParams, bool, bool, String); 3] {
    [(1u32, false, false), (10, true, false), (3, true, true)].map(|(step, amp, skip)| {
        let p = AdamWParams {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            step,
            grad_scale: 0.5,
            range: None,
        };
        let what = if skip {
            " found_inf=1 (skip)"
        } else if amp {
            " inv_scale=1/1024"
        } else {
            ""
        };
        (p, amp, skip, format!("step={step}{what}"))
    })
}

/// All cases for `dtype` (integer-only cases come with the first dtype listed).
pub(crate) fn cases(dtype: DType, opts: &SuiteOptions) -> Vec<Case> {
    let mut b = Builder {
        opts,
        dtype,
        out: Vec::new(),
    };
    let tol = tolerance(dtype);
    let large = opts.large;
    let first = opts.dtypes.first() == Some(&dtype);

    // ---- fill --------------------------------------------------------------------
    for (len, value) in [(1usize, 1.5f64), (7, -3.25), (1000, 0.1), (33, 1e5)] {
        b.add("fill", format!("len={len} value={value}"), |_, d| {
            (
                Op::Fill(value),
                vec![],
                vec![Out::poison("buf", d, len)],
                Tol::EXACT,
            )
        });
    }
    if first {
        for (d, value) in [(DType::I32, -7.9), (DType::U32, 12.0)] {
            b.add_as("fill", d, format!("len=9 value={value}"), |_, d| {
                (
                    Op::Fill(value),
                    vec![],
                    vec![Out::poison("buf", d, 9)],
                    Tol::EXACT,
                )
            });
        }
    }

    // ---- copy_strided ------------------------------------------------------------
    let copies: Vec<(&str, Layout, usize, Layout, usize, bool)> = vec![
        // (label, src layout, src len, dst layout, dst len, dst starts from data)
        (
            "transpose 5x7",
            lay(&[7, 5], &[1, 7], 0),
            35,
            Layout::contiguous([7, 5]),
            35,
            false,
        ),
        (
            "broadcast [3]->[4,3]",
            lay(&[4, 3], &[0, 1], 0),
            3,
            Layout::contiguous([4, 3]),
            12,
            false,
        ),
        (
            "permute [2,3,4] offset 5",
            lay(&[4, 2, 3], &[1, 12, 4], 5),
            29,
            Layout::contiguous([4, 2, 3]),
            24,
            false,
        ),
        (
            "into cols 2..5 of [6,9]",
            Layout::contiguous([6, 3]),
            18,
            lay(&[6, 3], &[9, 1], 2),
            54,
            true,
        ),
        (
            "scalar",
            Layout::contiguous(Vec::<usize>::new()),
            1,
            Layout::contiguous(Vec::<usize>::new()),
            1,
            false,
        ),
        // Rows contiguous on both sides and whole 16-byte packs in every dtype, both
        // addresses aligned: CUDA copies 16-byte packs.
        (
            "head split [2,4,3,64] -> [2,3,4,64]",
            lay(&[2, 3, 4, 64], &[768, 64, 192, 1], 0),
            1536,
            Layout::contiguous([2, 3, 4, 64]),
            1536,
            false,
        ),
        (
            "head merge [2,3,4,64] -> [2,4,3,64]",
            Layout::contiguous([2, 3, 4, 64]),
            1536,
            lay(&[2, 3, 4, 64], &[768, 64, 192, 1], 0),
            1536,
            false,
        ),
        (
            "rows of 8, [5,3,8] -> [3,5,8], offset 8",
            lay(&[3, 5, 8], &[8, 24, 1], 8),
            128,
            Layout::contiguous([3, 5, 8]),
            120,
            false,
        ),
        // Just missing the packs: rows of 9 (no dtype makes 16-byte multiples of them),
        // an offset of one element on either side, rows 12 elements apart (packs in
        // f32/f64 only).
        (
            "rows of 9, [5,3,9] -> [3,5,9]",
            lay(&[3, 5, 9], &[9, 27, 1], 0),
            135,
            Layout::contiguous([3, 5, 9]),
            135,
            false,
        ),
        (
            "rows of 8, [5,3,8] -> [3,5,8], source offset 1",
            lay(&[3, 5, 8], &[8, 24, 1], 1),
            121,
            Layout::contiguous([3, 5, 8]),
            120,
            false,
        ),
        (
            "rows of 8, [3,5,8] -> [5,3,8], destination offset 1",
            Layout::contiguous([3, 5, 8]),
            120,
            lay(&[3, 5, 8], &[8, 24, 1], 1),
            121,
            true,
        ),
        (
            "rows of 8 at a stride of 12",
            lay(&[5, 8], &[12, 1], 0),
            56,
            Layout::contiguous([5, 8]),
            40,
            false,
        ),
    ];
    for (label, src, slen, dst, dlen, keep) in copies.iter().cloned() {
        b.add("copy_strided", label, |g, d| {
            let out = if keep {
                Out::init("dst", g.data(d, dlen, -1.0, 1.0))
            } else {
                Out::poison("dst", d, dlen)
            };
            (
                Op::Copy { src, dst },
                vec![g.data(d, slen, -1.0, 1.0)],
                vec![out],
                Tol::EXACT,
            )
        });
    }
    if first {
        b.add_as("copy_strided", DType::I32, "transpose 5x7", |g, d| {
            let v: Vec<f64> = (0..35).map(|_| g.uniform(-1e6, 1e6).round()).collect();
            (
                Op::Copy {
                    src: lay(&[7, 5], &[1, 7], 0),
                    dst: Layout::contiguous([7, 5]),
                },
                vec![HostData::from_f64(d, &v)],
                vec![Out::poison("dst", d, 35)],
                Tol::EXACT,
            )
        });
    }

    // ---- cast --------------------------------------------------------------------
    // Wide magnitudes (2^-30 .. 2^20): subnormals and overflow of f16, ties of bf16.
    let wide = |g: &mut Gen, n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| {
                let e = g.uniform(-30.0, 20.0).floor();
                let m = g.uniform(1.0, 2.0);
                let s = if g.below(2) == 0 { 1.0 } else { -1.0 };
                // round to f32 first: the source is an f32 buffer
                f64::from((s * m * e.exp2()) as f32)
            })
            .collect()
    };
    if dtype != DType::F32 {
        b.add("cast", format!("f32->{dtype} n=1001 wide range"), |g, d| {
            let v = wide(g, 1001);
            (
                Op::Cast,
                vec![HostData::from_f64(DType::F32, &v)],
                vec![Out::poison("dst", d, 1001)],
                Tol::EXACT,
            )
        });
        b.add("cast", format!("{dtype}->f32 n=999"), |g, d| {
            let v = wide(g, 999);
            (
                Op::Cast,
                vec![HostData::from_f64(d, &v)],
                vec![Out::poison("dst", DType::F32, 999)],
                Tol::EXACT,
            )
        });
    }
    for (to, lo, hi) in [(DType::I32, -1000.0, 1000.0), (DType::U32, -100.0, 1000.0)] {
        b.add("cast", format!("{dtype}->{to} n=257"), |g, d| {
            (
                Op::Cast,
                vec![g.data(d, 257, lo, hi)],
                vec![Out::poison("dst", to, 257)],
                Tol::EXACT,
            )
        });
    }
    b.add("cast", format!("i32->{dtype} n=300"), |g, d| {
        let v: Vec<f64> = (0..300)
            .map(|_| g.uniform(-5000.0, 5000.0).round())
            .collect();
        (
            Op::Cast,
            vec![HostData::from_f64(DType::I32, &v)],
            vec![Out::poison("dst", d, 300)],
            Tol::EXACT,
        )
    });
    b.add("cast", format!("{dtype}->{dtype} n=5"), |g, d| {
        (
            Op::Cast,
            vec![g.data(d, 5, -1.0, 1.0)],
            vec![Out::poison("dst", d, 5)],
            Tol::EXACT,
        )
    });
    if first {
        b.add_as(
            "cast",
            DType::I32,
            "i32->u32 (negatives saturate) n=100",
            |g, _| {
                let v: Vec<f64> = (0..100).map(|_| g.uniform(-1e9, 1e9).round()).collect();
                (
                    Op::Cast,
                    vec![HostData::from_f64(DType::I32, &v)],
                    vec![Out::poison("dst", DType::U32, 100)],
                    Tol::EXACT,
                )
            },
        );
        b.add_as(
            "cast",
            DType::U32,
            "u32->i32 (large saturate) n=100",
            |g, _| {
                let v: Vec<f64> = (0..100).map(|_| g.uniform(0.0, 4e9).round()).collect();
                (
                    Op::Cast,
                    vec![HostData::from_f64(DType::U32, &v)],
                    vec![Out::poison("dst", DType::I32, 100)],
                    Tol::EXACT,
                )
            },
        );
    }

    // ---- gemm --------------------------------------------------------------------
    let mut gemms: Vec<GemmSpec> = Vec::new();
    let plain = |batch, m, n, k| GemmSpec::batched(batch, m, n, k);
    for (m, n, k) in [
        (1, 1, 1),
        (7, 5, 3),
        (17, 33, 19),
        (64, 64, 64),
        (32, 36, 40),
    ] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            gemms.push(plain(1, m, n, k).trans_a(ta).trans_b(tb));
        }
    }
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        gemms.push(plain(3, 13, 17, 11).trans_a(ta).trans_b(tb));
        gemms.push(plain(2, 20, 24, 28).trans_a(ta).trans_b(tb));
    }
    gemms.push(plain(1, 33, 31, 29).alpha(0.5).beta(0.75));
    gemms.push(plain(2, 32, 36, 40).alpha(-1.25).beta(1.0).trans_b(true));
    // a weight shared by the batch (stride 0)
    gemms.push(GemmSpec {
        stride_b: 0,
        ..plain(4, 9, 12, 8)
    });
    gemms.push(GemmSpec {
        stride_b: 0,
        ..plain(4, 8, 12, 16).trans_b(true)
    });
    // Operands part-way into larger buffers (parameters and gradients in one flat
    // buffer): odd offsets, and multiples of 4 that wgpu's vec4 kernel takes.
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        gemms.push(
            plain(1, 17, 33, 19)
                .trans_a(ta)
                .trans_b(tb)
                .offsets(5, 3, 7),
        );
        gemms.push(
            plain(2, 20, 24, 28)
                .trans_a(ta)
                .trans_b(tb)
                .offsets(8, 4, 12),
        );
    }
    gemms.push(
        GemmSpec {
            stride_b: 0,
            ..plain(4, 8, 12, 16).trans_b(true)
        }
        .beta(1.0)
        .offsets(1, 96, 2),
    );
    if large {
        gemms.push(plain(1, 65, 127, 129));
        gemms.push(plain(1, 128, 96, 256).trans_a(true));
        gemms.push(plain(1, 129, 130, 131).trans_b(true));
        gemms.push(plain(1, 256, 256, 256));
        // more matrices than one grid dimension holds workgroups (65535); f32 only, as
        // 65539 tiny dispatched tiles are slow on a software adapter
        if dtype == DType::F32 {
            gemms.push(plain(65539, 2, 3, 2));
        }
    }
    for s in gemms {
        let label = format!(
            "b={} m={} n={} k={}{}{}{}{}{}{}",
            s.batch,
            s.m,
            s.n,
            s.k,
            if s.trans_a { " tA" } else { "" },
            if s.trans_b { " tB" } else { "" },
            if s.alpha != 1.0 {
                format!(" alpha={}", s.alpha)
            } else {
                String::new()
            },
            if s.beta != 0.0 {
                format!(" beta={}", s.beta)
            } else {
                String::new()
            },
            if s.stride_b == 0 && s.batch > 1 {
                " shared-B"
            } else {
                ""
            },
            if (s.offset_a, s.offset_b, s.offset_c) != (0, 0, 0) {
                format!(" offsets={},{},{}", s.offset_a, s.offset_b, s.offset_c)
            } else {
                String::new()
            },
        );
        b.add("gemm", label, |g, d| {
            let (la, lb, lc) = s.required_lens().expect("the suite's specs fit usize");
            // C before its offset must keep its values: initialised, never poisoned.
            let c = if s.beta != 0.0 || s.offset_c != 0 {
                Out::init("c", g.data(d, lc, -1.0, 1.0))
            } else {
                Out::poison("c", d, lc)
            };
            let t = tol.times(2.0 + (s.k as f64).sqrt() / 4.0);
            (
                Op::Gemm(s),
                vec![g.data(d, la, -1.0, 1.0), g.data(d, lb, -1.0, 1.0)],
                vec![c],
                t,
            )
        });
    }

    // ---- unary -------------------------------------------------------------------
    let unaries: [(UnaryOp, f64, f64); 13] = [
        (UnaryOp::Neg, -2.0, 2.0),
        (UnaryOp::Exp, -4.0, 4.0),
        (UnaryOp::Log, 0.1, 3.0),
        (UnaryOp::Sqrt, 0.1, 3.0),
        (UnaryOp::Rsqrt, 0.1, 3.0),
        (UnaryOp::Abs, -2.0, 2.0),
        (UnaryOp::Square, -2.0, 2.0),
        (UnaryOp::Recip, 0.1, 3.0),
        (UnaryOp::Relu, -2.0, 2.0),
        (UnaryOp::Tanh, -6.0, 6.0),
        (UnaryOp::Sigmoid, -8.0, 8.0),
        (
            UnaryOp::Affine {
                mul: 1.5,
                add: -0.25,
            },
            -2.0,
            2.0,
        ),
        (UnaryOp::Clamp { lo: -0.5, hi: 0.3 }, -2.0, 2.0),
    ];
    for (op, lo, hi) in unaries {
        for n in [1usize, 1000] {
            b.add("unary", format!("{op:?} n={n}"), |g, d| {
                (
                    Op::Unary(op),
                    vec![g.data(d, n, lo, hi)],
                    vec![Out::poison("out", d, n)],
                    tol.times(2.0),
                )
            });
        }
    }
    if large && dtype == DType::F32 {
        // past 65535 workgroups of 256: exercises the 2-D grid
        let n = 65535 * 256 + 3;
        b.add("unary", format!("Neg n={n} (2-D grid)"), |g, d| {
            (
                Op::Unary(UnaryOp::Neg),
                vec![g.data(d, n, -2.0, 2.0)],
                vec![Out::poison("out", d, n)],
                tol,
            )
        });
    }

    // ---- binary ------------------------------------------------------------------
    let all_ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    // (label, a's view, a's length, b's view, b's length, ops)
    type BinaryCase = (&'static str, Layout, usize, Layout, usize, Vec<BinaryOp>);
    let binaries: Vec<BinaryCase> = vec![
        (
            "same [3,5,7]",
            Layout::contiguous([3, 5, 7]),
            105,
            Layout::contiguous([3, 5, 7]),
            105,
            all_ops.to_vec(),
        ),
        (
            "[4,6] op [6]",
            Layout::contiguous([4, 6]),
            24,
            lay(&[4, 6], &[0, 1], 0),
            6,
            all_ops.to_vec(),
        ),
        (
            "[3,5,16] op [16] (a bias: whole 16-byte packs)",
            Layout::contiguous([3, 5, 16]),
            240,
            lay(&[3, 5, 16], &[0, 0, 1], 0),
            16,
            all_ops.to_vec(),
        ),
        (
            "[16] op [5,16]",
            lay(&[5, 16], &[0, 1], 0),
            16,
            Layout::contiguous([5, 16]),
            80,
            vec![BinaryOp::Sub, BinaryOp::Div],
        ),
        (
            "[4,1] op [1,6]",
            lay(&[4, 6], &[1, 0], 0),
            4,
            lay(&[4, 6], &[0, 1], 0),
            6,
            vec![BinaryOp::Add, BinaryOp::Div],
        ),
        (
            "transposed a, offset b",
            lay(&[4, 6], &[1, 4], 0),
            24,
            lay(&[4, 6], &[6, 1], 3),
            27,
            vec![BinaryOp::Sub, BinaryOp::Mul],
        ),
        (
            "scalar b",
            Layout::contiguous([5, 9]),
            45,
            lay(&[5, 9], &[0, 0], 0),
            1,
            vec![BinaryOp::Mul, BinaryOp::Max],
        ),
        (
            "rank 6",
            Layout::contiguous([2, 1, 3, 1, 2, 3]),
            36,
            Layout::contiguous([2, 1, 3, 1, 2, 3]),
            36,
            vec![BinaryOp::Add],
        ),
    ];
    for (label, la, na, lb, nb, ops) in binaries {
        for op in ops {
            let (la, lb) = (la.clone(), lb.clone());
            let n = la.shape.elem_count();
            b.add("binary", format!("{op:?} {label}"), |g, d| {
                (
                    Op::Binary { op, a: la, b: lb },
                    vec![g.data(d, na, -2.0, 2.0), g.signed(d, nb, 0.5, 2.0)],
                    vec![Out::poison("out", d, n)],
                    tol.times(2.0),
                )
            });
        }
    }

    // ---- axpy --------------------------------------------------------------------
    for n in [1usize, 1001] {
        b.add("axpy", format!("n={n} alpha=-0.75"), |g, d| {
            (
                Op::Axpy(-0.75, None),
                vec![g.data(d, n, -1.0, 1.0)],
                vec![Out::init("y", g.data(d, n, -1.0, 1.0))],
                tol.times(2.0),
            )
        });
    }
    // Into one part of a flat buffer: the rest of y must keep its values (compared over
    // the whole buffer). Offset 3 is not a whole 16-byte pack (CUDA's unaligned kernel),
    // 8 is one for f16/bf16 and 32 for every dtype.
    for (n, at, total) in [(1001usize, 3usize, 1010usize), (64, 8, 80), (100, 32, 140)] {
        b.add(
            "axpy",
            format!("n={n} into y[{at}..] of {total}"),
            |g, d| {
                (
                    Op::Axpy(-0.75, Some(at)),
                    vec![g.data(d, n, -1.0, 1.0)],
                    vec![Out::init("y", g.data(d, total, -1.0, 1.0))],
                    tol.times(2.0),
                )
            },
        );
    }

    // ---- reduce ------------------------------------------------------------------
    let mut reduces = vec![
        (1usize, 1usize, 1usize),
        (3, 1000, 1),
        (5, 7, 9),
        (2, 1, 13),
        (4, 33, 65),
        (2, 150, 33), // few columns down many rows: CUDA's split into chunks of rows
    ];
    if large {
        reduces.push((1, 4097, 1));
        reduces.push((70000, 2, 1)); // one workgroup per output: a 2-D grid
        reduces.push((1, 100_000, 1)); // one long row: CUDA splits it over 6 blocks
        reduces.push((1, 2048, 768)); // a bias gradient's shape
    }
    for (outer, n, inner) in reduces {
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            b.add("reduce", format!("{op:?} [{outer},{n},{inner}]"), |g, d| {
                let t = match op {
                    ReduceOp::Sum | ReduceOp::Mean => tol.times(2.0 + (n as f64).sqrt()),
                    _ => Tol::EXACT,
                };
                (
                    Op::Reduce {
                        op,
                        outer,
                        n,
                        inner,
                    },
                    vec![g.data(d, outer * n * inner, -1.0, 1.0)],
                    vec![Out::poison("out", d, outer * inner)],
                    t,
                )
            });
        }
    }

    // ---- softmax and its backward --------------------------------------------------
    let mut softmaxes = vec![
        (1usize, 1usize, false, 1.0f32),
        (3, 7, false, 1.0),
        (5, 1000, false, 0.5),
        (21, 7, true, 0.3),
        (66, 33, true, 0.353_553_38),
    ];
    if large {
        softmaxes.push((3, 4099, false, 1.0));
        softmaxes.push((70000, 3, false, 1.0));
    }
    for (rows, cols, causal, scale) in softmaxes {
        let spec = SoftmaxSpec {
            rows,
            cols,
            scale,
            causal,
        };
        let label = format!(
            "[{rows},{cols}] scale={scale}{}",
            if causal { " causal" } else { "" }
        );
        b.add("softmax", label.clone(), |g, d| {
            (
                Op::Softmax(spec),
                vec![g.data(d, rows * cols, -3.0, 3.0)],
                vec![Out::poison("y", d, rows * cols)],
                tol.times(2.0),
            )
        });
        b.add("softmax_backward", label, |g, d| {
            let x = g.vals(rows * cols, -3.0, 3.0);
            let y = HostData::from_f64(d, &host_softmax(&x, &spec));
            (
                Op::SoftmaxBackward(spec),
                vec![y, g.data(d, rows * cols, -1.0, 1.0)],
                vec![Out::poison("dx", d, rows * cols)],
                tol.times(4.0),
            )
        });
    }

    // ---- causal softmax with a document (segment-id) mask --------------------------
    // (batch, heads, T): documents of random lengths packed into each row, ids
    // increasing along the row; T past a workgroup (257) in the large suite.
    let mut segmented = vec![(1usize, 1usize, 1usize), (2, 3, 7), (3, 2, 33)];
    if large {
        segmented.push((2, 2, 257));
    }
    for (batch, heads, t) in segmented {
        let spec = SoftmaxSpec {
            rows: batch * heads * t,
            cols: t,
            scale: 0.35,
            causal: true,
        };
        b.add(
            "softmax_segmented",
            format!("batch={batch} heads={heads} T={t}"),
            |g, d| {
                let mut seg = Vec::with_capacity(batch * t);
                for _ in 0..batch {
                    let mut id = 0.0;
                    for _ in 0..t {
                        // A new document starts with probability 1/5.
                        if g.below(5) == 0 {
                            id += 1.0;
                        }
                        seg.push(id);
                    }
                }
                (
                    Op::SoftmaxSegmented(spec, SegmentMask { heads }),
                    vec![
                        HostData::from_f64(DType::U32, &seg),
                        g.data(d, spec.rows * t, -3.0, 3.0),
                    ],
                    vec![Out::poison("y", d, spec.rows * t)],
                    tol.times(2.0),
                )
            },
        );
    }

    // ---- layernorm and its backward ------------------------------------------------
    let mut lns = vec![(1usize, 2usize), (3, 7), (5, 1000), (33, 65)];
    if large {
        lns.push((64, 768));
    }
    // The last two: gamma and beta as views into flat parameter (and gradient)
    // buffers, at an odd offset and past other parameters' elements.
    let mut lns: Vec<_> = lns.into_iter().map(|(r, c)| (r, c, 0, 0)).collect();
    lns.extend([(3usize, 7usize, 5usize, 13usize), (33, 65, 130, 1)]);
    for (rows, cols, g_at, b_at) in lns {
        let spec = LayerNormSpec::new(rows, cols, 1e-5).params_at(g_at, b_at);
        let label = if (g_at, b_at) == (0, 0) {
            format!("[{rows},{cols}]")
        } else {
            format!("[{rows},{cols}] gamma at {g_at}, beta at {b_at}")
        };
        b.add("layernorm", label.clone(), |g, d| {
            (
                Op::LayerNorm(spec),
                vec![
                    g.data(d, rows * cols, -1.0, 2.0),
                    g.data(d, g_at + cols, 0.5, 1.5),
                    g.data(d, b_at + cols, -0.5, 0.5),
                ],
                vec![
                    Out::poison("y", d, rows * cols),
                    Out::poison("mean", DType::F32, rows),
                    Out::poison("rstd", DType::F32, rows),
                ],
                tol.times(4.0),
            )
        });
        b.add("layernorm_backward", label, |g, d| {
            let x = g.data(d, rows * cols, -1.0, 2.0);
            let xs = x.to_f64();
            let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
            for r in 0..rows {
                let row = &xs[r * cols..(r + 1) * cols];
                let m = row.iter().sum::<f64>() / cols as f64;
                let v = row.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / cols as f64;
                mean[r] = m;
                rstd[r] = 1.0 / (v + 1e-5).sqrt();
            }
            let dy = g.data(d, rows * cols, -1.0, 1.0);
            let gamma = g.data(d, g_at + cols, 0.5, 1.5);
            // dx = rstd (dy γ - mean(dy γ) - x̂ mean(dy γ x̂)) cancels to nearly 0 over few
            // columns; its rounding error is that of the terms, about max|dy γ| rstd.
            let max_abs = |h: &HostData| h.to_f64().iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let terms = max_abs(&dy) * max_abs(&gamma) * rstd.iter().fold(0.0f64, |m, v| m.max(*v));
            (
                Op::LayerNormBackward(spec),
                vec![
                    dy,
                    x,
                    gamma,
                    HostData::from_f64(DType::F32, &mean),
                    HostData::from_f64(DType::F32, &rstd),
                ],
                vec![
                    Out::poison("dx", d, rows * cols),
                    Out::init("dgamma", g.data(d, g_at + cols, -1.0, 1.0)),
                    Out::init("dbeta", g.data(d, b_at + cols, -1.0, 1.0)),
                ],
                tol.times(4.0 + (rows as f64).sqrt())
                    .with_scale_floor(terms),
            )
        });
    }

    // ---- gelu ----------------------------------------------------------------------
    for n in [1usize, 1003] {
        b.add("gelu", format!("n={n}"), |g, d| {
            (
                Op::Gelu,
                vec![g.data(d, n, -5.0, 5.0)],
                vec![Out::poison("y", d, n)],
                tol.times(2.0),
            )
        });
        b.add("gelu_backward", format!("n={n}"), |g, d| {
            (
                Op::GeluBackward,
                vec![g.data(d, n, -5.0, 5.0), g.data(d, n, -1.0, 1.0)],
                vec![Out::poison("dx", d, n)],
                tol.times(4.0),
            )
        });
    }

    // ---- embedding -----------------------------------------------------------------
    // (rows, dim, ids, id dtype, where the table starts in a flat buffer and how many
    // elements follow it; None: the table is the whole buffer). The backward's buckets
    // of rows (one per CUDA warp: 128 on the emulator, sm_count * 32 on a GPU) and its
    // tiles of 1024 ids: 3 rows take 80 repeats each, with rows of 300 (a whole 256 per
    // warp pass plus a ragged tail); 300 rows outnumber the emulator's buckets and 5000
    // a GPU's, with 1100 ids (two tiles, the second ragged, not a multiple of 32). (Ids
    // outside the table are an error on the reference; crates/cuda/tests/emulator.rs
    // checks that CUDA skips them. More repeats drift from the reference, which rounds
    // each row's sum once where CUDA rounds every addition: that test checks them exactly.)
    for (rows, dim, n, idt, flat) in [
        (11usize, 5usize, 13usize, DType::U32, None),
        (7, 1, 4, DType::I32, None),
        (50, 64, 130, DType::I32, None),
        (3, 300, 240, DType::U32, None),
        (300, 40, 1100, DType::I32, None),
        (5000, 3, 1100, DType::U32, None),
        (11, 5, 13, DType::U32, Some((7usize, 9usize))),
        (50, 64, 130, DType::I32, Some((64, 3))),
    ] {
        let (spec, total, label) = table_case(rows, dim, n, idt, flat);
        b.add("embedding", label.clone(), |g, d| {
            let ids: Vec<f64> = (0..n).map(|_| g.below(rows) as f64).collect();
            (
                Op::Embedding(spec),
                vec![HostData::from_f64(idt, &ids), g.data(d, total, -1.0, 1.0)],
                vec![Out::poison("out", d, n * dim)],
                Tol::EXACT,
            )
        });
        b.add("embedding_backward", label, |g, d| {
            let ids: Vec<f64> = (0..n).map(|_| g.below(rows) as f64).collect();
            (
                Op::EmbeddingBackward(spec),
                vec![HostData::from_f64(idt, &ids), g.data(d, n * dim, -1.0, 1.0)],
                vec![Out::init("dtable", g.data(d, total, -1.0, 1.0))],
                tol.times(2.0),
            )
        });
    }

    // ---- row scatter (the embedding's inverse) ----------------------------------------
    // Distinct ids (the op's contract): the first n of a shuffle of the rows. The rows no
    // id names must keep the table's values, so the table starts initialised.
    for (rows, dim, n, idt, flat) in [
        (11usize, 5usize, 7usize, DType::U32, None),
        (7, 1, 7, DType::I32, None),
        (50, 64, 50, DType::I32, None),
        (300, 40, 200, DType::U32, None),
        (5000, 3, 1100, DType::U32, None),
        (11, 5, 6, DType::U32, Some((7usize, 9usize))),
        (50, 64, 30, DType::I32, Some((64, 3))),
    ] {
        let (spec, total, label) = table_case(rows, dim, n, idt, flat);
        b.add("scatter_rows", label, |g, d| {
            let mut ids: Vec<f64> = (0..rows).map(|r| r as f64).collect();
            for i in (1..rows).rev() {
                ids.swap(i, g.below(i + 1));
            }
            ids.truncate(n);
            (
                Op::ScatterRows(spec),
                vec![HostData::from_f64(idt, &ids), g.data(d, n * dim, -1.0, 1.0)],
                vec![Out::init("table", g.data(d, total, -1.0, 1.0))],
                Tol::EXACT,
            )
        });
    }

    // ---- cross-entropy -------------------------------------------------------------
    for (rows, vocab) in [(5usize, 7usize), (3, 1000), (16, 65)] {
        let label = format!(
            "rows={rows} vocab={vocab}{}",
            if rows == 5 { " (row 2 ignored)" } else { "" }
        );
        let targets = |g: &mut Gen| {
            let t: Vec<f64> = (0..rows)
                .map(|r| {
                    if rows == 5 && r == 2 {
                        -1.0
                    } else {
                        g.below(vocab) as f64
                    }
                })
                .collect();
            HostData::from_f64(DType::I32, &t)
        };
        b.add("cross_entropy", label.clone(), |g, d| {
            (
                Op::CrossEntropy(vocab),
                vec![g.data(d, rows * vocab, -4.0, 4.0), targets(g)],
                vec![Out::poison("losses", DType::F32, rows)],
                tol.times(4.0),
            )
        });
        b.add("cross_entropy_backward", label, |g, d| {
            (
                Op::CrossEntropyBackward(vocab),
                vec![
                    g.data(d, rows * vocab, -4.0, 4.0),
                    targets(g),
                    g.data(DType::F32, rows, 0.1, 1.0),
                ],
                vec![Out::poison("dlogits", d, rows * vocab)],
                tol.times(4.0),
            )
        });
    }

    // ---- AdamW ---------------------------------------------------------------------
    let mut adam_sizes = vec![1usize, 1001];
    if large {
        adam_sizes.push(70001);
    }
    for n in adam_sizes {
        for (p, amp, skip, tail) in adamw_variants() {
            let label = format!("n={n} {tail}");
            b.add("adamw", label, |g, d| {
                let gscale = if amp { 1024.0 } else { 1.0 };
                let mut inputs = vec![g.data(d, n, -gscale, gscale)];
                if amp {
                    inputs.push(HostData::F32(vec![1.0 / 1024.0]));
                    inputs.push(HostData::F32(vec![if skip { 1.0 } else { 0.0 }]));
                }
                (
                    Op::AdamW {
                        p,
                        inv: amp,
                        found: amp,
                    },
                    inputs,
                    vec![
                        Out::init("param", g.data(d, n, -1.0, 1.0)),
                        Out::init("m", g.data(DType::F32, n, -0.1, 0.1)),
                        Out::init("v", g.data(DType::F32, n, 0.0, 0.01)),
                    ],
                    tol.times(4.0),
                )
            });
        }
    }

    // ---- AdamW, 8-bit moments --------------------------------------------------------
    // Random codes and block absmax values as the starting state (both moments decode to
    // a spread of magnitudes); sizes below, at and across the 2048-value block, and one
    // range of a flat buffer (its state is the range's own).
    let mut q8_sizes: Vec<(usize, Option<ElemRange>)> = vec![
        (1, None),
        (1001, None),
        (5000, None),
        (5000, Some(ElemRange::new(300, 4500))),
    ];
    if large {
        q8_sizes.push((70001, None));
    }
    if dtype == DType::F64 {
        q8_sizes.clear(); // f16, bf16 and f32 parameters only
    }
    for (total, range) in q8_sizes {
        for (mut p, amp, skip, tail) in adamw_variants() {
            p.range = range;
            let n = range.map_or(total, |r| r.len);
            let at = range.map_or(String::new(), |r| {
                format!(" range {}..{}", r.offset, r.offset + r.len)
            });
            b.add("adamw_8bit", format!("n={total}{at} {tail}"), |g, d| {
                let gscale = if amp { 1024.0 } else { 1.0 };
                let mut inputs = vec![
                    g.data(d, total, -gscale, gscale),
                    HostData::F32(brrr_backend::quant8::adam_maps()),
                ];
                if amp {
                    inputs.push(HostData::F32(vec![1.0 / 1024.0]));
                    inputs.push(HostData::F32(vec![if skip { 1.0 } else { 0.0 }]));
                }
                let blocks = brrr_backend::quant8::blocks(n);
                let mut absmax = g.vals(blocks, 0.01, 0.1);
                absmax.extend(g.vals(blocks, 1e-4, 1e-2));
                (
                    Op::AdamW8bit {
                        p,
                        inv: amp,
                        found: amp,
                    },
                    inputs,
                    vec![
                        Out::init("param", g.data(d, total, -1.0, 1.0)),
                        Out::codes("codes", g.words(2 * brrr_backend::quant8::code_words(n))),
                        Out::init(
                            "absmax",
                            HostData::F32(absmax.iter().map(|v| *v as f32).collect()),
                        ),
                    ],
                    tol.times(4.0),
                )
            });
        }
    }

    // One parameter's segment of flat buffers (`range`): the elements outside it must
    // come out exactly as they went in (every output buffer is compared whole).
    for (offset, len, total, amp) in [(300usize, 1001usize, 1500usize, false), (7, 64, 80, true)] {
        let p = AdamWParams {
            step: 4,
            grad_scale: 0.5,
            range: Some(ElemRange::new(offset, len)),
            ..AdamWParams::default()
        };
        let label = format!("range {offset}..{} of {total}", offset + len);
        b.add("adamw", label, |g, d| {
            let mut inputs = vec![g.data(d, total, -1.0, 1.0)];
            if amp {
                inputs.push(HostData::F32(vec![0.5]));
                inputs.push(HostData::F32(vec![0.0]));
            }
            (
                Op::AdamW {
                    p,
                    inv: amp,
                    found: amp,
                },
                inputs,
                vec![
                    Out::init("param", g.data(d, total, -1.0, 1.0)),
                    Out::init("m", g.data(DType::F32, total, -0.1, 0.1)),
                    Out::init("v", g.data(DType::F32, total, 0.0, 0.01)),
                ],
                tol.times(4.0),
            )
        });
    }

    // ---- AMP -----------------------------------------------------------------------
    b.add(
        "unscale_check_finite",
        "inv_scale=4, |g| < 20000 (overflows f16 once scaled)",
        |g, d| {
            (
                Op::Unscale,
                vec![HostData::F32(vec![4.0])],
                vec![
                    Out::init("grads", g.data(d, 333, -20000.0, 20000.0)),
                    Out::init("found_inf", HostData::F32(vec![0.0])),
                ],
                tol,
            )
        },
    );
    for (label, bad) in [
        ("finite n=1001", None),
        ("inf at 17", Some(f64::INFINITY)),
        ("NaN at 5", Some(f64::NAN)),
    ] {
        b.add("unscale_check_finite", label, |g, d| {
            let mut v = g.vals(1001, -1024.0, 1024.0);
            let nan = bad.is_some_and(f64::is_nan);
            if let Some(x) = bad {
                v[if nan { 5 } else { 17 }] = x;
            }
            let grads = HostData::from_f64(d, &v);
            (
                Op::Unscale,
                vec![HostData::F32(vec![1.0 / 1024.0])],
                vec![
                    // NaN gradients stay NaN, which never compares equal: check the flag only.
                    if nan {
                        Out::ignored("grads", grads)
                    } else {
                        Out::init("grads", grads)
                    },
                    Out::init("found_inf", HostData::F32(vec![0.0])),
                ],
                tol,
            )
        });
    }
    if dtype == DType::F32 {
        let p = ScaleUpdateParams {
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 3,
            ..ScaleUpdateParams::default()
        };
        // Megatron-LM's options: 3 overflows tolerated, a floor of 32768.
        let h = ScaleUpdateParams {
            hysteresis: 3,
            min_scale: 32768.0,
            ..p
        };
        for (label, p, found, tracker) in [
            ("clean step", p, 0.0, vec![0]),
            ("clean step completes the interval (grow)", p, 0.0, vec![2]),
            ("overflow (back off)", p, 1.0, vec![1]),
            ("hysteresis: 2nd overflow of 3 (keep)", h, 1.0, vec![1, 1]),
            (
                "hysteresis: 3rd overflow of 3 (back off)",
                h,
                1.0,
                vec![1, 2],
            ),
            (
                "hysteresis: growth resets the overflow count",
                h,
                0.0,
                vec![2, 2],
            ),
            (
                "min scale: a backoff stops at the floor",
                h,
                1.0,
                vec![0, 7],
            ),
        ] {
            let start = if label.starts_with("min scale") {
                40000.0
            } else {
                65536.0
            };
            b.add("update_loss_scale", label, |_, _| {
                (
                    Op::UpdateScale(p),
                    vec![HostData::F32(vec![found])],
                    vec![
                        Out::init("scale", HostData::F32(vec![start])),
                        Out::init("growth_tracker", HostData::I32(tracker.clone())),
                    ],
                    Tol::EXACT,
                )
            });
        }
    }

    // ---- mixed precision: gemm into f32, AdamW with master weights, clipping -------
    crate::mixed::add_cases(&mut b, dtype, large);
    crate::multi::add_cases(&mut b, dtype);

    // ---- attention (composite of gemm, causal softmax, gemm) ------------------------
    let mut attns = vec![(1usize, 1usize, 4usize), (6, 13, 8)];
    if large {
        attns.push((2, 33, 16));
        attns.push((4, 64, 32));
    }
    for (bh, t, dh) in attns {
        let a = Attn {
            bh,
            t,
            d: dh,
            scale: 1.0 / (dh as f32).sqrt(),
        };
        let label = format!("bh={bh} T={t} d={dh} causal");
        let n = bh * t * dh;
        b.add("attention", label.clone(), |g, d| {
            (
                Op::Attention(a),
                vec![
                    g.data(d, n, -1.0, 1.0),
                    g.data(d, n, -1.0, 1.0),
                    g.data(d, n, -1.0, 1.0),
                ],
                vec![Out::poison("out", d, n)],
                tol.times(6.0),
            )
        });
        b.add("attention_backward", label, |g, d| {
            (
                Op::AttentionBackward(a),
                vec![
                    g.data(d, n, -1.0, 1.0),
                    g.data(d, n, -1.0, 1.0),
                    g.data(d, n, -1.0, 1.0),
                    g.data(d, n, -1.0, 1.0),
                ],
                vec![
                    Out::poison("dq", d, n),
                    Out::poison("dk", d, n),
                    Out::poison("dv", d, n),
                ],
                tol.times(8.0),
            )
        });
    }

    b.out
}

async fn execute<X: Backend>(x: &X, case: &Case) -> Result<Vec<HostData>> {
    let ins = case
        .inputs
        .iter()
        .map(|h| x.upload(h))
        .collect::<Result<Vec<_>>>()?;
    let mut outs = case
        .outputs
        .iter()
        .map(|o| x.upload(&o.init))
        .collect::<Result<Vec<_>>>()?;
    case.op.run(x, &ins, &mut outs)?;
    let mut res = Vec::with_capacity(outs.len());
    for o in &outs {
        res.push(x.read(o).await?);
    }
    Ok(res)
}

pub(crate) async fn run_case<B: Backend, R: Backend>(b: &B, r: &R, case: &Case) -> Outcome {
    let want = match execute(r, case).await {
        Ok(v) => v,
        Err(e) => return Outcome::Fail(format!("the reference failed: {e}")),
    };
    let got = match execute(b, case).await {
        Ok(v) => v,
        Err(e) => return Outcome::Fail(format!("error: {e}")),
    };
    let mut worst = 0.0f64;
    for (i, out) in case.outputs.iter().enumerate() {
        if !out.compared {
            continue;
        }
        let result = match out.codes {
            true => compare_codes(&got[i], &want[i]),
            false => compare(&got[i], &want[i], case.tol),
        };
        match result {
            Ok(w) => worst = worst.max(w),
            Err(m) => return Outcome::Fail(format!("{}: {m}", out.name)),
        }
    }
    Outcome::Pass { worst }
}
