// softmax.cu — row-wise softmax of a contiguous [rows, cols] matrix, y = softmax(scale * x),
// optionally causal (row r sees columns j <= r % cols), and its backward.
//
// One block per row. The forward reads the row twice, not three times: each thread keeps
// a running maximum m and a running sum s of exp(z - m), rescaling s whenever m grows
// (the "online softmax" of Milakov & Gimelshein, 2018). The block then combines the
// per-thread (m, s) pairs: M = max m, S = sum s * exp(m - M). A second pass writes
// exp(z - M) / S. Masked entries are written as exact zeros, so no mask tensor exists.

template <class T>
BRRR_DEVICE void softmax_impl(T* y, const T* x, u64 rows, u64 cols, float scale_f, int causal) {
    typedef typename Acc<T>::type A;
    const A scale = A(scale_f);
    const A neg_inf = -A(inf_f64());
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        T* yr = y + row * cols;
        const u64 valid = causal ? (row % cols) + 1 : cols;
        A m = neg_inf;
        A s = A(0);
        for (u64 j = threadIdx.x; j < valid; j += blockDim.x) {
            const A z = scale * to_acc(xr[j]);
            if (z == neg_inf) continue;  // contributes exp(-inf) = 0
            if (z > m) {
                s = s * m_exp(m - z) + A(1);
                m = z;
            } else {
                s += m_exp(z - m);
            }
        }
        const A row_max = block_reduce(m, 1);
        const A mine = (m == neg_inf) ? A(0) : s * m_exp(m - row_max);
        const A row_sum = block_reduce(mine, 0);
        const A inv = A(1) / row_sum;
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
            A out = A(0);
            if (j < valid) out = m_exp(scale * to_acc(xr[j]) - row_max) * inv;
            yr[j] = from_acc<T>(out);
        }
    }
}

// dx = scale * y * (dy - sum_j dy_j y_j), zero where masked.
template <class T>
BRRR_DEVICE void softmax_backward_impl(T* dx, const T* y, const T* dy, u64 rows, u64 cols, float scale_f,
                                       int causal) {
    typedef typename Acc<T>::type A;
    const A scale = A(scale_f);
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* yr = y + row * cols;
        const T* dyr = dy + row * cols;
        T* dxr = dx + row * cols;
        const u64 valid = causal ? (row % cols) + 1 : cols;
        A dot = A(0);
        for (u64 j = threadIdx.x; j < valid; j += blockDim.x) dot += to_acc(dyr[j]) * to_acc(yr[j]);
        dot = block_reduce(dot, 0);
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
            A out = A(0);
            if (j < valid) out = scale * to_acc(yr[j]) * (to_acc(dyr[j]) - dot);
            dxr[j] = from_acc<T>(out);
        }
    }
}

// The same two functions over rows of whole 16-byte packs (cols % (16 / sizeof(T)) == 0),
// the attention scores' case: each thread moves one pack (8 bf16) per load instead of one
// element, so a row needs 8x fewer threads and more rows are in flight per SM. The
// online max/sum takes a pack at a time: its largest valid entry rescales the running
// sum once, then every valid entry is added. Different partial sums than the element
// kernels, the same function (online_max_sum_pack in common.cuh).
template <class T>
BRRR_DEVICE void softmax_vec_impl(T* y, const T* x, u64 rows, u64 cols, float scale_f, int causal) {
    typedef typename Acc<T>::type A;
    const int V = 16 / sizeof(T);
    const A scale = A(scale_f);
    const A neg_inf = -A(inf_f64());
    const u64 packs = cols / V;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const Pack<T>* xr = as_packs(x + row * cols);
        Pack<T>* yr = as_packs(y + row * cols);
        const u64 valid = causal ? (row % cols) + 1 : cols;
        A m = neg_inf;
        A s = A(0);
        for (u64 p = threadIdx.x; p * V < valid; p += blockDim.x) {
            const Pack<T> px = xr[p];
            A z[V];
#pragma unroll
            for (int e = 0; e < V; e++) z[e] = p * V + e < valid ? scale * to_acc(px.v[e]) : neg_inf;
            online_max_sum_pack(m, s, z);
        }
        const A row_max = block_reduce(m, 1);
        const A mine = (m == neg_inf) ? A(0) : s * m_exp(m - row_max);
        const A row_sum = block_reduce(mine, 0);
        const A inv = A(1) / row_sum;
        for (u64 p = threadIdx.x; p < packs; p += blockDim.x) {
            Pack<T> py;
            if (p * V < valid) {
                const Pack<T> px = xr[p];
#pragma unroll
                for (int e = 0; e < V; e++) {
                    const A out = p * V + e < valid ? m_exp(scale * to_acc(px.v[e]) - row_max) * inv : A(0);
                    py.v[e] = from_acc<T>(out);
                }
            } else {
#pragma unroll
                for (int e = 0; e < V; e++) py.v[e] = from_acc<T>(A(0));
            }
            yr[p] = py;
        }
    }
}

template <class T>
BRRR_DEVICE void softmax_backward_vec_impl(T* dx, const T* y, const T* dy, u64 rows, u64 cols, float scale_f,
                                           int causal) {
    typedef typename Acc<T>::type A;
    const int V = 16 / sizeof(T);
    const A scale = A(scale_f);
    const u64 packs = cols / V;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const Pack<T>* yr = as_packs(y + row * cols);
        const Pack<T>* dyr = as_packs(dy + row * cols);
        Pack<T>* dxr = as_packs(dx + row * cols);
        const u64 valid = causal ? (row % cols) + 1 : cols;
        A dot = A(0);
        for (u64 p = threadIdx.x; p * V < valid; p += blockDim.x) {
            const Pack<T> py = yr[p];
            const Pack<T> pd = dyr[p];
#pragma unroll
            for (int e = 0; e < V; e++) {
                if (p * V + e < valid) dot += to_acc(pd.v[e]) * to_acc(py.v[e]);
            }
        }
        dot = block_reduce(dot, 0);
        for (u64 p = threadIdx.x; p < packs; p += blockDim.x) {
            Pack<T> px;
            if (p * V < valid) {
                const Pack<T> py = yr[p];
                const Pack<T> pd = dyr[p];
#pragma unroll
                for (int e = 0; e < V; e++) {
                    const A out = p * V + e < valid ? scale * to_acc(py.v[e]) * (to_acc(pd.v[e]) - dot) : A(0);
                    px.v[e] = from_acc<T>(out);
                }
            } else {
#pragma unroll
                for (int e = 0; e < V; e++) px.v[e] = from_acc<T>(A(0));
            }
            dxr[p] = px;
        }
    }
}

// Causal softmax with a document mask (packed sequences): rows are [batch, heads, T]
// blocks of T = cols columns; row r is query i = r % T of sequence b = r / T / heads and
// sees column j only if j <= i and seg[b*T + j] == seg[b*T + i]. The same online max/sum
// as softmax_impl over the visible entries; masked entries are written as exact zeros.
// The gradient is softmax_backward unchanged (y = 0 where masked).
template <class T>
BRRR_DEVICE void softmax_segmented_impl(T* y, const T* x, const u32* seg, u64 rows, u64 cols, u64 heads,
                                        float scale_f) {
    typedef typename Acc<T>::type A;
    const A scale = A(scale_f);
    const A neg_inf = -A(inf_f64());
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        T* yr = y + row * cols;
        const u64 i = row % cols;
        const u32* ids = seg + (row / cols / heads) * cols;
        const u32 mine_id = ids[i];
        A m = neg_inf;
        A s = A(0);
        for (u64 j = threadIdx.x; j <= i; j += blockDim.x) {
            if (ids[j] != mine_id) continue;
            const A z = scale * to_acc(xr[j]);
            if (z == neg_inf) continue;
            if (z > m) {
                s = s * m_exp(m - z) + A(1);
                m = z;
            } else {
                s += m_exp(z - m);
            }
        }
        const A row_max = block_reduce(m, 1);
        const A mine = (m == neg_inf) ? A(0) : s * m_exp(m - row_max);
        const A row_sum = block_reduce(mine, 0);
        const A inv = A(1) / row_sum;
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
            A out = A(0);
            if (j <= i && ids[j] == mine_id) out = m_exp(scale * to_acc(xr[j]) - row_max) * inv;
            yr[j] = from_acc<T>(out);
        }
    }
}

#define SOFTMAX_KERNELS(T, S)                                                                  \
    extern "C" __global__ void BRRR_ROWS softmax_##S(T* y, const T* x, u64 rows, u64 cols, float scale, int causal) { \
        softmax_impl<T>(y, x, rows, cols, scale, causal);                                      \
    }                                                                                          \
    BRRR_REGISTER(softmax_##S)                                                                 \
    extern "C" __global__ void BRRR_ROWS softmax_backward_##S(T* dx, const T* y, const T* dy, u64 rows, u64 cols, \
                                                    float scale, int causal) {                 \
        softmax_backward_impl<T>(dx, y, dy, rows, cols, scale, causal);                        \
    }                                                                                          \
    BRRR_REGISTER(softmax_backward_##S)                                                        \
    extern "C" __global__ void BRRR_ROWS softmax_vec_##S(T* y, const T* x, u64 rows, u64 cols, float scale, \
                                               int causal) {                                   \
        softmax_vec_impl<T>(y, x, rows, cols, scale, causal);                                  \
    }                                                                                          \
    BRRR_REGISTER(softmax_vec_##S)                                                             \
    extern "C" __global__ void BRRR_ROWS softmax_backward_vec_##S(T* dx, const T* y, const T* dy, u64 rows, \
                                                        u64 cols, float scale, int causal) {   \
        softmax_backward_vec_impl<T>(dx, y, dy, rows, cols, scale, causal);                    \
    }                                                                                          \
    BRRR_REGISTER(softmax_backward_vec_##S)                                                    \
    extern "C" __global__ void BRRR_ROWS softmax_segmented_##S(T* y, const T* x, const u32* seg, u64 rows,    \
                                                     u64 cols, u64 heads, float scale) {       \
        softmax_segmented_impl<T>(y, x, seg, rows, cols, heads, scale);                        \
    }                                                                                          \
    BRRR_REGISTER(softmax_segmented_##S)

SOFTMAX_KERNELS(f16_t, f16)
SOFTMAX_KERNELS(bf16_t, bf16)
SOFTMAX_KERNELS(float, f32)
SOFTMAX_KERNELS(double, f64)
