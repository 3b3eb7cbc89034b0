//! Multi-tensor cases: zeroing, the sum of squares and AdamW over a list of buffers of
//! several lengths (empty ones, one element, several of brrr-cuda's 16384-element
//! chunks) and dtypes (the dtype under test beside f32, so a backend that batches by
//! dtype makes more than one group). The reference is brrr-cpu's default: the
//! one-buffer op on each.

use crate::cases::{Builder, Op, Out, adamw_variants};
use crate::compare::{Tol, tolerance};
use brrr_backend::{DType, HostData};

/// Buffer lengths of every list: crossing chunk boundaries, and the trivial ones.
const LENS: [usize; 5] = [40_000, 1, 0, 768, 16_385];

/// One parameter of a multi-tensor AdamW case.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdamWSlot {
    pub(crate) decay: bool,
    pub(crate) master: bool,
}

pub(crate) fn add_cases(b: &mut Builder<'_>, dtype: DType) {
    fill(b);
    if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        sum_squares(b);
    }
    adamw(b, dtype);
}

/// The list's dtypes: the one under test, and f32 at every other position.
fn dtypes(d: DType) -> impl Iterator<Item = DType> {
    (0..LENS.len()).map(move |i| if i.is_multiple_of(2) { d } else { DType::F32 })
}

fn fill(b: &mut Builder<'_>) {
    for value in [0.0, -1.5] {
        b.add(
            "multi_tensor_fill",
            format!("{LENS:?} value={value}"),
            |_, d| {
                let outs = LENS
                    .iter()
                    .zip(dtypes(d))
                    .map(|(&n, dt)| Out::poison("buf", dt, n))
                    .collect();
                (Op::MultiFill(value), vec![], outs, Tol::EXACT)
            },
        );
    }
}

/// Summed in another order than the reference's (per chunk, then over chunks): the f32
/// tolerance scaled by the root of the element count, as a reduction's.
fn sum_squares(b: &mut Builder<'_>) {
    b.add("multi_tensor_sum_squares", format!("{LENS:?}"), |g, d| {
        let ins = LENS
            .iter()
            .zip(dtypes(d))
            .map(|(&n, dt)| g.data(dt, n, -1.0, 1.0))
            .collect();
        let total: usize = LENS.iter().sum();
        let tol = tolerance(DType::F32).times(2.0 + (total as f64).sqrt());
        (
            Op::MultiSumSquares,
            ins,
            vec![Out::poison("sum", DType::F32, 1)],
            tol,
        )
    });
}

/// Elementwise, so each parameter as `adamw` / `adamw_master` updates it alone.
fn adamw(b: &mut Builder<'_>, dtype: DType) {
    // A master needs a 16-bit or f32 compute copy.
    let masters = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    let slots: Vec<AdamWSlot> = LENS
        .iter()
        .enumerate()
        .map(|(i, _)| AdamWSlot {
            decay: i.is_multiple_of(2),
            master: masters && i >= 3,
        })
        .collect();
    for (p, amp, skip, tail) in adamw_variants() {
        let label = format!("{LENS:?} {tail}");
        let slots = slots.clone();
        b.add("multi_tensor_adamw", label, |g, d| {
            let gscale = if amp { 1024.0 } else { 1.0 };
            let mut ins = Vec::new();
            let mut outs = Vec::new();
            for (&n, s) in LENS.iter().zip(&slots) {
                // Beside a master the gradient is f32, as `Param::with_master` keeps it.
                ins.push(g.data(if s.master { DType::F32 } else { d }, n, -gscale, gscale));
                let w = g.data(DType::F32, n, -1.0, 1.0);
                outs.push(Out::init("param", HostData::from_f64(d, &w.to_f64())));
                if s.master {
                    outs.push(Out::init("master", w));
                }
                outs.push(Out::init("m", g.data(DType::F32, n, -0.1, 0.1)));
                outs.push(Out::init("v", g.data(DType::F32, n, 0.0, 0.01)));
            }
            if amp {
                ins.push(HostData::F32(vec![1.0 / 1024.0]));
                ins.push(HostData::F32(vec![if skip { 1.0 } else { 0.0 }]));
            }
            let op = Op::MultiAdamW {
                p,
                slots,
                inv: amp,
                found: amp,
            };
            (op, ins, outs, tolerance(d).times(4.0))
        });
    }
}
