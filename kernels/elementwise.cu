// elementwise.cu — memory-bound kernels: one read (or two) and one write per element.
//
// Unary and binary math, axpy, GELU forward/backward, casts between dtypes, strided
// gathers (what makes a transpose or a broadcast real) and a 64-bit fill.
//
// These kernels do almost no arithmetic per byte, so their speed is the speed of DRAM.
// Two things get them there: enough bytes in flight (a grid-stride loop over many
// blocks) and wide accesses: contiguous kernels move 16 bytes per load and store
// (`Pack<T>`: 4 f32 or 8 bf16), so a warp moves 512 bytes per instruction.
// Buffers from brrr's allocator start 256-byte aligned; the host checks alignment
// before choosing a vectorized kernel.
//
// Kernel names end in the dtype: f16, bf16, f32, f64 (cast kernels: source_destination).

// Applies f to every element of x, writing out: packs first, then the < V leftovers.
template <class T, class F> BRRR_DEVICE void map1(T* __restrict__ out, const T* __restrict__ x, u64 n, F f) {
    const int V = 16 / sizeof(T);
    const u64 nv = n / V;
    const Pack<T>* xv = as_packs(x);
    Pack<T>* ov = as_packs(out);
    for (u64 j = global_thread_id(); j < nv; j += global_thread_count()) {
        Pack<T> p = xv[j];
#pragma unroll
        for (int e = 0; e < V; e++) p.v[e] = from_acc<T>(f(to_acc(p.v[e])));
        ov[j] = p;
    }
    const u64 i = nv * V + global_thread_id();
    if (i < n) out[i] = from_acc<T>(f(to_acc(x[i])));
}

// out = f(a, b) elementwise over contiguous, 16-byte aligned a, b and out.
template <class T, class F>
BRRR_DEVICE void map2(T* out, const T* a, const T* b, u64 n, F f) {
    const int V = 16 / sizeof(T);
    const u64 nv = n / V;
    const Pack<T>* av = as_packs(a);
    const Pack<T>* bv = as_packs(b);
    Pack<T>* ov = as_packs(out);
    for (u64 j = global_thread_id(); j < nv; j += global_thread_count()) {
        Pack<T> pa = av[j];
        const Pack<T> pb = bv[j];
#pragma unroll
        for (int e = 0; e < V; e++) pa.v[e] = from_acc<T>(f(to_acc(pa.v[e]), to_acc(pb.v[e])));
        ov[j] = pa;
    }
    const u64 i = nv * V + global_thread_id();
    if (i < n) out[i] = from_acc<T>(f(to_acc(a[i]), to_acc(b[i])));
}

// ---- unary ---------------------------------------------------------------------------

// Op codes: the order of brrr_backend::UnaryOp.
#define UN_NEG 0
#define UN_EXP 1
#define UN_LOG 2
#define UN_SQRT 3
#define UN_RSQRT 4
#define UN_ABS 5
#define UN_SQUARE 6
#define UN_RECIP 7
#define UN_RELU 8
#define UN_TANH 9
#define UN_SIGMOID 10
#define UN_AFFINE 11
#define UN_CLAMP 12

template <class A> struct UnaryFn {
    int op;
    A p0, p1;
    BRRR_DEVICE A operator()(A x) const {
        switch (op) {
            case UN_NEG: return -x;
            case UN_EXP: return m_exp(x);
            case UN_LOG: return m_log(x);
            case UN_SQRT: return m_sqrt(x);
            case UN_RSQRT: return A(1) / m_sqrt(x);
            case UN_ABS: return m_abs(x);
            case UN_SQUARE: return x * x;
            case UN_RECIP: return A(1) / x;
            case UN_RELU: return vmax(x, A(0));
            case UN_TANH: return m_tanh(x);
            case UN_SIGMOID: return A(1) / (A(1) + m_exp(-x));
            case UN_AFFINE: return x * p0 + p1;
            case UN_CLAMP: return vmin(vmax(x, p0), p1);
            default: return x;
        }
    }
};

// ---- binary --------------------------------------------------------------------------

// Op codes: the order of brrr_backend::BinaryOp.
#define BIN_ADD 0
#define BIN_SUB 1
#define BIN_MUL 2
#define BIN_DIV 3
#define BIN_MAX 4
#define BIN_MIN 5

template <class A> BRRR_DEVICE A binary_apply(int op, A a, A b) {
    switch (op) {
        case BIN_ADD: return a + b;
        case BIN_SUB: return a - b;
        case BIN_MUL: return a * b;
        case BIN_DIV: return a / b;
        case BIN_MAX: return vmax(a, b);
        case BIN_MIN: return vmin(a, b);
        default: return a;
    }
}

template <class A> struct BinaryFn {
    int op;
    BRRR_DEVICE A operator()(A a, A b) const { return binary_apply(op, a, b); }
};

// A strided view of up to 6 dimensions: shape plus the strides (in elements) of two
// inputs. Must match `Strided` in crates/cuda/src/ops.rs field for field.
struct Strided {
    u32 rank;
    u32 pad;
    u64 shape[6];
    u64 sa[6];
    u64 sb[6];
};

// Element offsets of linear index i (row-major over `shape`) in both views. I is u32
// when every index fits, because 64-bit division costs several times more.
template <class I> BRRR_DEVICE void strided_offsets(const Strided& d, I i, I& oa, I& ob) {
    oa = 0;
    ob = 0;
    for (int ax = (int)d.rank - 1; ax >= 0; ax--) {
        const I dim = (I)d.shape[ax];
        const I idx = i % dim;
        i /= dim;
        oa += idx * (I)d.sa[ax];
        ob += idx * (I)d.sb[ax];
    }
}

template <class T, class I>
BRRR_DEVICE void binary_strided_impl(T* out, const T* a, const T* b, u64 n, int op, const Strided& d) {
    for (u64 i = global_thread_id(); i < n; i += global_thread_count()) {
        I oa, ob;
        strided_offsets<I>(d, (I)i, oa, ob);
        out[i] = from_acc<T>(binary_apply(op, to_acc(a[oa]), to_acc(b[ob])));
    }
}

// out = op(full, row) where `row` (`cols` elements) repeats along `full` (a bias added to
// every row of activations); op(row, full) if `row_first`. The strided kernel would pay
// index arithmetic per element and 2-byte loads in bf16; here each thread moves 16-byte
// packs. The host guarantees cols % V == 0 and 16-byte aligned pointers, so a pack never
// straddles two rows. The row's pack index follows the grid stride incrementally instead
// of a 64-bit division per pack.
template <class T>
BRRR_DEVICE void binary_row_impl(T* out, const T* full, const T* row, u64 n, u64 cols, int op, int row_first) {
    typedef typename Acc<T>::type A;
    const int V = 16 / sizeof(T);
    const u64 nv = n / V;
    const u64 row_packs = cols / V;
    const Pack<T>* fv = as_packs(full);
    const Pack<T>* rv = as_packs(row);
    Pack<T>* ov = as_packs(out);
    const u64 step = global_thread_count() % row_packs;
    u64 c = global_thread_id() % row_packs;
    for (u64 j = global_thread_id(); j < nv; j += global_thread_count()) {
        Pack<T> pf = fv[j];
        const Pack<T> pr = rv[c];
#pragma unroll
        for (int e = 0; e < V; e++) {
            const A f = to_acc(pf.v[e]);
            const A r = to_acc(pr.v[e]);
            pf.v[e] = from_acc<T>(row_first ? binary_apply(op, r, f) : binary_apply(op, f, r));
        }
        ov[j] = pf;
        c += step;
        if (c >= row_packs) c -= row_packs;
    }
}

// ---- GELU (tanh approximation, as GPT-2) -------------------------------------------------
//
// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as x * sigmoid(2u): the
// same function, since (1 + tanh u) / 2 = sigmoid(2u), but without the cancellation of
// 1 + tanh(u) for negative x (the reference backend uses the same form). The derivative
// is s + 2 x s (1 - s) u'(x) with s = sigmoid(2u).

template <class A> BRRR_DEVICE void gelu_parts(A x, A& s, A& du) {
    const A k = A(0.7978845608028654);  // sqrt(2 / pi)
    const A c = A(0.044715);
    const A x2 = x * x;
    const A u = k * (x + c * x2 * x);
    s = A(1) / (A(1) + m_exp(-(u + u)));
    du = k * (A(1) + A(3) * c * x2);
}

template <class A> struct GeluFn {
    BRRR_DEVICE A operator()(A x) const {
        A s, du;
        gelu_parts(x, s, du);
        return x * s;
    }
};

template <class A> struct GeluBackwardFn {
    BRRR_DEVICE A operator()(A x, A dy) const {
        A s, du;
        gelu_parts(x, s, du);
        return dy * (s + A(2) * x * s * (A(1) - s) * du);
    }
};

template <class A> struct AxpyFn {
    A alpha;
    BRRR_DEVICE A operator()(A y, A x) const { return y + alpha * x; }
};

// ---- instantiation -----------------------------------------------------------------------

#define ELEMENTWISE_KERNELS(T, S)                                                              \
    extern "C" __global__ void BRRR_FLAT unary_##S(T* out, const T* x, u64 n, int op, float p0, float p1) { \
        UnaryFn<Acc<T>::type> f;                                                               \
        f.op = op;                                                                             \
        f.p0 = p0;                                                                             \
        f.p1 = p1;                                                                             \
        map1(out, x, n, f);                                                                    \
    }                                                                                          \
    BRRR_REGISTER(unary_##S)                                                                   \
    extern "C" __global__ void BRRR_FLAT binary_vec_##S(T* out, const T* a, const T* b, u64 n, int op) {  \
        BinaryFn<Acc<T>::type> f;                                                              \
        f.op = op;                                                                             \
        map2(out, a, b, n, f);                                                                 \
    }                                                                                          \
    BRRR_REGISTER(binary_vec_##S)                                                              \
    extern "C" __global__ void BRRR_FLAT binary_row_##S(T* out, const T* full, const T* row, u64 n, u64 cols, \
                                              int op, int row_first) {                         \
        binary_row_impl<T>(out, full, row, n, cols, op, row_first);                            \
    }                                                                                          \
    BRRR_REGISTER(binary_row_##S)                                                              \
    extern "C" __global__ void BRRR_FLAT binary_strided_##S(T* out, const T* a, const T* b, u64 n, int op, \
                                                  Strided d) {                                 \
        binary_strided_impl<T, u64>(out, a, b, n, op, d);                                      \
    }                                                                                          \
    BRRR_REGISTER(binary_strided_##S)                                                          \
    extern "C" __global__ void BRRR_FLAT binary_strided32_##S(T* out, const T* a, const T* b, u64 n, int op, \
                                                    Strided d) {                               \
        binary_strided_impl<T, u32>(out, a, b, n, op, d);                                      \
    }                                                                                          \
    BRRR_REGISTER(binary_strided32_##S)                                                        \
    extern "C" __global__ void BRRR_FLAT axpy_##S(T* y, const T* x, u64 n, float alpha) {                \
        AxpyFn<Acc<T>::type> f;                                                                \
        f.alpha = alpha;                                                                       \
        map2(y, y, x, n, f);                                                                   \
    }                                                                                          \
    BRRR_REGISTER(axpy_##S)                                                                    \
    /* y at an offset that is not a whole 16-byte pack (one part of a flat buffer) */          \
    extern "C" __global__ void BRRR_FLAT axpy_unaligned_##S(T* y, const T* x, u64 n, float alpha) {      \
        AxpyFn<Acc<T>::type> f;                                                                \
        f.alpha = alpha;                                                                       \
        for (u64 i = global_thread_id(); i < n; i += global_thread_count())                    \
            y[i] = from_acc<T>(f(to_acc(y[i]), to_acc(x[i])));                                 \
    }                                                                                          \
    BRRR_REGISTER(axpy_unaligned_##S)                                                          \
    extern "C" __global__ void BRRR_FLAT gelu_##S(T* y, const T* x, u64 n) {                             \
        map1(y, x, n, GeluFn<Acc<T>::type>());                                                 \
    }                                                                                          \
    BRRR_REGISTER(gelu_##S)                                                                    \
    extern "C" __global__ void BRRR_FLAT gelu_backward_##S(T* dx, const T* x, const T* dy, u64 n) {      \
        map2(dx, x, dy, n, GeluBackwardFn<Acc<T>::type>());                                    \
    }                                                                                          \
    BRRR_REGISTER(gelu_backward_##S)

ELEMENTWISE_KERNELS(f16_t, f16)
ELEMENTWISE_KERNELS(bf16_t, bf16)
ELEMENTWISE_KERNELS(float, f32)
ELEMENTWISE_KERNELS(double, f64)

// ---- fill and strided copy (dtype-agnostic: they move bits) ------------------------------

// 2- and 4-byte fills use cuMemsetD16/D32; 8-byte values need a kernel.
extern "C" __global__ void BRRR_FLAT fill_b64(u64* p, u64 n, u64 bits) {
    for (u64 i = global_thread_id(); i < n; i += global_thread_count()) p[i] = bits;
}
BRRR_REGISTER(fill_b64)

// dst[offset of i in view b] = src[offset of i in view a], i over the shape in row-major
// order (pointers already include the views' offsets).
#define COPY_STRIDED(T, S)                                                                     \
    extern "C" __global__ void BRRR_FLAT copy_strided_##S(T* dst, const T* src, u64 n, Strided d) {      \
        for (u64 i = global_thread_id(); i < n; i += global_thread_count()) {                  \
            u64 oa, ob;                                                                        \
            strided_offsets<u64>(d, i, oa, ob);                                                \
            dst[ob] = src[oa];                                                                 \
        }                                                                                      \
    }                                                                                          \
    BRRR_REGISTER(copy_strided_##S)                                                            \
    extern "C" __global__ void BRRR_FLAT copy_strided32_##S(T* dst, const T* src, u64 n, Strided d) {    \
        for (u64 i = global_thread_id(); i < n; i += global_thread_count()) {                  \
            u32 oa, ob;                                                                        \
            strided_offsets<u32>(d, (u32)i, oa, ob);                                           \
            dst[ob] = src[oa];                                                                 \
        }                                                                                      \
    }                                                                                          \
    BRRR_REGISTER(copy_strided32_##S)

COPY_STRIDED(unsigned short, b16)
COPY_STRIDED(u32, b32)
COPY_STRIDED(u64, b64)

// 16-byte packs, when the innermost dimension is contiguous on both sides and a whole
// number of packs, every other stride too, and both pointers 16-byte aligned (the host
// decides: Strided::in_packs). `n` and `d` then count packs, so the index math (a
// division per dimension) runs once per 16 bytes instead of once per element, and each
// thread moves 16 bytes with one load and one store. A copy: the bits are the same.
template <class I> BRRR_DEVICE void copy_strided_packs(u32* dst, const u32* src, u64 n, const Strided& d) {
    Pack<u32>* dv = as_packs(dst);
    const Pack<u32>* sv = as_packs(src);
    for (u64 i = global_thread_id(); i < n; i += global_thread_count()) {
        I oa, ob;
        strided_offsets<I>(d, (I)i, oa, ob);
        dv[ob] = sv[oa];
    }
}
extern "C" __global__ void BRRR_FLAT copy_strided_b128(u32* dst, const u32* src, u64 n, Strided d) {
    copy_strided_packs<u64>(dst, src, n, d);
}
BRRR_REGISTER(copy_strided_b128)
extern "C" __global__ void BRRR_FLAT copy_strided32_b128(u32* dst, const u32* src, u64 n, Strided d) {
    copy_strided_packs<u32>(dst, src, n, d);
}
BRRR_REGISTER(copy_strided32_b128)

// ---- casts -------------------------------------------------------------------------------

BRRR_DEVICE double to_f64(f16_t x) { return (double)f16_bits_to_f32(x.bits); }
BRRR_DEVICE double to_f64(bf16_t x) { return (double)bf16_bits_to_f32(x.bits); }
BRRR_DEVICE double to_f64(float x) { return (double)x; }
BRRR_DEVICE double to_f64(double x) { return x; }
BRRR_DEVICE double to_f64(i32 x) { return (double)x; }
BRRR_DEVICE double to_f64(u32 x) { return (double)x; }

// f64 (and integers, which convert to f64 exactly) -> f16/bf16 with a single rounding,
// like the reference: first to f32 with round-to-odd (truncate, then set the last bit
// if anything was lost), then to nearest even. Because f32 keeps more than two extra
// bits, the double rounding gives the correctly rounded result (Boldo & Melquiond 2008).
// Float -> integer truncates toward zero and saturates, NaN gives 0, like Rust's `as`.
BRRR_DEVICE float f64_to_f32_round_odd(double x) {
    float f = f64_to_f32_rz(x);
    if ((double)f != x && !is_nan(x)) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}
template <class D> BRRR_DEVICE D from_f64(double x);
template <> BRRR_DEVICE f16_t from_f64<f16_t>(double x) { return from_acc<f16_t>(f64_to_f32_round_odd(x)); }
template <> BRRR_DEVICE bf16_t from_f64<bf16_t>(double x) { return from_acc<bf16_t>(f64_to_f32_round_odd(x)); }
template <> BRRR_DEVICE float from_f64<float>(double x) { return (float)x; }
template <> BRRR_DEVICE double from_f64<double>(double x) { return x; }
template <> BRRR_DEVICE i32 from_f64<i32>(double x) {
    if (is_nan(x)) return 0;
    if (x >= 2147483647.0) return 2147483647;
    if (x <= -2147483648.0) return (i32)(-2147483647 - 1);
    return (i32)x;
}
template <> BRRR_DEVICE u32 from_f64<u32>(double x) {
    if (is_nan(x) || x <= 0.0) return 0u;
    if (x >= 4294967295.0) return 4294967295u;
    return (u32)x;
}

template <class T> struct IsHalfOrF32 {
    static const bool value = false;
};
template <> struct IsHalfOrF32<f16_t> {
    static const bool value = true;
};
template <> struct IsHalfOrF32<bf16_t> {
    static const bool value = true;
};
template <> struct IsHalfOrF32<float> {
    static const bool value = true;
};

// Between f16, bf16 and f32 the value goes through f32 (exact widening, one rounding);
// anything involving f64 or an integer goes through f64 (exact for all of them).
template <class S, class D> BRRR_DEVICE D convert(S x) {
    if constexpr (IsHalfOrF32<S>::value && IsHalfOrF32<D>::value) {
        return from_acc<D>(to_acc(x));
    } else {
        return from_f64<D>(to_f64(x));
    }
}

#define CAST(S, SN, D, DN)                                                                     \
    extern "C" __global__ void BRRR_FLAT cast_##SN##_##DN(D* dst, const S* src, u64 n) {                 \
        for (u64 i = global_thread_id(); i < n; i += global_thread_count()) dst[i] = convert<S, D>(src[i]); \
    }                                                                                          \
    BRRR_REGISTER(cast_##SN##_##DN)

#define CAST_FROM(S, SN)        \
    CAST(S, SN, f16_t, f16)     \
    CAST(S, SN, bf16_t, bf16)   \
    CAST(S, SN, float, f32)     \
    CAST(S, SN, double, f64)    \
    CAST(S, SN, i32, i32)       \
    CAST(S, SN, u32, u32)

CAST_FROM(f16_t, f16)
CAST_FROM(bf16_t, bf16)
CAST_FROM(float, f32)
CAST_FROM(double, f64)
CAST_FROM(i32, i32)
CAST_FROM(u32, u32)
