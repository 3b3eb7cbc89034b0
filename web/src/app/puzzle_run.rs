//! Runs a GPU puzzle's WGSL on brrr-wgpu's WebGPU device, the way the native checker
//! (`brrr_exercises::puzzles::gpu::Checker::run`) does: inputs bound read-only at 0, 1, …,
//! the output next, zero-filled with [`OUTPUT_SLACK`] extra elements, and a pipeline
//! with an explicit layout so that a stub that ignores a binding still binds.
//!
//! Everything from the shader module to the submission runs inside a validation error
//! scope, so a kernel that does not compile (or does not fit the layout) comes back as
//! an `Err` to show in the page, never as an uncaught device error.

use crate::logic::puzzles::OUTPUT_SLACK;
use brrr_backend::{Backend, DType, HostData};
use brrr_exercises::puzzles::Puzzle;
use brrr_exercises::puzzles::count::{AccessCounts, instrument};
use brrr_exercises::puzzles::race;
use brrr_wgpu::{WgpuBackend, WgpuBuffer};

/// Why a run produced no output.
#[derive(Clone, Debug, PartialEq)]
pub enum RunError {
    /// The WGSL does not compile: one line per message, `line L:C: message`.
    Compile(Vec<String>),
    /// It compiled, but WebGPU rejected the pipeline, binding or dispatch, or a buffer failed.
    Gpu(String),
}

/// Runs `wgsl` as `puzzle`'s kernel on `inputs`; returns the whole output buffer,
/// slack included.
pub async fn run_puzzle(
    gpu: &WgpuBackend,
    puzzle: &Puzzle,
    wgsl: &str,
    inputs: &[Vec<f32>],
) -> Result<Vec<f32>, RunError> {
    run(gpu, puzzle, wgsl, inputs, None)
        .await
        .map(|(out, _)| out)
}

/// Runs `wgsl` rewritten to count its global-memory accesses
/// (`brrr_exercises::puzzles::count`) and returns each invocation's reads and writes.
pub async fn count_puzzle(
    gpu: &WgpuBackend,
    puzzle: &Puzzle,
    wgsl: &str,
    inputs: &[Vec<f32>],
) -> Result<AccessCounts, RunError> {
    let inst = instrument(puzzle, wgsl).map_err(RunError::Gpu)?;
    let (_, counters) = run(gpu, puzzle, &inst.wgsl, inputs, Some(2 * inst.invocations)).await?;
    AccessCounts::from_counters(puzzle, &counters).map_err(RunError::Gpu)
}

/// Runs `wgsl` rewritten to log its shared-memory accesses and barriers
/// (`brrr_exercises::puzzles::race`), as the native checker does: `Ok(Some(problem))`
/// names a race or a barrier some invocations skip, `Ok(None)` is clean (or a kernel
/// without workgroup memory), `Err` says why it could not be checked.
pub async fn race_puzzle(
    gpu: &WgpuBackend,
    puzzle: &Puzzle,
    wgsl: &str,
    inputs: &[Vec<f32>],
) -> Result<Option<String>, RunError> {
    if !wgsl.contains("var<workgroup>") {
        return Ok(None);
    }
    let inst = race::instrument(puzzle, wgsl).map_err(RunError::Gpu)?;
    let (_, log) = run(gpu, puzzle, &inst.wgsl, inputs, Some(inst.log_len)).await?;
    Ok(race::find_races(puzzle, &inst, &log).err())
}

/// One dispatch; with `extra = Some(n)`, a zeroed buffer of `n` u32 (access counters,
/// or the race log) is bound after the output and read back too.
async fn run(
    gpu: &WgpuBackend,
    puzzle: &Puzzle,
    wgsl: &str,
    inputs: &[Vec<f32>],
    extra: Option<usize>,
) -> Result<(Vec<f32>, Vec<u32>), RunError> {
    let (device, queue) = gpu.device();
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(puzzle.id),
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let messages = compile_errors(&module.get_compilation_info().await);
    if !messages.is_empty() {
        // The scope holds the same error the messages describe; popping it keeps it
        // from reaching the device's uncaptured-error handler.
        let _ = scope.pop().await;
        return Err(RunError::Compile(messages));
    }
    let gpu_err = |e: brrr_backend::Error| RunError::Gpu(e.to_string());
    let mut bufs: Vec<WgpuBuffer> = Vec::with_capacity(inputs.len() + 2);
    for v in inputs {
        bufs.push(gpu.upload(&HostData::F32(v.clone())).map_err(gpu_err)?);
    }
    let out = gpu
        .zeros(DType::F32, puzzle.output_len + OUTPUT_SLACK)
        .map_err(gpu_err)?;
    bufs.push(out);
    if let Some(n) = extra {
        bufs.push(gpu.zeros(DType::U32, n).map_err(gpu_err)?);
    }
    dispatch(device, queue, &module, puzzle, &bufs);
    if let Some(e) = scope.pop().await {
        return Err(RunError::Gpu(e.to_string()));
    }
    let out = match gpu.read(&bufs[inputs.len()]).await.map_err(gpu_err)? {
        HostData::F32(v) => v,
        other => {
            return Err(RunError::Gpu(format!(
                "output read back as {}",
                other.dtype()
            )));
        }
    };
    let counts = match bufs.get(inputs.len() + 1) {
        None => Vec::new(),
        Some(c) => match gpu.read(c).await.map_err(gpu_err)? {
            HostData::U32(v) => v,
            other => {
                return Err(RunError::Gpu(format!(
                    "counters read back as {}",
                    other.dtype()
                )));
            }
        },
    };
    Ok((out, counts))
}

/// The error messages of a compilation, with their line and column.
fn compile_errors(info: &wgpu::CompilationInfo) -> Vec<String> {
    info.messages
        .iter()
        .filter(|m| m.message_type == wgpu::CompilationMessageType::Error)
        .map(|m| match m.location {
            Some(l) => format!("line {}:{}: {}", l.line_number, l.line_position, m.message),
            None => m.message.clone(),
        })
        .collect()
}

/// Builds the pipeline (every input read-only, the output and any counter buffer
/// read-write), binds `bufs` and submits one dispatch of `puzzle.workgroups`.
fn dispatch(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    module: &wgpu::ShaderModule,
    p: &Puzzle,
    bufs: &[WgpuBuffer],
) {
    let n = p.inputs.len();
    let layout_entries: Vec<wgpu::BindGroupLayoutEntry> = (0..bufs.len())
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
        entries: &layout_entries,
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(p.id),
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(p.id),
        layout: Some(&layout),
        module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let entries: Vec<wgpu::BindGroupEntry> = bufs
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: b.raw().as_entire_binding(),
        })
        .collect();
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(p.id),
        layout: &bgl,
        entries: &entries,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        let [x, y, z] = p.workgroups;
        pass.dispatch_workgroups(x, y, z);
    }
    queue.submit([enc.finish()]);
}
