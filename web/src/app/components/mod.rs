//! Shared components: every page is built from these.

pub mod banner;
pub mod chart;
pub mod controls;
pub mod device_banner;
pub mod gpu_picker;
pub mod page_header;
pub mod stacked_bar;
pub mod stat;

pub use banner::{Banner, BannerKind};
pub use chart::{Chart, Series, SeriesStyle};
pub use controls::{Select, SizeInput, Toggle};
pub use device_banner::{DeviceBanner, DeviceState};
pub use gpu_picker::GpuPicker;
pub use page_header::PageHeader;
pub use stacked_bar::{Segment, StackedBar};
pub use stat::Stat;
