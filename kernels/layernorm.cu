// layernorm.cu — LayerNorm over the last axis of a contiguous [rows, cols] matrix
// (Ba et al. 2016): y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps),
// with the population variance, as PyTorch.
//
// Forward: one block per row; mean and variance are computed in two passes over the row
// (the second pass sums (x - mean)^2, which does not lose digits the way E[x^2] - mean^2
// does). The row is small (768 values for GPT-2 small) and stays in L1 between passes.
// mean and rstd are saved (f32) for the backward.
//
// Backward, with xhat = (x - mean) * rstd and g = dy * gamma (f64 inputs recompute mean and
// rstd in f64 instead of using the saved f32 ones, so gradient checks in f64 are exact to
// f64 precision; the statistics used are passed to the column sums through `stats`):
//   dx     = rstd * (g - mean(g) - xhat * mean(g * xhat))        one block per row
//   dgamma += sum over rows of dy * xhat                          column sums
//   dbeta  += sum over rows of dy
// The column sums are done without atomics, so they are bit-for-bit reproducible:
// blocks of 32 columns x a chunk of rows write partial sums, then one thread per column
// adds the partials in a fixed order and accumulates into dgamma / dbeta.

template <class T>
BRRR_DEVICE void layernorm_impl(T* y, float* mean_out, float* rstd_out, const T* x, const T* gamma,
                                const T* beta, u64 rows, u64 cols, float eps) {
    typedef typename Acc<T>::type A;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        T* yr = y + row * cols;
        A s = A(0);
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) s += to_acc(xr[j]);
        const A mean = block_reduce(s, 0) / A(cols);
        A v = A(0);
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
            const A d = to_acc(xr[j]) - mean;
            v += d * d;
        }
        const A var = block_reduce(v, 0) / A(cols);
        const A rstd = A(1) / m_sqrt(var + A(eps));
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
            const A xhat = (to_acc(xr[j]) - mean) * rstd;
            yr[j] = from_acc<T>(xhat * to_acc(gamma[j]) + to_acc(beta[j]));
        }
        if (threadIdx.x == 0) {
            mean_out[row] = (float)mean;
            rstd_out[row] = (float)rstd;
        }
    }
}

// The row statistics the backward uses: the saved f32 ones, or for f64 recomputed in f64
// exactly as the forward computes them.
template <class T>
BRRR_DEVICE void backward_row_stats(const T* xr, u64 cols, float mean_saved, float rstd_saved, float eps,
                                    typename Acc<T>::type& mu, typename Acc<T>::type& rs) {
    typedef typename Acc<T>::type A;
    if (sizeof(A) == sizeof(float)) {
        mu = A(mean_saved);
        rs = A(rstd_saved);
        return;
    }
    A s = A(0);
    for (u64 j = threadIdx.x; j < cols; j += blockDim.x) s += to_acc(xr[j]);
    mu = block_reduce(s, 0) / A(cols);
    A v = A(0);
    for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
        const A d = to_acc(xr[j]) - mu;
        v += d * d;
    }
    rs = A(1) / m_sqrt(block_reduce(v, 0) / A(cols) + A(eps));
}

template <class T>
BRRR_DEVICE void layernorm_backward_dx_impl(T* dx, typename Acc<T>::type* stats, const T* dy, const T* x,
                                            const T* gamma, const float* mean, const float* rstd, u64 rows,
                                            u64 cols, float eps) {
    typedef typename Acc<T>::type A;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        const T* dyr = dy + row * cols;
        T* dxr = dx + row * cols;
        A mu, rs;
        backward_row_stats<T>(xr, cols, mean[row], rstd[row], eps, mu, rs);
        if (threadIdx.x == 0) {
            stats[2 * row] = mu;
            stats[2 * row + 1] = rs;
        }
        A sg = A(0);
        A sgx = A(0);
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
            const A xhat = (to_acc(xr[j]) - mu) * rs;
            const A g = to_acc(dyr[j]) * to_acc(gamma[j]);
            sg += g;
            sgx += g * xhat;
        }
        const A mean_g = block_reduce(sg, 0) / A(cols);
        const A mean_gx = block_reduce(sgx, 0) / A(cols);
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
            const A xhat = (to_acc(xr[j]) - mu) * rs;
            const A g = to_acc(dyr[j]) * to_acc(gamma[j]);
            dxr[j] = from_acc<T>((g - mean_g - xhat * mean_gx) * rs);
        }
    }
}

// The forward and the dx backward over rows of whole 16-byte packs, with gamma (and beta)
// 16-byte aligned (the host checks): the same passes, 8 bf16 per load instead of one,
// so a 768-wide row is 96 threads instead of 192 each waiting on 2-byte loads.
template <class T>
BRRR_DEVICE void layernorm_vec_impl(T* y, float* mean_out, float* rstd_out, const T* x, const T* gamma,
                                    const T* beta, u64 rows, u64 cols, float eps) {
    typedef typename Acc<T>::type A;
    const int V = 16 / sizeof(T);
    const u64 packs = cols / V;
    const Pack<T>* gv = as_packs(gamma);
    const Pack<T>* bv = as_packs(beta);
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const Pack<T>* xr = as_packs(x + row * cols);
        Pack<T>* yr = as_packs(y + row * cols);
        A s = A(0);
        for (u64 p = threadIdx.x; p < packs; p += blockDim.x) {
            const Pack<T> px = xr[p];
#pragma unroll
            for (int e = 0; e < V; e++) s += to_acc(px.v[e]);
        }
        const A mean = block_reduce(s, 0) / A(cols);
        A v = A(0);
        for (u64 p = threadIdx.x; p < packs; p += blockDim.x) {
            const Pack<T> px = xr[p];
#pragma unroll
            for (int e = 0; e < V; e++) {
                const A d = to_acc(px.v[e]) - mean;
                v += d * d;
            }
        }
        const A var = block_reduce(v, 0) / A(cols);
        const A rstd = A(1) / m_sqrt(var + A(eps));
        for (u64 p = threadIdx.x; p < packs; p += blockDim.x) {
            const Pack<T> px = xr[p];
            const Pack<T> pg = gv[p];
            const Pack<T> pb = bv[p];
            Pack<T> py;
#pragma unroll
            for (int e = 0; e < V; e++) {
                const A xhat = (to_acc(px.v[e]) - mean) * rstd;
                py.v[e] = from_acc<T>(xhat * to_acc(pg.v[e]) + to_acc(pb.v[e]));
            }
            yr[p] = py;
        }
        if (threadIdx.x == 0) {
            mean_out[row] = (float)mean;
            rstd_out[row] = (float)rstd;
        }
    }
}

template <class T>
BRRR_DEVICE void layernorm_backward_dx_vec_impl(T* dx, typename Acc<T>::type* stats, const T* dy, const T* x,
                                                const T* gamma, const float* mean, const float* rstd, u64 rows,
                                                u64 cols, float eps) {
    typedef typename Acc<T>::type A;
    const int V = 16 / sizeof(T);
    const u64 packs = cols / V;
    const Pack<T>* gv = as_packs(gamma);
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const Pack<T>* xr = as_packs(x + row * cols);
        const Pack<T>* dyr = as_packs(dy + row * cols);
        Pack<T>* dxr = as_packs(dx + row * cols);
        A mu, rs;
        backward_row_stats<T>(x + row * cols, cols, mean[row], rstd[row], eps, mu, rs);
        if (threadIdx.x == 0) {
            stats[2 * row] = mu;
            stats[2 * row + 1] = rs;
        }
        A sg = A(0);
        A sgx = A(0);
        for (u64 p = threadIdx.x; p < packs; p += blockDim.x) {
            const Pack<T> px = xr[p];
            const Pack<T> pd = dyr[p];
            const Pack<T> pg = gv[p];
#pragma unroll
            for (int e = 0; e < V; e++) {
                const A xhat = (to_acc(px.v[e]) - mu) * rs;
                const A g = to_acc(pd.v[e]) * to_acc(pg.v[e]);
                sg += g;
                sgx += g * xhat;
            }
        }
        const A mean_g = block_reduce(sg, 0) / A(cols);
        const A mean_gx = block_reduce(sgx, 0) / A(cols);
        for (u64 p = threadIdx.x; p < packs; p += blockDim.x) {
            const Pack<T> px = xr[p];
            const Pack<T> pd = dyr[p];
            const Pack<T> pg = gv[p];
            Pack<T> out;
#pragma unroll
            for (int e = 0; e < V; e++) {
                const A xhat = (to_acc(px.v[e]) - mu) * rs;
                const A g = to_acc(pd.v[e]) * to_acc(pg.v[e]);
                out.v[e] = from_acc<T>((g - mean_g - xhat * mean_gx) * rs);
            }
            dxr[p] = out;
        }
    }
}

// Block (32, 8): column c = blockIdx.x * 32 + threadIdx.x, rows
// [blockIdx.y * rows_per_chunk, ...) split over threadIdx.y. Writes
// partial[chunk][c] = sum dy * xhat and partial[chunk][cols + c] = sum dy.
template <class T>
BRRR_DEVICE void layernorm_backward_partial_impl(typename Acc<T>::type* partial, const T* dy, const T* x,
                                                 const typename Acc<T>::type* stats, u64 rows, u64 cols,
                                                 u64 rows_per_chunk) {
    typedef typename Acc<T>::type A;
    __shared__ A sdg[8][33];
    __shared__ A sdb[8][33];
    const u64 c = (u64)blockIdx.x * 32 + threadIdx.x;
    const u64 r0 = (u64)blockIdx.y * rows_per_chunk;
    u64 r1 = r0 + rows_per_chunk;
    if (r1 > rows) r1 = rows;
    A dg = A(0);
    A db = A(0);
    if (c < cols) {
        for (u64 r = r0 + threadIdx.y; r < r1; r += 8) {
            const A d = to_acc(dy[r * cols + c]);
            const A xhat = (to_acc(x[r * cols + c]) - stats[2 * r]) * stats[2 * r + 1];
            dg += d * xhat;
            db += d;
        }
    }
    sdg[threadIdx.y][threadIdx.x] = dg;
    sdb[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        for (int k = 1; k < 8; k++) {
            dg += sdg[k][threadIdx.x];
            db += sdb[k][threadIdx.x];
        }
        partial[(u64)blockIdx.y * 2 * cols + c] = dg;
        partial[(u64)blockIdx.y * 2 * cols + cols + c] = db;
    }
}

template <class T>
BRRR_DEVICE void layernorm_backward_params_impl(T* dgamma, T* dbeta, const typename Acc<T>::type* partial,
                                                u64 chunks, u64 cols) {
    typedef typename Acc<T>::type A;
    for (u64 c = global_thread_id(); c < cols; c += global_thread_count()) {
        A dg = A(0);
        A db = A(0);
        for (u64 k = 0; k < chunks; k++) {
            dg += partial[k * 2 * cols + c];
            db += partial[k * 2 * cols + cols + c];
        }
        dgamma[c] = from_acc<T>(to_acc(dgamma[c]) + dg);
        dbeta[c] = from_acc<T>(to_acc(dbeta[c]) + db);
    }
}

#define LAYERNORM_KERNELS(T, S)                                                                \
    extern "C" __global__ void BRRR_ROWS layernorm_##S(T* y, float* mean, float* rstd, const T* x, const T* gamma, \
                                             const T* beta, u64 rows, u64 cols, float eps) {  \
        layernorm_impl<T>(y, mean, rstd, x, gamma, beta, rows, cols, eps);                     \
    }                                                                                          \
    BRRR_REGISTER(layernorm_##S)                                                               \
    extern "C" __global__ void BRRR_ROWS layernorm_backward_dx_##S(T* dx, Acc<T>::type* stats, const T* dy, const T* x, \
                                                         const T* gamma, const float* mean, const float* rstd, \
                                                         u64 rows, u64 cols, float eps) {      \
        layernorm_backward_dx_impl<T>(dx, stats, dy, x, gamma, mean, rstd, rows, cols, eps);   \
    }                                                                                          \
    BRRR_REGISTER(layernorm_backward_dx_##S)                                                   \
    extern "C" __global__ void BRRR_ROWS layernorm_vec_##S(T* y, float* mean, float* rstd, const T* x,         \
                                                 const T* gamma, const T* beta, u64 rows, u64 cols, float eps) { \
        layernorm_vec_impl<T>(y, mean, rstd, x, gamma, beta, rows, cols, eps);                 \
    }                                                                                          \
    BRRR_REGISTER(layernorm_vec_##S)                                                           \
    extern "C" __global__ void BRRR_ROWS layernorm_backward_dx_vec_##S(                                          \
        T* dx, Acc<T>::type* stats, const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd, \
        u64 rows, u64 cols, float eps) {                                                       \
        layernorm_backward_dx_vec_impl<T>(dx, stats, dy, x, gamma, mean, rstd, rows, cols, eps); \
    }                                                                                          \
    BRRR_REGISTER(layernorm_backward_dx_vec_##S)                                               \
    extern "C" __global__ void BRRR_FLAT layernorm_backward_partial_##S(Acc<T>::type* partial, const T* dy, const T* x, \
                                                              const Acc<T>::type* stats, u64 rows, u64 cols, \
                                                              u64 rows_per_chunk) {            \
        layernorm_backward_partial_impl<T>(partial, dy, x, stats, rows, cols, rows_per_chunk); \
    }                                                                                          \
    BRRR_REGISTER(layernorm_backward_partial_##S)                                              \
    extern "C" __global__ void BRRR_FLAT layernorm_backward_params_##S(T* dgamma, T* dbeta, const Acc<T>::type* partial, \
                                                             u64 chunks, u64 cols) {           \
        layernorm_backward_params_impl<T>(dgamma, dbeta, partial, chunks, cols);               \
    }                                                                                          \
    BRRR_REGISTER(layernorm_backward_params_##S)

LAYERNORM_KERNELS(f16_t, f16)
LAYERNORM_KERNELS(bf16_t, bf16)
LAYERNORM_KERNELS(float, f32)
LAYERNORM_KERNELS(double, f64)
