//! The compute device of the live pages: the reader's GPU through WebGPU
//! (`brrr_wgpu::WgpuBackend`), or `brrr_cpu::CpuBackend` compiled to wasm when the
//! browser has no WebGPU. Opened once per tab and shared by the pages.

use brrr_cpu::CpuBackend;
use brrr_wgpu::WgpuBackend;
use std::cell::RefCell;

/// Where the live pages compute.
#[derive(Clone)]
pub enum Device {
    /// WebGPU, with the adapter's description.
    Gpu(WgpuBackend),
    /// The CPU backend in wasm (single-threaded), with why WebGPU was not used.
    Cpu(CpuBackend, String),
}

impl Device {
    /// One line for the banner: the adapter, or why there is none.
    pub fn describe(&self) -> String {
        match self {
            Device::Gpu(g) => {
                let r = g.report();
                format!("{} ({}, {})", r.adapter, r.api, r.device_type)
            }
            Device::Cpu(_, why) => why.clone(),
        }
    }

    /// The banner's state for this device.
    pub fn state(&self) -> crate::app::components::DeviceState {
        match self {
            Device::Gpu(_) => crate::app::components::DeviceState::Gpu(self.describe()),
            Device::Cpu(_, why) => crate::app::components::DeviceState::Cpu(why.clone()),
        }
    }

    /// Whether this is the GPU.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Device::Gpu(_))
    }
}

thread_local! {
    static DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// The tab's device: WebGPU if `navigator.gpu` gives an adapter, else the CPU. `force_cpu`
/// skips WebGPU (the reader's choice) without forgetting a GPU already opened.
pub async fn acquire(force_cpu: bool) -> Device {
    if force_cpu {
        return Device::Cpu(CpuBackend::new(), "The CPU was chosen on this page".into());
    }
    if let Some(d) = DEVICE.with(|d| d.borrow().clone()) {
        return d;
    }
    let d = match WgpuBackend::new().await {
        Ok(g) => {
            // Compile every kernel now, so the first measurement does not time it.
            match g.warm_up() {
                Ok(()) => Device::Gpu(g),
                Err(e) => Device::Cpu(
                    CpuBackend::new(),
                    format!("WebGPU kernels failed to compile ({e})"),
                ),
            }
        }
        Err(e) => Device::Cpu(
            CpuBackend::new(),
            format!("No WebGPU in this browser ({e})"),
        ),
    };
    DEVICE.with(|slot| *slot.borrow_mut() = Some(d.clone()));
    d
}
