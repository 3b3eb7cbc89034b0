//! [`BackendKind`]: which backend each rank builds.

use brrr_backend::Error;
use serde::{Deserialize, Serialize};

/// The backends a run can use. wgpu and CUDA exist when this crate is built with the
/// features of the same names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// `brrr_cpu::CpuBackend`, the reference (always there).
    #[default]
    Cpu,
    /// `brrr_wgpu::WgpuBackend`: Vulkan, Metal, DX12 or WebGPU.
    Wgpu,
    /// `brrr_cuda::CudaBackend` on the device numbered by the local rank.
    Cuda,
}

impl BackendKind {
    /// The name `--backend` takes.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cuda => "cuda",
        }
    }
}

/// The error for a backend this build lacks.
pub fn not_built(kind: BackendKind) -> Error {
    Error::NoDevice {
        backend: kind.name(),
        reason: format!(
            "this brrr was built without the {0} backend; rebuild with `--features {0}` \
             (e.g. `cargo run --release --features {0} -- ...`)",
            kind.name()
        ),
    }
}
