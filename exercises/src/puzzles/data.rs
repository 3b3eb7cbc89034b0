//! The puzzles as data: no wgpu here (this module compiles for wasm32).
//!
//! Conventions shared by every puzzle: inputs are f32 storage buffers bound at 0, 1, …
//! in the order of [`Puzzle::inputs`], the output is the next binding, zero-filled
//! before the dispatch. Inputs are small random integers (0 to 9), so every reference
//! is exact in f32 and a correct kernel matches it exactly.

/// One puzzle.
#[derive(Debug, Clone, Copy)]
pub struct Puzzle {
    /// `p01_map`: the file name of its WGSL and its test's name.
    pub id: &'static str,
    /// A short title.
    pub title: &'static str,
    /// What the kernel must compute, in a sentence or two.
    pub task: &'static str,
    /// The WGSL the reader edits (`exercises/src/puzzles/wgsl/ID.wgsl`): the whole kernel
    /// with an empty body between the `your code` markers.
    pub stub: &'static str,
    /// The reference solution (`exercises/src/puzzles/wgsl/solutions/ID.wgsl`).
    pub solution: &'static str,
    /// `@workgroup_size` of the kernel (the source declares the same).
    pub workgroup_size: [u32; 3],
    /// Workgroups dispatched in x, y, z.
    pub workgroups: [u32; 3],
    /// Lengths of the input buffers, in binding order.
    pub inputs: &'static [usize],
    /// Length of the output buffer.
    pub output_len: usize,
    /// The CPU reference: inputs to the expected output.
    pub reference: fn(&[Vec<f32>]) -> Vec<f32>,
    /// Global-memory accesses allowed per invocation.
    pub budget: Budget,
    /// A nudge for a reader who is stuck, short of the answer.
    pub tip: &'static str,
}

/// Global-memory (storage buffer) element accesses one invocation may make: what the
/// puzzle's solution needs, so that a kernel reading `a` again for every partial sum,
/// where shared memory would read it once, fails although its answer is right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Element reads.
    pub reads: u32,
    /// Element writes (`+=` is a read and a write).
    pub writes: u32,
}

/// Each puzzle's [`Puzzle::tip`].
const TIPS: [(&str, &str); 17] = [
    (
        "p01_map",
        "One invocation per element: `local.x` is the index, and that is all you need.",
    ),
    (
        "p02_zip",
        "Two inputs at the same index: each invocation reads one element of each.",
    ),
    (
        "p03_guards",
        "There are more invocations than elements: compare the index with the size before touching memory.",
    ),
    (
        "p04_map_2d",
        "The workgroup is larger than the matrix: guard both coordinates, then turn (row, column) into a row-major index.",
    ),
    (
        "p05_broadcast",
        "Each input is indexed by one coordinate only: `a` by the row, `b` by the column.",
    ),
    (
        "p06_blocks",
        "Several workgroups: an element's index is the workgroup's id times its size plus the local id (or `global_invocation_id`).",
    ),
    (
        "p07_blocks_2d",
        "Puzzle 6 in two dimensions, guarded as in puzzle 4.",
    ),
    (
        "p08_shared",
        "Write to `cache`, wait with `workgroupBarrier()` until every invocation has, then read. Each workgroup has its own `cache`.",
    ),
    (
        "p09_pooling",
        "Each element is needed by three invocations: load it once into shared memory and sum the neighbours from there. Mind the first two positions.",
    ),
    (
        "p10_dot",
        "Products into shared memory, then halve the active invocations each round. Every invocation reaches every barrier: keep it outside the `if`.",
    ),
    (
        "p11_conv1d",
        "Stage the part of `a` the workgroup needs in shared memory; positions past the end count as zero.",
    ),
    (
        "p12_prefix_sum",
        "In round k every element adds the one 2^k before it. All reads of a round must happen before any write: a barrier between them.",
    ),
    (
        "p13_axis_sum",
        "`workgroup_id.y` is the row. Eight invocations cover six columns: the others contribute zero to the reduction.",
    ),
    (
        "p14_matmul",
        "Walk the shared dimension tile by tile: each invocation loads one element of each tile, barrier, accumulate, barrier before the next load.",
    ),
    (
        "p15_softmax_shift",
        "Puzzle 10's tree with `max` for `+`. Keep your own `a[i]` in a local: you need it again at the end.",
    ),
    (
        "p16_mean_var",
        "Two reductions share `cache`: every invocation must have read the mean before anyone overwrites `cache[0]`.",
    ),
    (
        "p17_transpose",
        "Neighbours differ in x: read `a` at row y, column x; write `out` at row y, column x, which is `a`'s row x, column y, from the tile.",
    ),
];

/// Each puzzle's [`Budget`], (reads, writes) per invocation, as its solution uses them.
const BUDGETS: [(&str, u32, u32); 17] = [
    ("p01_map", 1, 1),
    ("p02_zip", 2, 1),
    ("p03_guards", 1, 1),
    ("p04_map_2d", 1, 1),
    ("p05_broadcast", 2, 1),
    ("p06_blocks", 1, 1),
    ("p07_blocks_2d", 1, 1),
    ("p08_shared", 1, 1),
    ("p09_pooling", 1, 1),
    ("p10_dot", 2, 1),
    ("p11_conv1d", 6, 1),
    ("p12_prefix_sum", 1, 1),
    ("p13_axis_sum", 1, 1),
    ("p14_matmul", 4, 1),
    ("p15_softmax_shift", 1, 1),
    ("p16_mean_var", 1, 2),
    ("p17_transpose", 1, 1),
];

/// The line that opens the reader's part of a kernel.
pub const BEGIN_MARKER: &str = "// ---- your code: begin ----";
/// The line that closes it.
pub const END_MARKER: &str = "// ---- your code: end ----";

impl Puzzle {
    /// The source the checks run: the stub, or the solution with the `solutions` feature.
    pub fn source(&self) -> &'static str {
        if cfg!(feature = "solutions") {
            self.solution
        } else {
            self.stub
        }
    }

    /// The file a reader edits, relative to the repository root.
    pub fn file(&self) -> String {
        format!("exercises/src/puzzles/wgsl/{}.wgsl", self.id)
    }

    /// Random inputs (integers 0 to 9) from `seed`, one vector per input binding.
    pub fn random_inputs(&self, seed: u64) -> Vec<Vec<f32>> {
        // xorshift64*: a few lines, no dependency, and the same on every target.
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % 10
        };
        self.inputs
            .iter()
            .map(|&n| (0..n).map(|_| next() as f32).collect())
            .collect()
    }

    /// The part of `source` outside the reader's markers (to check a stub and its
    /// solution declare the same kernel), or `None` if the markers are missing.
    pub fn frame(source: &str) -> Option<(String, String)> {
        let b = source.find(BEGIN_MARKER)? + BEGIN_MARKER.len();
        let e = source.find(END_MARKER)?;
        (b <= e).then(|| (source[..b].to_string(), source[e..].to_string()))
    }
}

fn map_add10(x: &[Vec<f32>]) -> Vec<f32> {
    x[0].iter().map(|v| v + 10.0).collect()
}

fn zip_add(x: &[Vec<f32>]) -> Vec<f32> {
    x[0].iter().zip(&x[1]).map(|(a, b)| a + b).collect()
}

fn broadcast(x: &[Vec<f32>]) -> Vec<f32> {
    x[0].iter()
        .flat_map(|a| x[1].iter().map(move |b| a + b))
        .collect()
}

fn pooling(x: &[Vec<f32>]) -> Vec<f32> {
    let a = &x[0];
    (0..a.len())
        .map(|i| a[i.saturating_sub(2)..=i].iter().sum())
        .collect()
}

fn dot(x: &[Vec<f32>]) -> Vec<f32> {
    vec![x[0].iter().zip(&x[1]).map(|(a, b)| a * b).sum()]
}

fn conv1d(x: &[Vec<f32>]) -> Vec<f32> {
    let (a, b) = (&x[0], &x[1]);
    (0..a.len())
        .map(|i| {
            b.iter()
                .enumerate()
                .filter(|(j, _)| i + j < a.len())
                .map(|(j, w)| a[i + j] * w)
                .sum()
        })
        .collect()
}

fn prefix_sum(x: &[Vec<f32>]) -> Vec<f32> {
    x[0].iter()
        .scan(0.0, |acc, v| {
            *acc += v;
            Some(*acc)
        })
        .collect()
}

fn axis_sum(x: &[Vec<f32>]) -> Vec<f32> {
    x[0].chunks(6).map(|row| row.iter().sum()).collect()
}

fn softmax_shift(x: &[Vec<f32>]) -> Vec<f32> {
    let m = x[0].iter().copied().fold(f32::NEG_INFINITY, f32::max);
    x[0].iter().map(|v| v - m).collect()
}

/// Exact in f32 for the puzzles' inputs (small integers, divided by 8).
fn mean_var(x: &[Vec<f32>]) -> Vec<f32> {
    let n = x[0].len() as f32;
    let mean = x[0].iter().sum::<f32>() / n;
    let var = x[0].iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    vec![mean, var]
}

fn transpose4(x: &[Vec<f32>]) -> Vec<f32> {
    (0..16).map(|i| x[0][(i % 4) * 4 + i / 4]).collect()
}

fn matmul5(x: &[Vec<f32>]) -> Vec<f32> {
    let n = 5;
    let (a, b) = (&x[0], &x[1]);
    let mut c = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            c[i * n + j] = (0..n).map(|q| a[i * n + q] * b[q * n + j]).sum();
        }
    }
    c
}

macro_rules! wgsl {
    ($id:literal) => {
        (
            include_str!(concat!("wgsl/", $id, ".wgsl")),
            include_str!(concat!("wgsl/solutions/", $id, ".wgsl")),
        )
    };
}

/// Builds a puzzle from its id, sources and launch shape.
#[allow(clippy::too_many_arguments)]
const fn puzzle(
    id: &'static str,
    title: &'static str,
    task: &'static str,
    (stub, solution): (&'static str, &'static str),
    workgroup_size: [u32; 3],
    workgroups: [u32; 3],
    inputs: &'static [usize],
    output_len: usize,
    reference: fn(&[Vec<f32>]) -> Vec<f32>,
) -> Puzzle {
    Puzzle {
        id,
        title,
        task,
        stub,
        solution,
        workgroup_size,
        workgroups,
        inputs,
        output_len,
        reference,
        // Set from `BUDGETS` and `TIPS` by `all`.
        budget: Budget {
            reads: u32::MAX,
            writes: u32::MAX,
        },
        tip: "",
    }
}

/// Every puzzle, in order.
pub fn all() -> Vec<Puzzle> {
    let mut all = puzzles();
    for p in &mut all {
        if let Some(&(_, reads, writes)) = BUDGETS.iter().find(|b| b.0 == p.id) {
            p.budget = Budget { reads, writes };
        }
        if let Some(&(_, tip)) = TIPS.iter().find(|t| t.0 == p.id) {
            p.tip = tip;
        }
    }
    all
}

fn puzzles() -> Vec<Puzzle> {
    vec![
        puzzle(
            "p01_map",
            "Map",
            "out[i] = a[i] + 10, one invocation per element.",
            wgsl!("p01_map"),
            [4, 1, 1],
            [1, 1, 1],
            &[4],
            4,
            map_add10,
        ),
        puzzle(
            "p02_zip",
            "Zip",
            "out[i] = a[i] + b[i].",
            wgsl!("p02_zip"),
            [4, 1, 1],
            [1, 1, 1],
            &[4, 4],
            4,
            zip_add,
        ),
        puzzle(
            "p03_guards",
            "Guards",
            "out[i] = a[i] + 10 with more invocations than elements.",
            wgsl!("p03_guards"),
            [8, 1, 1],
            [1, 1, 1],
            &[4],
            4,
            map_add10,
        ),
        puzzle(
            "p04_map_2d",
            "Map 2D",
            "out = a + 10 for a 2×2 matrix on a 3×3 workgroup.",
            wgsl!("p04_map_2d"),
            [3, 3, 1],
            [1, 1, 1],
            &[4],
            4,
            map_add10,
        ),
        puzzle(
            "p05_broadcast",
            "Broadcast",
            "out[r][c] = a[r] + b[c]: a column plus a row.",
            wgsl!("p05_broadcast"),
            [3, 3, 1],
            [1, 1, 1],
            &[2, 2],
            4,
            broadcast,
        ),
        puzzle(
            "p06_blocks",
            "Blocks",
            "out[i] = a[i] + 10 for 9 elements in workgroups of 4.",
            wgsl!("p06_blocks"),
            [4, 1, 1],
            [3, 1, 1],
            &[9],
            9,
            map_add10,
        ),
        puzzle(
            "p07_blocks_2d",
            "Blocks 2D",
            "out = a + 10 for a 5×5 matrix, 3×3 workgroups in a 2×2 grid.",
            wgsl!("p07_blocks_2d"),
            [3, 3, 1],
            [2, 2, 1],
            &[25],
            25,
            map_add10,
        ),
        puzzle(
            "p08_shared",
            "Shared memory",
            "out[i] = a[i] + 10 through workgroup memory and a barrier.",
            wgsl!("p08_shared"),
            [4, 1, 1],
            [2, 1, 1],
            &[8],
            8,
            map_add10,
        ),
        puzzle(
            "p09_pooling",
            "Pooling",
            "out[i] = a[i-2] + a[i-1] + a[i], staged in shared memory.",
            wgsl!("p09_pooling"),
            [8, 1, 1],
            [1, 1, 1],
            &[8],
            8,
            pooling,
        ),
        puzzle(
            "p10_dot",
            "Dot product",
            "out[0] = Σ a[i]·b[i], a tree reduction in shared memory.",
            wgsl!("p10_dot"),
            [8, 1, 1],
            [1, 1, 1],
            &[8, 8],
            1,
            dot,
        ),
        puzzle(
            "p11_conv1d",
            "1D convolution",
            "out[i] = Σ_j a[i+j]·b[j], zero past the end.",
            wgsl!("p11_conv1d"),
            [8, 1, 1],
            [1, 1, 1],
            &[6, 3],
            6,
            conv1d,
        ),
        puzzle(
            "p12_prefix_sum",
            "Prefix sum",
            "out[i] = a[0] + … + a[i], in log₂ n rounds.",
            wgsl!("p12_prefix_sum"),
            [8, 1, 1],
            [1, 1, 1],
            &[8],
            8,
            prefix_sum,
        ),
        puzzle(
            "p13_axis_sum",
            "Axis sum",
            "out[r] = the sum of row r of a 4×6 matrix, a workgroup per row.",
            wgsl!("p13_axis_sum"),
            [8, 1, 1],
            [1, 4, 1],
            &[24],
            4,
            axis_sum,
        ),
        puzzle(
            "p14_matmul",
            "Matmul",
            "out = a·b for 5×5 matrices in 3×3 shared-memory tiles.",
            wgsl!("p14_matmul"),
            [3, 3, 1],
            [2, 2, 1],
            &[25, 25],
            25,
            matmul5,
        ),
        puzzle(
            "p15_softmax_shift",
            "Softmax's shift",
            "out[i] = a[i] − max(a): a max reduction, then every invocation reads it.",
            wgsl!("p15_softmax_shift"),
            [8, 1, 1],
            [1, 1, 1],
            &[8],
            8,
            softmax_shift,
        ),
        puzzle(
            "p16_mean_var",
            "Mean and variance",
            "out = [mean(a), mean((a − mean)²)]: LayerNorm's two reductions, one after the other.",
            wgsl!("p16_mean_var"),
            [8, 1, 1],
            [1, 1, 1],
            &[8],
            2,
            mean_var,
        ),
        puzzle(
            "p17_transpose",
            "Transpose",
            "out = aᵀ for a 4×4 matrix, both global accesses along rows through a shared tile.",
            wgsl!("p17_transpose"),
            [4, 4, 1],
            [1, 1, 1],
            &[16],
            16,
            transpose4,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_puzzle_has_a_budget_and_a_tip() {
        for p in all() {
            assert!(p.budget.reads < u32::MAX, "{}: no budget", p.id);
            assert!(!p.tip.is_empty(), "{}: no tip", p.id);
        }
        assert_eq!((BUDGETS.len(), TIPS.len()), (all().len(), all().len()));
    }

    /// The stub and the solution declare the same kernel; only the marked body differs,
    /// and the declared workgroup size is the one the checker assumes.
    #[test]
    fn stubs_and_solutions_differ_only_in_the_marked_body() {
        for p in all() {
            let stub = Puzzle::frame(p.stub).unwrap_or_else(|| panic!("{}: markers", p.id));
            let sol = Puzzle::frame(p.solution).unwrap_or_else(|| panic!("{}: markers", p.id));
            assert_eq!(
                stub, sol,
                "{}: stub and solution differ outside the markers",
                p.id
            );
            let [x, y, _] = p.workgroup_size;
            let decl = if y == 1 {
                format!("@workgroup_size({x})")
            } else {
                format!("@workgroup_size({x}, {y})")
            };
            assert!(p.stub.contains(&decl), "{}: expected {decl}", p.id);
        }
    }

    /// Every reference has the declared output length for inputs of the declared sizes.
    #[test]
    fn references_fit_the_declared_sizes() {
        for p in all() {
            let inputs = p.random_inputs(7);
            assert_eq!((p.reference)(&inputs).len(), p.output_len, "{}", p.id);
        }
    }

    #[test]
    fn references_on_known_inputs() {
        let p = all();
        let pool = (p[8].reference)(&[vec![1.0, 2.0, 3.0, 4.0]]);
        assert_eq!(pool, vec![1.0, 3.0, 6.0, 9.0]);
        let conv = (p[10].reference)(&[vec![1.0, 2.0, 3.0], vec![1.0, 10.0]]);
        assert_eq!(conv, vec![21.0, 32.0, 3.0]);
        let scan = (p[11].reference)(&[vec![1.0, 2.0, 3.0]]);
        assert_eq!(scan, vec![1.0, 3.0, 6.0]);
    }
}
