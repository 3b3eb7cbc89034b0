//! Runs a puzzle's WGSL on a wgpu adapter (natively: Vulkan, Metal or DX12; Mesa's
//! lavapipe where there is no GPU) and compares its output with the CPU reference.
//!
//! The device is brrr-wgpu's ([`WgpuBackend::device`]); buffers are brrr-wgpu buffers
//! bound in a pipeline built here with an explicit layout, so that a stub that does
//! not use a binding yet still binds.

use super::data::Puzzle;
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
        let err = |e: brrr_backend::Error| e.to_string();
        let (device, queue) = self.gpu.device();
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
        if !errors.is_empty() {
            return Err(format!("the WGSL does not compile: {}", errors.join("; ")));
        }
        let bufs: Vec<WgpuBuffer> = inputs
            .iter()
            .map(|v| self.gpu.upload(&HostData::F32(v.clone())))
            .chain([self.gpu.zeros(DType::F32, puzzle.output_len + OUTPUT_SLACK)])
            .collect::<Result<_, _>>()
            .map_err(err)?;
        let pipeline = pipeline(device, &module, puzzle);
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
        let out = bufs.last().ok_or("no output buffer")?;
        match block_on(self.gpu.read(out)).map_err(err)? {
            HostData::F32(v) => Ok(v),
            other => Err(format!("output read back as {}", other.dtype())),
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
        Ok(())
    }
}

/// A pipeline whose layout binds every input read-only and the output read-write,
/// whether or not the kernel uses them yet.
fn pipeline(
    device: &wgpu::Device,
    module: &wgpu::ShaderModule,
    p: &Puzzle,
) -> wgpu::ComputePipeline {
    let n = p.inputs.len();
    let entries: Vec<wgpu::BindGroupLayoutEntry> = (0..=n)
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

#[cfg(test)]
mod tests {
    //! One test per puzzle, ignored on the stubs like the other exercises.
    use super::test_puzzle;

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
}
