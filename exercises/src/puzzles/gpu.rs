//! Runs a puzzle's WGSL on a wgpu adapter (natively: Vulkan, Metal or DX12; Mesa's
//! lavapipe where there is no GPU) and compares its output with the CPU reference.
//!
//! The device is brrr-wgpu's ([`WgpuBackend::device`]); buffers are brrr-wgpu buffers
//! bound in a pipeline built here with an explicit layout, so that a stub that does
//! not use a binding yet still binds.

use super::count::{AccessCounts, instrument};
use super::data::Puzzle;
use super::race;
use crate::check::Outcome;
use brrr_backend::{Backend, DType, HostData, block_on};
use brrr_wgpu::{WgpuBackend, WgpuBuffer};

/// The environment variable that turns "no wgpu adapter" from a skip into a failure.
pub const REQUIRE_ENV: &str = "BRRR_REQUIRE_WGPU";

/// Zeros after the output's last element: a kernel that writes past the end (a missing
/// guard) lands here and is caught, where WGSL's bounds checks would otherwise hide it.
pub const OUTPUT_SLACK: usize = 64;

/// A wgpu device to run puzzles on.
pub struct Checker {
    gpu: WgpuBackend,
}

impl Checker {
    /// Opens brrr-wgpu's device; `Err` says why there is none.
    pub fn new() -> Result<Self, String> {
        WgpuBackend::new_blocking()
            .map(|gpu| Checker { gpu })
            .map_err(|e| e.to_string())
    }

    /// The adapter's name, as the driver reports it.
    pub fn adapter(&self) -> &str {
        &self.gpu.report().adapter
    }

    /// Runs `wgsl` as `puzzle`'s kernel on `inputs` and returns the output buffer,
    /// including its [`OUTPUT_SLACK`].
    pub fn run(
        &self,
        puzzle: &Puzzle,
        wgsl: &str,
        inputs: &[Vec<f32>],
    ) -> Result<Vec<f32>, String> {
        self.dispatch(puzzle, wgsl, inputs, None)
            .map(|(out, _)| out)
    }

    /// Runs `wgsl` rewritten by [`instrument`] and returns each invocation's
    /// global-memory reads and writes; `Err` when it cannot be counted.
    pub fn count(
        &self,
        puzzle: &Puzzle,
        wgsl: &str,
        inputs: &[Vec<f32>],
    ) -> Result<AccessCounts, String> {
        let inst = instrument(puzzle, wgsl)?;
        let (_, counters) =
            self.dispatch(puzzle, &inst.wgsl, inputs, Some(2 * inst.invocations))?;
        AccessCounts::from_counters(puzzle, &counters)
    }

    /// Runs `wgsl` rewritten by [`race::instrument`] and checks its shared-memory
    /// accesses and barriers ([`race::find_races`]); `Ok` too for a kernel without
    /// workgroup memory, which has none to race on.
    pub fn races(&self, puzzle: &Puzzle, wgsl: &str, inputs: &[Vec<f32>]) -> Result<(), String> {
        if !wgsl.contains("var<workgroup>") {
            return Ok(());
        }
        let inst = race::instrument(puzzle, wgsl)?;
        let (_, log) = self.dispatch(puzzle, &inst.wgsl, inputs, Some(inst.log_len))?;
        race::find_races(puzzle, &inst, &log)
    }

    /// One dispatch; with `extra = Some(n)`, a zeroed buffer of `n` u32 (access counters,
    /// or the race log) is bound after the output and read back too.
    fn dispatch(
        &self,
        puzzle: &Puzzle,
        wgsl: &str,
        inputs: &[Vec<f32>],
        extra: Option<usize>,
    ) -> Result<(Vec<f32>, Vec<u32>), String> {
        let err = |e: brrr_backend::Error| e.to_string();
        let (device, queue) = self.gpu.device();
        let module = self.compile(puzzle, wgsl)?;
        let mut bufs: Vec<WgpuBuffer> = inputs
            .iter()
            .map(|v| self.gpu.upload(&HostData::F32(v.clone())))
            .chain([self.gpu.zeros(DType::F32, puzzle.output_len + OUTPUT_SLACK)])
            .collect::<Result<_, _>>()
            .map_err(err)?;
        if let Some(n) = extra {
            bufs.push(self.gpu.zeros(DType::U32, n).map_err(err)?);
        }
        let pipeline = pipeline(device, &module, puzzle, extra.is_some());
        let entries: Vec<wgpu::BindGroupEntry> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.raw().as_entire_binding(),
            })
            .collect();
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(puzzle.id),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let mut enc = device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            let [x, y, z] = puzzle.workgroups;
            pass.dispatch_workgroups(x, y, z);
        }
        queue.submit([enc.finish()]);
        // Reading waits for the dispatch; any error wgpu reported comes back here.
        let out = match block_on(self.gpu.read(&bufs[inputs.len()])).map_err(err)? {
            HostData::F32(v) => v,
            other => return Err(format!("output read back as {}", other.dtype())),
        };
        let counts = match extra {
            None => Vec::new(),
            Some(_) => match block_on(self.gpu.read(&bufs[inputs.len() + 1])).map_err(err)? {
                HostData::U32(v) => v,
                other => return Err(format!("counters read back as {}", other.dtype())),
            },
        };
        Ok((out, counts))
    }

    /// Compiles `wgsl`; `Err` lists the compiler's errors with line and column.
    fn compile(&self, puzzle: &Puzzle, wgsl: &str) -> Result<wgpu::ShaderModule, String> {
        let (device, _) = self.gpu.device();
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(puzzle.id),
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        });
        let errors: Vec<String> = block_on(module.get_compilation_info())
            .messages
            .into_iter()
            .filter(|m| m.message_type == wgpu::CompilationMessageType::Error)
            .map(|m| match m.location {
                Some(l) => format!("line {}:{}: {}", l.line_number, l.line_position, m.message),
                None => m.message,
            })
            .collect();
        if errors.is_empty() {
            Ok(module)
        } else {
            Err(format!("the WGSL does not compile: {}", errors.join("; ")))
        }
    }

    /// Runs `wgsl` on random inputs from `seed` and compares with the reference.
    pub fn check(&self, puzzle: &Puzzle, wgsl: &str, seed: u64) -> Outcome {
        let inputs = puzzle.random_inputs(seed);
        let want = (puzzle.reference)(&inputs);
        let mut got = self.run(puzzle, wgsl, &inputs)?;
        let slack = got.split_off(puzzle.output_len.min(got.len()));
        if let Some(i) = slack.iter().position(|&v| v != 0.0) {
            return Err(format!(
                "an invocation wrote out[{}] = {}, past the end of `out` ({} elements): \
                 guard the invocations that have no element",
                puzzle.output_len + i,
                slack[i],
                puzzle.output_len
            ));
        }
        if got != want {
            return Err(format!(
                "inputs {inputs:?}: output {got:?}, expected {want:?}"
            ));
        }
        // The right answer by luck is not enough: the order the kernel promises.
        self.races(puzzle, wgsl, &inputs)?;
        // Nor the right answer by too many global accesses. A kernel that cannot be
        // counted (see `count`) is not held to the budget.
        match self.count(puzzle, wgsl, &inputs) {
            Ok(c) => c.over_budget(puzzle.budget).map_or(Ok(()), Err),
            Err(_) => Ok(()),
        }
    }
}

/// A pipeline whose layout binds every input read-only and the output read-write,
/// whether or not the kernel uses them yet; with `counted`, the access counters after
/// the output (read-write).
fn pipeline(
    device: &wgpu::Device,
    module: &wgpu::ShaderModule,
    p: &Puzzle,
    counted: bool,
) -> wgpu::ComputePipeline {
    let n = p.inputs.len();
    let last = n + usize::from(counted);
    let entries: Vec<wgpu::BindGroupLayoutEntry> = (0..=last)
        .map(|i| wgpu::BindGroupLayoutEntry {
            binding: i as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: i < n },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(p.id),
        entries: &entries,
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(p.id),
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(p.id),
        layout: Some(&layout),
        module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// What a puzzle test does: check the puzzle's [`Puzzle::source`] (the stub, or the
/// solution with `--features solutions`) on fresh inputs; with no adapter, print
/// SKIPPED by name, or fail when [`REQUIRE_ENV`] is `1`.
pub fn test_puzzle(id: &str) {
    let puzzle = super::all()
        .into_iter()
        .find(|p| p.id == id)
        .unwrap_or_else(|| panic!("no puzzle {id}"));
    let checker = match Checker::new() {
        Ok(c) => c,
        Err(why) if std::env::var(REQUIRE_ENV).as_deref() != Ok("1") => {
            brrr_backend::skip::report_skipped(
                &format!("puzzle {id}"),
                &format!("no wgpu adapter: {why}"),
            );
            return;
        }
        Err(why) => panic!("puzzle {id}: no wgpu adapter and {REQUIRE_ENV}=1: {why}"),
    };
    let seed = crate::check::seed();
    if let Err(e) = checker.check(&puzzle, puzzle.source(), seed) {
        panic!("{} on {}: {e}", puzzle.file(), checker.adapter());
    }
}

/// Counts every puzzle's *solution* (whatever the feature): it must compute the same
/// output instrumented as plain, and the simplest puzzles' counts are known.
pub fn test_access_counts() {
    let checker = match Checker::new() {
        Ok(c) => c,
        Err(why) if std::env::var(REQUIRE_ENV).as_deref() != Ok("1") => {
            brrr_backend::skip::report_skipped(
                "puzzle access counts",
                &format!("no wgpu adapter: {why}"),
            );
            return;
        }
        Err(why) => panic!("access counts: no wgpu adapter and {REQUIRE_ENV}=1: {why}"),
    };
    let seed = crate::check::seed();
    for p in super::all() {
        let inputs = p.random_inputs(seed);
        let plain = checker
            .run(&p, p.solution, &inputs)
            .expect("the solution runs");
        let inst = instrument(&p, p.solution).unwrap_or_else(|e| panic!("{}: {e}", p.id));
        let counts = checker
            .count(&p, p.solution, &inputs)
            .unwrap_or_else(|e| panic!("{}: {e}", p.id));
        let (out, _) = checker
            .dispatch(&p, &inst.wgsl, &inputs, Some(2 * inst.invocations))
            .expect("the instrumented solution runs");
        assert_eq!(out, plain, "{}: instrumenting changed the output", p.id);
        println!("{}: {}", p.id, counts.summary());
        let (r, w) = (counts.total_reads(), counts.total_writes());
        match p.id {
            // One read of `a` and one write of `out` per element, nothing more.
            "p01_map" | "p08_shared" => {
                assert!(counts.reads.iter().all(|&r| r == 1), "{}: {counts:?}", p.id);
                assert!(
                    counts.writes.iter().all(|&w| w == 1),
                    "{}: {counts:?}",
                    p.id
                );
            }
            // Guards: the invocations past the end touch nothing.
            "p03_guards" => {
                assert_eq!(counts.reads, [1, 1, 1, 1, 0, 0, 0, 0], "{counts:?}");
                assert_eq!(counts.writes, [1, 1, 1, 1, 0, 0, 0, 0], "{counts:?}");
            }
            "p02_zip" => assert_eq!((r, w), (2 * p.output_len as u64, p.output_len as u64)),
            // Every solution writes each output element at least once.
            _ => assert!(w >= p.output_len as u64 && r > 0, "{}: {counts:?}", p.id),
        }
    }
}

/// The race checker on `p10_dot`'s solution broken the two ways the book warns about:
/// without the barrier after filling `cache`, and with the tree's barrier inside its
/// `if`. Each must fail by name, whether or not the adapter printed the right sum; and a
/// right, race-free kernel over its global-memory budget fails by name too.
pub fn test_race_checker() {
    let checker = match Checker::new() {
        Ok(c) => c,
        Err(why) if std::env::var(REQUIRE_ENV).as_deref() != Ok("1") => {
            brrr_backend::skip::report_skipped(
                "puzzle race checker",
                &format!("no wgpu adapter: {why}"),
            );
            return;
        }
        Err(why) => panic!("race checker: no wgpu adapter and {REQUIRE_ENV}=1: {why}"),
    };
    let p = super::all()
        .into_iter()
        .find(|p| p.id == "p10_dot")
        .expect("p10_dot");
    let fill = "cache[i] = a[i] * b[i];\n    workgroupBarrier();";
    let tree = "cache[i] = cache[i] + cache[i + stride];\n        }\n        workgroupBarrier();";
    assert!(p.solution.contains(fill) && p.solution.contains(tree));
    let broken = [
        (
            p.solution.replace(fill, "cache[i] = a[i] * b[i];"),
            "shared-memory race on cache[",
        ),
        (
            p.solution.replace(
                tree,
                "cache[i] = cache[i] + cache[i + stride];\n            workgroupBarrier();\n        }",
            ),
            "divergent control flow",
        ),
    ];
    let seed = crate::check::seed();
    // Right, race-free, and over the budget: invocation 0 sums a·b itself.
    let greedy = p.solution.replace(
        "out[0] = cache[0];",
        "var s = 0.0;\n        for (var k = 0u; k < SIZE; k++) { s += a[k] * b[k]; }\n        out[0] = s;",
    );
    let e = checker.check(&p, &greedy, seed).unwrap_err();
    assert!(e.contains("over the budget of 2"), "{e}");
    for (wgsl, want) in broken {
        let inputs = p.random_inputs(seed);
        let right = checker
            .run(&p, &wgsl, &inputs)
            .is_ok_and(|out| out[..p.output_len] == (p.reference)(&inputs)[..]);
        let e = checker.check(&p, &wgsl, seed).unwrap_err();
        println!(
            "{want}: the output was {}; {e}",
            if right { "right" } else { "wrong" }
        );
        assert!(e.contains(want), "{e}");
    }
}

#[cfg(test)]
mod tests {
    //! One test per puzzle, ignored on the stubs like the other exercises.
    use super::test_puzzle;

    #[test]
    fn access_counts_of_the_solutions() {
        super::test_access_counts();
    }

    #[test]
    fn the_race_checker_catches_a_missing_barrier_and_a_divergent_one() {
        super::test_race_checker();
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p01_map() {
        test_puzzle("p01_map");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p02_zip() {
        test_puzzle("p02_zip");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p03_guards() {
        test_puzzle("p03_guards");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p04_map_2d() {
        test_puzzle("p04_map_2d");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p05_broadcast() {
        test_puzzle("p05_broadcast");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p06_blocks() {
        test_puzzle("p06_blocks");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p07_blocks_2d() {
        test_puzzle("p07_blocks_2d");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p08_shared() {
        test_puzzle("p08_shared");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p09_pooling() {
        test_puzzle("p09_pooling");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p10_dot() {
        test_puzzle("p10_dot");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p11_conv1d() {
        test_puzzle("p11_conv1d");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p12_prefix_sum() {
        test_puzzle("p12_prefix_sum");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p13_axis_sum() {
        test_puzzle("p13_axis_sum");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p14_matmul() {
        test_puzzle("p14_matmul");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p15_softmax_shift() {
        test_puzzle("p15_softmax_shift");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p16_mean_var() {
        test_puzzle("p16_mean_var");
    }

    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "a puzzle: `cargo run -p brrr-exercises`"
    )]
    fn p17_transpose() {
        test_puzzle("p17_transpose");
    }
}
