//! Kernel argument structs (`#[repr(C)]` mirrors of the structs in `kernels/*.cu`) and
//! the op codes the kernels switch on.

use crate::device::DevPtr;
use brrr_backend::{
    AdamWParams, BinaryOp, DType, Error, Layout, MAX_RANK, ReduceOp, Result, UnaryOp,
};

/// `bytemuck::Pod` for a `#[repr(C)]` struct of numbers, given the types of its fields in
/// order: the struct's size must equal their sizes' sum, checked at compile time, so it
/// has no padding. (bytemuck's derive checks the same; these three structs do not need
/// its proc-macro and the second `syn` it builds.)
macro_rules! plain_old_data {
    ($t:ty: $($field:ty),+) => {
        const _: () = assert!(
            std::mem::size_of::<$t>() == 0 $(+ std::mem::size_of::<$field>())+,
            "padding in a kernel argument struct"
        );
        // SAFETY: `$t` is `#[repr(C)]` with only the fields listed, each an integer, a
        // float or an array of them (every bit pattern valid, zero included), and the
        // assertion above rules out padding bytes: Zeroable's and Pod's conditions.
        unsafe impl bytemuck::Zeroable for $t {}
        // SAFETY: as above.
        unsafe impl bytemuck::Pod for $t {}
    };
}

/// `struct Strided` of elementwise.cu: a view of up to 6 dimensions with the strides of
/// two inputs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Strided {
    pub rank: u32,
    pub pad: u32,
    pub shape: [u64; MAX_RANK],
    pub sa: [u64; MAX_RANK],
    pub sb: [u64; MAX_RANK],
}

plain_old_data!(Strided: u32, u32, [u64; MAX_RANK], [u64; MAX_RANK], [u64; MAX_RANK]);

impl Strided {
    /// The descriptor of the views `a` and `b` (same shape): dimensions of size 1 are
    /// dropped and neighbours that are contiguous with each other in both views are
    /// merged (as NumPy's iterator does), which shortens the kernel's index loop. A
    /// contiguous tensor becomes one dimension; a `[rows, cols] + [cols]` broadcast stays
    /// two.
    pub(crate) fn new(a: &Layout, b: &Layout) -> Strided {
        let mut d = Strided::default();
        let mut r = 0usize;
        for ax in 0..a.shape.rank() {
            let dim = a.shape.dims()[ax];
            if dim == 1 {
                continue;
            }
            let (sa, sb) = (a.strides[ax] as u64, b.strides[ax] as u64);
            if r > 0 && d.sa[r - 1] == sa * dim as u64 && d.sb[r - 1] == sb * dim as u64 {
                d.shape[r - 1] *= dim as u64;
                d.sa[r - 1] = sa;
                d.sb[r - 1] = sb;
            } else {
                d.shape[r] = dim as u64;
                d.sa[r] = sa;
                d.sb[r] = sb;
                r += 1;
            }
        }
        d.rank = r as u32;
        d
    }

    /// The same copy counted in 16-byte packs of `elem_size`-byte elements, for
    /// `copy_strided_b128`: when the innermost dimension is contiguous in both views
    /// (stride 1) and a whole number of packs long, every other stride is a whole number
    /// of packs too (so each run of the inner dimension starts on a pack boundary; a
    /// broadcast stride 0 is one), and both base addresses `pa`, `pb` are 16-byte
    /// aligned. `None` otherwise: the copy then goes element by element.
    pub(crate) fn in_packs(&self, elem_size: usize, pa: DevPtr, pb: DevPtr) -> Option<Strided> {
        if elem_size == 0 || elem_size >= 16 || !16usize.is_multiple_of(elem_size) {
            return None;
        }
        let per = (16 / elem_size) as u64;
        let last = (self.rank as usize).checked_sub(1)?;
        let outer_whole =
            (0..last).all(|ax| self.sa[ax].is_multiple_of(per) && self.sb[ax].is_multiple_of(per));
        if self.sa[last] != 1
            || self.sb[last] != 1
            || !self.shape[last].is_multiple_of(per)
            || !outer_whole
            || !pa.is_multiple_of(16)
            || !pb.is_multiple_of(16)
        {
            return None;
        }
        let mut p = *self;
        p.shape[last] /= per;
        for ax in 0..last {
            p.sa[ax] /= per;
            p.sb[ax] /= per;
        }
        Some(p)
    }
}

/// Checks a view for `op`: rank and strides consistent, shape `expected`, and every
/// element it addresses inside a buffer of `buf_len` elements (without overflowing).
/// Returns one past the furthest element addressed (0 for an empty view).
pub(crate) fn check_layout(
    op: &'static str,
    what: &str,
    layout: &Layout,
    expected: &[usize],
    buf_len: usize,
) -> Result<usize> {
    layout.validate(op)?;
    if layout.shape.dims() != expected {
        return Err(Error::shape(
            op,
            format!("{what} has shape {}, expected {expected:?}", layout.shape),
        ));
    }
    // Checked: a wrapped span would pass the length check.
    let span = layout
        .span(op)
        .map_err(|e| Error::invalid(op, format!("{what}: {e}")))?;
    Error::check_len(op, span, buf_len)?;
    Ok(span)
}

/// Rejects destination views that map two elements to one place: sorted by stride,
/// each stride must step past everything the smaller ones reach (the reference
/// backend's rule).
pub(crate) fn check_no_overlap(op: &'static str, layout: &Layout) -> Result<()> {
    if layout.shape.elem_count() == 0 {
        return Ok(());
    }
    let mut dims: Vec<(usize, usize)> = layout
        .shape
        .dims()
        .iter()
        .zip(&layout.strides)
        .filter(|&(&d, _)| d > 1)
        .map(|(&d, &s)| (s, d))
        .collect();
    dims.sort_unstable();
    let mut reach = 0usize;
    for (s, d) in dims {
        if s <= reach {
            return Err(Error::invalid(
                op,
                format!(
                    "destination view (shape {}, strides {:?}) maps several elements to one place",
                    layout.shape, layout.strides
                ),
            ));
        }
        reach += (d - 1) * s;
    }
    Ok(())
}

/// `struct GemmArgs` of gemm.cu: a row-major [`brrr_backend::GemmSpec`] for the own kernels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct GemmArgs {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub stride_a: u64,
    pub stride_b: u64,
    pub stride_c: u64,
    pub alpha: f32,
    pub beta: f32,
    pub trans_a: i32,
    pub trans_b: i32,
}

plain_old_data!(GemmArgs: u64, u64, u64, u64, u64, u64, f32, f32, i32, i32);

/// `struct AdamWArgs` of optim.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct AdamWArgs {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub grad_scale: f32,
    pub inv_bias_correction1: f64,
    pub inv_bias_correction2: f64,
}

plain_old_data!(AdamWArgs: f32, f32, f32, f32, f32, f32, f64, f64);

/// `struct MultiTensorRow` of optim.cu: one buffer of a multi-tensor launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct MultiTensorRow {
    /// The op's buffers: `[param, grad, m, v, master]` for AdamW, the one buffer first
    /// for the others; 0 where unused.
    pub ptr: [u64; 5],
    /// Elements.
    pub n: u64,
    /// The number of its first chunk among the launch's chunks.
    pub first_chunk: u64,
    /// AdamW's weight decay for this buffer.
    pub weight_decay: f32,
    pub pad: u32,
}

plain_old_data!(MultiTensorRow: [u64; 5], u64, u64, f32, u32);

/// The UN_* codes of elementwise.cu, and the op's two parameters.
pub(crate) fn unary_code(op: UnaryOp) -> (i32, f32, f32) {
    match op {
        UnaryOp::Neg => (0, 0.0, 0.0),
        UnaryOp::Exp => (1, 0.0, 0.0),
        UnaryOp::Log => (2, 0.0, 0.0),
        UnaryOp::Sqrt => (3, 0.0, 0.0),
        UnaryOp::Rsqrt => (4, 0.0, 0.0),
        UnaryOp::Abs => (5, 0.0, 0.0),
        UnaryOp::Square => (6, 0.0, 0.0),
        UnaryOp::Recip => (7, 0.0, 0.0),
        UnaryOp::Relu => (8, 0.0, 0.0),
        UnaryOp::Tanh => (9, 0.0, 0.0),
        UnaryOp::Sigmoid => (10, 0.0, 0.0),
        UnaryOp::Affine { mul, add } => (11, mul, add),
        UnaryOp::Clamp { lo, hi } => (12, lo, hi),
    }
}

/// The BIN_* codes of elementwise.cu.
pub(crate) fn binary_code(op: BinaryOp) -> i32 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Max => 4,
        BinaryOp::Min => 5,
    }
}

/// Whether a binary op is a bias-style broadcast that `binary_row` runs: one operand
/// contiguous, the other one row of `cols` repeated (strides 0 except a last stride of 1),
/// `cols` a whole number of 16-byte packs and both addresses 16-byte aligned. Returns
/// (full, row, cols, row_first), `row_first` when the row is the left operand `a`.
pub(crate) fn row_broadcast(
    a: &Layout,
    pa: DevPtr,
    b: &Layout,
    pb: DevPtr,
    elem_size: usize,
) -> Option<(DevPtr, DevPtr, usize, bool)> {
    let case = if a.is_contiguous() {
        repeated_row(b).map(|cols| (pa, pb, cols, false))
    } else if b.is_contiguous() {
        repeated_row(a).map(|cols| (pb, pa, cols, true))
    } else {
        None
    };
    let per_pack = 16 / elem_size;
    case.filter(|&(full, row, cols, _)| {
        cols.is_multiple_of(per_pack) && full.is_multiple_of(16) && row.is_multiple_of(16)
    })
}

/// Whether a row of `cols` elements of `dtype` is a whole number of 16-byte packs, so
/// that a `_vec` kernel's packs never straddle two rows.
pub(crate) fn whole_packs(dtype: DType, cols: usize) -> bool {
    cols.is_multiple_of(16 / dtype.size_in_bytes())
}

/// `cols` if `l` is one contiguous row of `cols > 0` elements repeated over at least two
/// rows: every stride 0 but the last, which is 1.
fn repeated_row(l: &Layout) -> Option<usize> {
    let dims = l.shape.dims();
    let (&cols, outer) = dims.split_last()?;
    let (&last, rest) = l.strides.split_last()?;
    let rows: usize = outer.iter().product();
    (cols > 0 && rows > 1 && last == 1 && rest.iter().all(|&s| s == 0)).then_some(cols)
}

/// The RED_* codes of reduce.cu.
pub(crate) fn reduce_code(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
    }
}

/// The kernel-name suffix of a dtype.
pub(crate) fn suffix(dtype: DType) -> &'static str {
    dtype.as_str()
}

/// Float dtypes only (every float kernel exists for f16, bf16, f32 and f64).
pub(crate) fn check_float(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(Error::Unsupported {
            op,
            backend: "cuda",
            dtype,
            why: "this kernel takes floating-point data".into(),
        })
    }
}

/// Index dtypes (i32 or u32).
pub(crate) fn check_index(op: &'static str, dtype: DType) -> Result<()> {
    if matches!(dtype, DType::I32 | DType::U32) {
        Ok(())
    } else {
        Err(Error::Unsupported {
            op,
            backend: "cuda",
            dtype,
            why: "indices must be i32 or u32".into(),
        })
    }
}

/// The host-side constants of one AdamW step: bias corrections in f64, as the reference
/// computes them.
pub(crate) fn adamw_args(params: &AdamWParams) -> AdamWArgs {
    let step = f64::from(params.step);
    AdamWArgs {
        lr: params.lr,
        beta1: params.beta1,
        beta2: params.beta2,
        eps: params.eps,
        weight_decay: params.weight_decay,
        grad_scale: params.grad_scale,
        inv_bias_correction1: 1.0 / (1.0 - f64::from(params.beta1).powf(step)),
        inv_bias_correction2: 1.0 / (1.0 - f64::from(params.beta2).powf(step)),
    }
}

/// `adamw_master`'s dtypes: the compute copy f16, bf16 or f32, the gradient f32 or the
/// copy's dtype.
pub(crate) fn check_master_dtypes(op: &'static str, copy: DType, grad: DType) -> Result<()> {
    if matches!(copy, DType::F16 | DType::BF16 | DType::F32) && (grad == DType::F32 || grad == copy)
    {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!(
            "the compute copy must be f16, bf16 or f32 and the gradient f32 or the copy's \
             dtype; got copy {copy} and gradient {grad}"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_backend::Shape;

    #[test]
    fn a_copy_goes_in_packs_only_when_rows_are_whole_aligned_packs() {
        // The attention head split: [8, 1024, 12, 64] read as [8, 12, 1024, 64].
        let src = Layout {
            shape: Shape::new([8, 12, 1024, 64]),
            strides: vec![1024 * 12 * 64, 64, 12 * 64, 1],
            offset: 0,
        };
        let dst = Layout::contiguous([8, 12, 1024, 64]);
        let d = Strided::new(&src, &dst);
        let p = d
            .in_packs(2, 256, 512)
            .expect("bf16 rows of 64 are 8 packs");
        assert_eq!(p.rank, 4);
        assert_eq!(p.shape[..4], [8, 12, 1024, 8]);
        assert_eq!(p.sa[..4], [1024 * 12 * 8, 8, 12 * 8, 1]);
        assert_eq!(p.sb[..4], [12 * 1024 * 8, 1024 * 8, 8, 1]);
        assert!(d.in_packs(8, 256, 512).is_some(), "f64: 32 packs per row");
        // A base address off by one element on either side.
        assert_eq!(d.in_packs(2, 258, 512), None);
        assert_eq!(d.in_packs(2, 256, 514), None);
        // Rows of 9 are no whole number of packs in any dtype.
        let rows9 = Layout {
            shape: Shape::new([3, 5, 9]),
            strides: vec![9, 27, 1],
            offset: 0,
        };
        let d9 = Strided::new(&rows9, &Layout::contiguous([3, 5, 9]));
        assert!([2, 4, 8].iter().all(|&es| d9.in_packs(es, 0, 0).is_none()));
        // Rows 12 elements apart: whole packs of f32 (3), not of bf16 (1.5).
        let strided = Layout {
            shape: Shape::new([5, 8]),
            strides: vec![12, 1],
            offset: 0,
        };
        let ds = Strided::new(&strided, &Layout::contiguous([5, 8]));
        assert!(ds.in_packs(4, 0, 0).is_some());
        assert_eq!(ds.in_packs(2, 0, 0), None);
        // An innermost stride other than 1 (a transpose's) and a scalar never pack.
        let t = Layout {
            shape: Shape::new([8, 8]),
            strides: vec![1, 8],
            offset: 0,
        };
        assert_eq!(
            Strided::new(&t, &Layout::contiguous([8, 8])).in_packs(4, 0, 0),
            None
        );
        let scalar = Layout::contiguous(Vec::<usize>::new());
        assert_eq!(Strided::new(&scalar, &scalar).in_packs(4, 0, 0), None);
    }

    #[test]
    fn a_bias_broadcast_is_recognised_only_when_whole_packs_and_aligned() {
        let shape = Shape::new([4, 8, 768]);
        let full = Layout::contiguous(shape.clone());
        let bias = Layout::contiguous([768]).broadcast_to("t", &shape).unwrap();
        assert_eq!(
            row_broadcast(&full, 256, &bias, 512, 2),
            Some((256, 512, 768, false))
        );
        assert_eq!(
            row_broadcast(&bias, 512, &full, 256, 4),
            Some((256, 512, 768, true))
        );
        // Misaligned row, a row that is not whole packs, two broadcasts, a column.
        assert_eq!(row_broadcast(&full, 256, &bias, 514, 2), None);
        let odd = Shape::new([4, 12]);
        let odd_bias = Layout::contiguous([12]).broadcast_to("t", &odd).unwrap();
        assert_eq!(
            row_broadcast(&Layout::contiguous(odd.clone()), 0, &odd_bias, 0, 2),
            None
        );
        assert!(row_broadcast(&Layout::contiguous(odd.clone()), 0, &odd_bias, 0, 4).is_some());
        assert_eq!(row_broadcast(&bias, 0, &bias, 0, 4), None);
        let col = Layout::contiguous([4, 1])
            .broadcast_to("t", &Shape::new([4, 8]))
            .unwrap();
        assert_eq!(
            row_broadcast(&Layout::contiguous([4, 8]), 0, &col, 0, 4),
            None
        );
    }

    #[test]
    fn layouts_match_the_cuda_structs() {
        // Sizes of the C structs with natural alignment (checked against the kernels by
        // the emulator tests, which pass these bytes to the compiled C++).
        assert_eq!(std::mem::size_of::<Strided>(), 4 + 4 + 3 * 6 * 8);
        assert_eq!(std::mem::size_of::<GemmArgs>(), 6 * 8 + 4 * 4);
        assert_eq!(std::mem::size_of::<AdamWArgs>(), 6 * 4 + 2 * 8);
    }

    #[test]
    fn strided_drops_unit_dimensions_and_merges() {
        let l = Layout {
            shape: brrr_backend::Shape::new([2, 1, 3]),
            strides: vec![3, 99, 1],
            offset: 0,
        };
        let d = Strided::new(&l, &l);
        assert_eq!(d.rank, 1);
        assert_eq!(d.shape[0], 6);
        assert_eq!(d.sa[0], 1);
        let bias = Layout {
            shape: brrr_backend::Shape::new([2, 3]),
            strides: vec![0, 1],
            offset: 0,
        };
        let d = Strided::new(&Layout::contiguous([2, 3]), &bias);
        assert_eq!(d.rank, 2);
        assert_eq!(
            (&d.shape[..2], &d.sa[..2], &d.sb[..2]),
            (&[2, 3][..], &[3, 1][..], &[0, 1][..])
        );
        let t = Layout {
            shape: brrr_backend::Shape::new([3, 2]),
            strides: vec![1, 3],
            offset: 0,
        };
        let d = Strided::new(&t, &Layout::contiguous([3, 2]));
        assert_eq!(d.rank, 2);
        assert!(check_no_overlap("t", &t).is_ok());
        assert!(check_no_overlap("t", &bias).is_err());
        assert_eq!(check_layout("t", "v", &t, &[3, 2], 6).unwrap(), 6);
        assert!(check_layout("t", "v", &t, &[3, 2], 5).is_err());
    }
}
