// cross_entropy.cu — per-row cross-entropy of [rows, vocab] logits and its gradient.
//
//   loss[r]    = logsumexp(logits[r]) - logits[r, t_r]            (f32)
//   dlogits[r] = (softmax(logits[r]) - onehot(t_r)) * dlosses[r]
//
// One block per row; logsumexp uses the same one-pass online (max, sum) as softmax.cu,
// so the 50k-wide GPT-2 rows are read once for the statistics (and once more in the
// backward to write the gradient). A negative target marks an ignored row (padding):
// loss 0 and zero gradient. A target >= vocab cannot be reported from the GPU, so its
// row's loss and gradient are NaN, which the training loop's loss check catches.
//
// The `_vec` kernels are the same over rows of whole 16-byte packs (vocab a multiple of
// 8 in 16-bit dtypes, as GPT-2's padded 50304 is): one load brings 8 bf16 logits, so a
// thread has several in flight instead of waiting on one 2-byte load per exp.

template <class I> BRRR_DEVICE i64 target_of(I t);
template <> BRRR_DEVICE i64 target_of<i32>(i32 t) { return (i64)t; }
template <> BRRR_DEVICE i64 target_of<u32>(u32 t) { return (i64)t; }

// Online (max, sum of exp) over a row, combined over the block. Returns M and S with
// S = sum_j exp(x_j - M).
template <class T>
BRRR_DEVICE void row_logsumexp_stats(const T* xr, u64 vocab, typename Acc<T>::type& M,
                                     typename Acc<T>::type& S) {
    typedef typename Acc<T>::type A;
    const A neg_inf = -A(inf_f64());
    A m = neg_inf;
    A s = A(0);
    for (u64 j = threadIdx.x; j < vocab; j += blockDim.x) {
        const A z = to_acc(xr[j]);
        if (z == neg_inf) continue;
        if (z > m) {
            s = s * m_exp(m - z) + A(1);
            m = z;
        } else {
            s += m_exp(z - m);
        }
    }
    M = block_reduce(m, 1);
    const A mine = (m == neg_inf) ? A(0) : s * m_exp(m - M);
    S = block_reduce(mine, 0);
}

// row_logsumexp_stats over packs (online_max_sum_pack in common.cuh).
template <class T>
BRRR_DEVICE void row_logsumexp_stats_vec(const T* xr, u64 vocab, typename Acc<T>::type& M,
                                         typename Acc<T>::type& S) {
    typedef typename Acc<T>::type A;
    const int V = 16 / sizeof(T);
    const A neg_inf = -A(inf_f64());
    const Pack<T>* xv = as_packs(xr);
    A m = neg_inf;
    A s = A(0);
    for (u64 p = threadIdx.x; p < vocab / V; p += blockDim.x) {
        const Pack<T> px = xv[p];
        A z[V];
#pragma unroll
        for (int e = 0; e < V; e++) z[e] = to_acc(px.v[e]);
        online_max_sum_pack(m, s, z);
    }
    M = block_reduce(m, 1);
    const A mine = (m == neg_inf) ? A(0) : s * m_exp(m - M);
    S = block_reduce(mine, 0);
}

template <class T, bool VEC>
BRRR_DEVICE void row_stats(const T* xr, u64 vocab, typename Acc<T>::type& M, typename Acc<T>::type& S) {
    if (VEC) {
        row_logsumexp_stats_vec<T>(xr, vocab, M, S);
    } else {
        row_logsumexp_stats<T>(xr, vocab, M, S);
    }
}

template <class T, class I, class L, bool VEC>
BRRR_DEVICE void cross_entropy_impl(L* losses, const T* logits, const I* targets, u64 rows, u64 vocab) {
    typedef typename Acc<T>::type A;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const i64 t = target_of<I>(targets[row]);
        if (t < 0) {  // uniform across the block
            if (threadIdx.x == 0) losses[row] = L(0);
            continue;
        }
        const T* xr = logits + row * vocab;
        A M, S;
        row_stats<T, VEC>(xr, vocab, M, S);
        if (threadIdx.x == 0) {
            const A zt = (u64)t < vocab ? to_acc(xr[t]) : A(nan_f32());
            losses[row] = (L)(M + m_log(S) - zt);
        }
    }
}

// dlogits = (softmax - onehot) * dl over one row, element by element.
template <class T>
BRRR_DEVICE void ce_grad_row(T* dr, const T* xr, u64 vocab, i64 t, typename Acc<T>::type M,
                             typename Acc<T>::type inv, typename Acc<T>::type dl) {
    typedef typename Acc<T>::type A;
    for (u64 j = threadIdx.x; j < vocab; j += blockDim.x) {
        const A p = m_exp(to_acc(xr[j]) - M) * inv;
        const A onehot = ((i64)j == t) ? A(1) : A(0);
        dr[j] = from_acc<T>((p - onehot) * dl);
    }
}

// The same over a row of whole packs.
template <class T>
BRRR_DEVICE void ce_grad_row_vec(T* dr, const T* xr, u64 vocab, i64 t, typename Acc<T>::type M,
                                 typename Acc<T>::type inv, typename Acc<T>::type dl) {
    typedef typename Acc<T>::type A;
    const int V = 16 / sizeof(T);
    const Pack<T>* xv = as_packs(xr);
    Pack<T>* dv = as_packs(dr);
    for (u64 p = threadIdx.x; p < vocab / V; p += blockDim.x) {
        const Pack<T> px = xv[p];
        Pack<T> pd;
#pragma unroll
        for (int e = 0; e < V; e++) {
            const A prob = m_exp(to_acc(px.v[e]) - M) * inv;
            const A onehot = ((i64)(p * V + e) == t) ? A(1) : A(0);
            pd.v[e] = from_acc<T>((prob - onehot) * dl);
        }
        dv[p] = pd;
    }
}

template <class T, class I, class L, bool VEC>
BRRR_DEVICE void cross_entropy_backward_impl(T* dlogits, const T* logits, const I* targets, const L* dlosses,
                                             u64 rows, u64 vocab) {
    typedef typename Acc<T>::type A;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const i64 t = target_of<I>(targets[row]);
        T* dr = dlogits + row * vocab;
        if (t < 0) {
            for (u64 j = threadIdx.x; j < vocab; j += blockDim.x) dr[j] = from_acc<T>(A(0));
            continue;
        }
        const T* xr = logits + row * vocab;
        A M, S;
        row_stats<T, VEC>(xr, vocab, M, S);
        const A dl = (u64)t < vocab ? A(dlosses[row]) : A(nan_f32());
        const A inv = A(1) / S;
        if (VEC) {
            ce_grad_row_vec<T>(dr, xr, vocab, t, M, inv, dl);
        } else {
            ce_grad_row<T>(dr, xr, vocab, t, M, inv, dl);
        }
    }
}

// Losses are f32 (`_l32` is implied), or f64 for f64 logits (`..._l64`, for gradient
// checks in f64).
#define CE_KERNELS_VARIANT(T, S, I, IS, L, LS, VARIANT, VEC)                                  \
    extern "C" __global__ void BRRR_ROWS cross_entropy##VARIANT##_##S##_##IS##LS(L* losses, const T* logits, \
                                                                       const I* targets, u64 rows, u64 vocab) { \
        cross_entropy_impl<T, I, L, VEC>(losses, logits, targets, rows, vocab);                \
    }                                                                                          \
    BRRR_REGISTER(cross_entropy##VARIANT##_##S##_##IS##LS)                                     \
    extern "C" __global__ void BRRR_ROWS cross_entropy_backward##VARIANT##_##S##_##IS##LS(                 \
        T* dlogits, const T* logits, const I* targets, const L* dlosses, u64 rows, u64 vocab) {  \
        cross_entropy_backward_impl<T, I, L, VEC>(dlogits, logits, targets, dlosses, rows, vocab); \
    }                                                                                          \
    BRRR_REGISTER(cross_entropy_backward##VARIANT##_##S##_##IS##LS)

#define CE_KERNELS(T, S, I, IS, L, LS)                      \
    CE_KERNELS_VARIANT(T, S, I, IS, L, LS, , false)         \
    CE_KERNELS_VARIANT(T, S, I, IS, L, LS, _vec, true)

#define CE_FOR(T, S)                       \
    CE_KERNELS(T, S, i32, i32, float, )    \
    CE_KERNELS(T, S, u32, u32, float, )

CE_FOR(f16_t, f16)
CE_FOR(bf16_t, bf16)
CE_FOR(float, f32)
CE_FOR(double, f64)
CE_KERNELS(double, f64, i32, i32, double, _l64)
CE_KERNELS(double, f64, u32, u32, double, _l64)
