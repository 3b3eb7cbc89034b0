use crate::{Error, Result};
use std::fmt;

/// The largest rank a strided kernel accepts. GPU kernels receive shapes and strides in
/// a fixed-size uniform, so the limit is shared by every backend.
pub const MAX_RANK: usize = 6;

/// Dimensions of a tensor, outermost first (row-major).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(Vec<usize>);

impl Shape {
    /// A shape with these dimensions, outermost first; `[]` is a scalar.
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        Shape(dims.into())
    }

    /// The dimensions, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (1 for a scalar of rank 0). For dimensions that come from
    /// outside (files, users, specs) use [`Shape::checked_elem_count`].
    pub fn elem_count(&self) -> usize {
        self.0.iter().product()
    }

    /// [`Shape::elem_count`], or an error naming `op` when the product overflows `usize`.
    pub fn checked_elem_count(&self, op: &'static str) -> Result<usize> {
        if self.0.contains(&0) {
            return Ok(0);
        }
        self.0
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| {
                Error::shape(
                    op,
                    format!("shape {self} has more elements than usize can count"),
                )
            })
    }

    /// Row-major (C-contiguous) strides in elements.
    pub fn contiguous_strides(&self) -> Vec<usize> {
        let mut strides = vec![0; self.0.len()];
        let mut acc = 1;
        for (s, d) in strides.iter_mut().zip(&self.0).rev() {
            *s = acc;
            acc *= *d;
        }
        strides
    }

    /// Size of dimension `dim`, accepting negative indices from the end (`-1` = last).
    pub fn dim(&self, dim: isize) -> Result<usize> {
        let i = self.resolve_dim(dim)?;
        Ok(self.0[i])
    }

    /// Turns a possibly negative dimension index into a position.
    pub fn resolve_dim(&self, dim: isize) -> Result<usize> {
        let rank = self.0.len() as isize;
        let i = if dim < 0 { dim + rank } else { dim };
        if i < 0 || i >= rank {
            return Err(Error::shape(
                "dim",
                format!("dimension {dim} out of range for shape {self}"),
            ));
        }
        Ok(i as usize)
    }

    /// The NumPy broadcasting rule: align from the right; sizes must match or be 1.
    pub fn broadcast(op: &'static str, a: &Shape, b: &Shape) -> Result<Shape> {
        let rank = a.rank().max(b.rank());
        let mut out = vec![0; rank];
        #[allow(clippy::needless_range_loop)] // i indexes three arrays with offsets
        for i in 0..rank {
            let da = if i < rank - a.rank() {
                1
            } else {
                a.0[i - (rank - a.rank())]
            };
            let db = if i < rank - b.rank() {
                1
            } else {
                b.0[i - (rank - b.rank())]
            };
            out[i] = if da == db || db == 1 {
                da
            } else if da == 1 {
                db
            } else {
                return Err(Error::shape(
                    op,
                    format!("cannot broadcast {a} with {b} (dimension {i}: {da} vs {db})"),
                ));
            };
        }
        Ok(Shape(out))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Self {
        Shape(d.to_vec())
    }
}
impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Self {
        Shape(d)
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Self {
        Shape(d.to_vec())
    }
}

/// How a view walks its buffer: element `(i0, i1, ...)` lives at
/// `offset + i0*strides[0] + i1*strides[1] + ...`. A stride of 0 repeats the same
/// element, which is how broadcasting is expressed without copying.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The view's logical shape.
    pub shape: Shape,
    /// Elements (not bytes) to step in the buffer per unit of each dimension; one per
    /// dimension of `shape`.
    pub strides: Vec<usize>,
    /// Element index in the buffer of the view's first element.
    pub offset: usize,
}

impl Layout {
    /// The dense row-major layout of `shape`, starting at element 0.
    pub fn contiguous(shape: impl Into<Shape>) -> Self {
        let shape = shape.into();
        let strides = shape.contiguous_strides();
        Layout {
            shape,
            strides,
            offset: 0,
        }
    }

    /// Whether the strides are row-major for the shape (ignoring the stride of any
    /// size-1 dimension), so the view is one dense run of elements from `offset`.
    pub fn is_contiguous(&self) -> bool {
        // Dimensions of size 1 may carry any stride.
        let mut acc = 1;
        for (d, s) in self.shape.dims().iter().zip(&self.strides).rev() {
            if *d != 1 && *s != acc {
                return false;
            }
            acc *= d;
        }
        true
    }

    /// Index one past the furthest element this view touches (0 for an empty view):
    /// the buffer must hold at least this many elements. Checked: a layout comes from
    /// the caller, and a wrapped span would pass a length check and let a kernel address
    /// memory outside the buffer, so an overflow is an error naming `op`.
    pub fn span(&self, op: &'static str) -> Result<usize> {
        if self.shape.dims().contains(&0) {
            return Ok(0);
        }
        let overflow = || {
            Error::invalid(
                op,
                format!(
                    "layout {} with strides {:?} and offset {} spans more than usize can index",
                    self.shape, self.strides, self.offset
                ),
            )
        };
        if self.strides.len() != self.shape.rank() {
            return Err(Error::shape(
                op,
                format!(
                    "layout has {} strides for shape {}",
                    self.strides.len(),
                    self.shape
                ),
            ));
        }
        let mut last = self.offset;
        for (&d, &s) in self.shape.dims().iter().zip(&self.strides) {
            last = (d - 1)
                .checked_mul(s)
                .and_then(|x| x.checked_add(last))
                .ok_or_else(overflow)?;
        }
        last.checked_add(1).ok_or_else(overflow)
    }

    /// This layout read as if it had shape `target`, by the broadcasting rule
    /// (new and size-1 dimensions get stride 0).
    pub fn broadcast_to(&self, op: &'static str, target: &Shape) -> Result<Layout> {
        let r = target.rank();
        if self.shape.rank() > r {
            return Err(Error::shape(
                op,
                format!("cannot broadcast {} to {target}", self.shape),
            ));
        }
        let pad = r - self.shape.rank();
        let mut strides = vec![0; r];
        #[allow(clippy::needless_range_loop)]
        for i in 0..r {
            if i < pad {
                continue;
            }
            let d = self.shape.dims()[i - pad];
            if d == target.dims()[i] {
                strides[i] = self.strides[i - pad];
            } else if d != 1 {
                return Err(Error::shape(
                    op,
                    format!("cannot broadcast {} to {target}", self.shape),
                ));
            }
        }
        Ok(Layout {
            shape: target.clone(),
            strides,
            offset: self.offset,
        })
    }

    /// Checks the rank is within [`MAX_RANK`] and strides match the shape.
    pub fn validate(&self, op: &'static str) -> Result<()> {
        if self.shape.rank() > MAX_RANK {
            return Err(Error::shape(
                op,
                format!(
                    "rank {} exceeds the maximum of {MAX_RANK}",
                    self.shape.rank()
                ),
            ));
        }
        if self.strides.len() != self.shape.rank() {
            return Err(Error::shape(
                op,
                format!(
                    "layout has {} strides for shape {}",
                    self.strides.len(),
                    self.shape
                ),
            ));
        }
        Ok(())
    }

    /// Offsets of every element in row-major order of the view. Reference
    /// implementation used by the CPU backend for strided copies.
    pub fn offsets(&self) -> impl Iterator<Item = usize> + '_ {
        let n = self.shape.elem_count();
        let dims = self.shape.dims();
        let mut idx = vec![0usize; dims.len()];
        let mut cur = self.offset;
        let mut first = true;
        (0..n).map(move |_| {
            if first {
                first = false;
                return cur;
            }
            for ax in (0..dims.len()).rev() {
                idx[ax] += 1;
                cur += self.strides[ax];
                if idx[ax] < dims[ax] {
                    break;
                }
                cur -= self.strides[ax] * dims[ax];
                idx[ax] = 0;
            }
            cur
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        let s = Shape::broadcast("t", &Shape::new([4, 1, 3]), &Shape::new([5, 1])).unwrap();
        assert_eq!(s.dims(), &[4, 5, 3]);
        let e = Shape::broadcast("add", &Shape::new([2, 3]), &Shape::new([4])).unwrap_err();
        assert!(e.to_string().contains("add"), "{e}");
        assert!(e.to_string().contains("[2, 3]"), "{e}");
    }

    #[test]
    fn span_and_count_overflow_is_an_error() {
        let huge = Layout {
            shape: Shape::new([3, 2]),
            strides: vec![usize::MAX / 2, 1],
            offset: 0,
        };
        let e = huge.span("copy_strided").unwrap_err();
        assert!(e.to_string().contains("copy_strided"), "{e}");
        let off = Layout {
            shape: Shape::new([1]),
            strides: vec![1],
            offset: usize::MAX,
        };
        assert!(off.span("t").is_err());
        let empty = Layout {
            shape: Shape::new([0, 5]),
            strides: vec![usize::MAX, usize::MAX],
            offset: 7,
        };
        assert_eq!(empty.span("t").unwrap(), 0);
        let big = Shape::new([usize::MAX, 2]);
        assert!(big.checked_elem_count("zeros").is_err());
        assert_eq!(
            Shape::new([0, usize::MAX, 2])
                .checked_elem_count("t")
                .unwrap(),
            0
        );
        assert_eq!(Shape::new([]).checked_elem_count("t").unwrap(), 1);
    }

    #[test]
    fn offsets_of_a_transpose() {
        let l = Layout {
            shape: Shape::new([3, 2]),
            strides: vec![1, 3],
            offset: 0,
        };
        assert!(!l.is_contiguous());
        assert_eq!(l.offsets().collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(l.span("t").unwrap(), 6);
        let b = Layout::contiguous([3])
            .broadcast_to("t", &Shape::new([2, 3]))
            .unwrap();
        assert_eq!(b.offsets().collect::<Vec<_>>(), vec![0, 1, 2, 0, 1, 2]);
    }
}
