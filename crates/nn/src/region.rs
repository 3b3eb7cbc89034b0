//! Named regions around layers' passes ([`Backend::begin_region`]): a profiler's trace
//! then shows `h.0 forward`, `h.0.attn backward`, ... with each layer's ops inside, as
//! PyTorch's profiler shows modules. On a backend that does not record regions (all
//! but a profiling wrapper) a region costs one call that returns `false`: its name is
//! never built.

use brrr_backend::Backend;

/// An open region, closed when dropped: at the end of its scope, or on the way out of
/// an early return (`?`), so an error leaves no region open and nested regions close
/// innermost first.
pub(crate) struct Region<'a, B: Backend>(Option<&'a B>);

impl<'a, B: Backend> Region<'a, B> {
    /// Opens a region named `name()` on `backend`, if it records regions.
    pub(crate) fn open(backend: &'a B, name: impl FnOnce() -> String) -> Self {
        if !backend.records_regions() {
            return Region(None);
        }
        backend.begin_region(&name());
        Region(Some(backend))
    }
}

impl<B: Backend> Drop for Region<'_, B> {
    fn drop(&mut self) {
        if let Some(backend) = self.0 {
            backend.end_region();
        }
    }
}
