//! Named regions around layers' passes ([`Backend::begin_region`]): a profiler's trace
//! then shows `h.0 forward`, `h.0.attn backward`, ... with each layer's ops inside, as
//! PyTorch's profiler shows modules. On a backend that does not record regions (all
//! but a profiling wrapper) a region costs one call that returns `false`: its name is
//! never built.

use brrr_backend::{Backend, Result};

/// Runs `f` inside a region named `name()` on `backend`. The region is closed whether
/// `f` succeeds or fails, so an error leaves no region open.
pub(crate) fn in_region<B: Backend, T>(
    backend: &B,
    name: impl FnOnce() -> String,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    if !backend.records_regions() {
        return f();
    }
    backend.begin_region(&name());
    let out = f();
    backend.end_region();
    out
}
