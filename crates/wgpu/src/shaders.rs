//! The WGSL sources in `shaders/`, compiled into the crate with `include_str!`.
//!
//! Each family file holds several kernels, each in a section that starts with a line
//! `// ==== kernel: NAME ====`. A kernel's source is `common.wgsl` followed by its
//! section, with `{{KEY}}` placeholders substituted (the cast kernels use this for their
//! per-dtype load and store functions). The browser demos can use exactly the same text
//! through [`kernel_source`].

use brrr_backend::{Error, Result};

/// Helpers prepended to every kernel: 16-bit float conversions, workgroup reductions.
pub const COMMON: &str = include_str!("../shaders/common.wgsl");

/// The kernel families, one WGSL file each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `elementwise.wgsl`: unary and binary math, axpy, GELU and its backward, fill and
    /// strided copy.
    Elementwise,
    /// `cast.wgsl`: dtype conversions, round to nearest even.
    Cast,
    /// `matmul.wgsl`: batched GEMM in four versions (see [`MatmulKernel`](crate::MatmulKernel)).
    Matmul,
    /// `reduce.wgsl`: sum, mean, max and min over the middle axis of `[outer, n, inner]`,
    /// with split forms for few outputs.
    Reduce,
    /// `softmax.wgsl`: row-wise, optionally causal softmax and its backward.
    Softmax,
    /// `layernorm.wgsl`: LayerNorm over the last axis (Ba et al. 2016), forward and
    /// backward.
    LayerNorm,
    /// `embed.wgsl`: token-embedding lookup and its gradient.
    Embed,
    /// `loss.wgsl`: cross-entropy of logits against integer targets, and its gradient.
    Loss,
    /// `optimizer.wgsl`: the fused AdamW step (Loshchilov & Hutter 2019) and gradient
    /// clipping's coefficient.
    Optimizer,
    /// `amp.wgsl`: dynamic loss scaling on the device (unscale with a finite check, scale
    /// update).
    Amp,
}

impl Family {
    /// Every family, one per WGSL file (`common.wgsl` is not one: it is prepended to
    /// every kernel).
    pub const ALL: [Family; 10] = [
        Family::Elementwise,
        Family::Cast,
        Family::Matmul,
        Family::Reduce,
        Family::Softmax,
        Family::LayerNorm,
        Family::Embed,
        Family::Loss,
        Family::Optimizer,
        Family::Amp,
    ];

    /// The file name under `shaders/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise.wgsl",
            Family::Cast => "cast.wgsl",
            Family::Matmul => "matmul.wgsl",
            Family::Reduce => "reduce.wgsl",
            Family::Softmax => "softmax.wgsl",
            Family::LayerNorm => "layernorm.wgsl",
            Family::Embed => "embed.wgsl",
            Family::Loss => "loss.wgsl",
            Family::Optimizer => "optimizer.wgsl",
            Family::Amp => "amp.wgsl",
        }
    }

    /// The whole file, as written.
    pub fn source(self) -> &'static str {
        match self {
            Family::Elementwise => include_str!("../shaders/elementwise.wgsl"),
            Family::Cast => include_str!("../shaders/cast.wgsl"),
            Family::Matmul => include_str!("../shaders/matmul.wgsl"),
            Family::Reduce => include_str!("../shaders/reduce.wgsl"),
            Family::Softmax => include_str!("../shaders/softmax.wgsl"),
            Family::LayerNorm => include_str!("../shaders/layernorm.wgsl"),
            Family::Embed => include_str!("../shaders/embed.wgsl"),
            Family::Loss => include_str!("../shaders/loss.wgsl"),
            Family::Optimizer => include_str!("../shaders/optimizer.wgsl"),
            Family::Amp => include_str!("../shaders/amp.wgsl"),
        }
    }

    /// Names of the kernel sections in this family, in file order.
    pub fn kernels(self) -> Vec<&'static str> {
        self.source().lines().filter_map(section_name).collect()
    }
}

fn section_name(line: &str) -> Option<&str> {
    line.trim()
        .strip_prefix("// ==== kernel:")?
        .strip_suffix("====")
        .map(str::trim)
}

/// The complete WGSL of one kernel: `common.wgsl`, then the section `kernel` of `family`,
/// with each `{{KEY}}` replaced by its value.
pub fn kernel_source(family: Family, kernel: &str, subst: &[(&str, &str)]) -> Result<String> {
    let src = family.source();
    let mut out = String::with_capacity(COMMON.len() + src.len());
    out.push_str(COMMON);
    out.push('\n');
    let mut inside = false;
    let mut found = false;
    for line in src.lines() {
        if let Some(name) = section_name(line) {
            inside = name == kernel;
            found |= inside;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !found {
        return Err(Error::invalid(
            "wgpu kernel_source",
            format!("no kernel '{kernel}' in shaders/{}", family.file_name()),
        ));
    }
    for (k, v) in subst {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    if let Some(pos) = out.find("{{") {
        let end = out[pos..].find("}}").map_or(out.len(), |e| pos + e + 2);
        return Err(Error::invalid(
            "wgpu kernel_source",
            format!(
                "kernel '{kernel}' in shaders/{} has an unsubstituted placeholder {}",
                family.file_name(),
                &out[pos..end]
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_sections() {
        for f in Family::ALL {
            let ks = f.kernels();
            assert!(!ks.is_empty(), "{}", f.file_name());
            for k in ks {
                if f == Family::Cast {
                    continue;
                }
                // Kernels with a dtype-dependent store take it as a substitution.
                let subst: &[(&str, &str)] = if k == "adamw_master" {
                    &[("STORE", "0u")]
                } else {
                    &[]
                };
                let s = kernel_source(f, k, subst).unwrap();
                assert!(s.contains("@compute"), "{} {k}", f.file_name());
            }
        }
    }

    #[test]
    fn unknown_section_is_an_error() {
        assert!(kernel_source(Family::Matmul, "v9_magic", &[]).is_err());
        assert!(kernel_source(Family::Cast, "cast", &[]).is_err());
    }
}
