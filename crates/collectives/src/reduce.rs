//! Reduction operators, and the reference reduction every algorithm is tested against.

/// How values from different ranks combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReduceOp {
    /// Sum.
    #[default]
    Sum,
    /// Sum divided by the number of ranks (the data-parallel gradient mean).
    Avg,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
}

impl ReduceOp {
    /// All operators.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    /// `acc[i] = acc[i] ⊕ x[i]`. Avg sums here; [`ReduceOp::finish`] divides once at the
    /// end, so that partial sums stay exact sums while they travel.
    pub fn combine_into(self, acc: &mut [f32], x: &[f32]) {
        match self {
            ReduceOp::Sum | ReduceOp::Avg => acc.iter_mut().zip(x).for_each(|(a, b)| *a += b),
            ReduceOp::Max => acc.iter_mut().zip(x).for_each(|(a, b)| *a = a.max(*b)),
            ReduceOp::Min => acc.iter_mut().zip(x).for_each(|(a, b)| *a = a.min(*b)),
        }
    }

    /// Applied once to a fully reduced buffer: divides by `world` for Avg.
    pub fn finish(self, buf: &mut [f32], world: usize) {
        if self == ReduceOp::Avg {
            let inv = 1.0 / world as f32;
            buf.iter_mut().for_each(|x| *x *= inv);
        }
    }
}

/// The reference: reduces `inputs` (one slice per rank, equal lengths) element by element
/// in f64, rank 0 first. Algorithms reduce in other orders, so compare sums with a
/// tolerance; Max and Min are exact.
pub fn reference_reduce(inputs: &[Vec<f32>], op: ReduceOp) -> Vec<f32> {
    let Some(first) = inputs.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let xs = inputs.iter().map(|v| f64::from(v[i]));
            let r = match op {
                ReduceOp::Sum => xs.sum::<f64>(),
                ReduceOp::Avg => xs.sum::<f64>() / inputs.len() as f64,
                ReduceOp::Max => xs.fold(f64::NEG_INFINITY, f64::max),
                ReduceOp::Min => xs.fold(f64::INFINITY, f64::min),
            };
            r as f32
        })
        .collect()
}
