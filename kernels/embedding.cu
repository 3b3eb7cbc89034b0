// embedding.cu — token-embedding lookup and its backward (a scatter-add).
//
// Forward: out[i, :] = table[ids[i], :], one block per id, threads across the row.
// An id outside [0, rows) produces a zero row (the GPU cannot return an error; the
// tensor layer checks ids on upload).
//
// Backward: dtable[ids[i], :] += dout[i, :]. Ids repeat (every sequence has many "the"),
// so a naive parallel loop races. Atomics would fix the race but make the sum's order,
// and so its rounding, change from run to run. Instead the table rows are split into
// `buckets` classes (id % buckets); block b walks through all ids in order and adds only
// the rows of its class. Every table element is then updated by exactly one thread, in
// the order of i: the result is deterministic and equal to a sequential loop, in every
// dtype, without atomics. The id list is staged through shared memory in tiles.

template <class I> BRRR_DEVICE bool id_in_range(I id, u64 rows, u64& row);
template <> BRRR_DEVICE bool id_in_range<u32>(u32 id, u64 rows, u64& row) {
    row = (u64)id;
    return row < rows;
}
template <> BRRR_DEVICE bool id_in_range<i32>(i32 id, u64 rows, u64& row) {
    if (id < 0) return false;
    row = (u64)id;
    return row < rows;
}

template <class T, class I>
BRRR_DEVICE void embedding_impl(T* out, const I* ids, const T* table, u64 n, u64 dim, u64 rows) {
    for (u64 i = blockIdx.x; i < n; i += gridDim.x) {
        u64 row;
        const bool ok = id_in_range<I>(ids[i], rows, row);
        T* o = out + i * dim;
        if (ok) {
            const T* src = table + row * dim;
            for (u64 d = threadIdx.x; d < dim; d += blockDim.x) o[d] = src[d];
        } else {
            for (u64 d = threadIdx.x; d < dim; d += blockDim.x) o[d] = from_acc<T>(0.0f);
        }
    }
}

#define EMB_TILE 256

template <class T, class I>
BRRR_DEVICE void embedding_backward_impl(T* dtable, const I* ids, const T* dout, u64 n, u64 dim, u64 rows,
                                         u64 buckets) {
    __shared__ I tile[EMB_TILE];
    for (u64 b = blockIdx.x; b < buckets; b += gridDim.x) {
        for (u64 start = 0; start < n; start += EMB_TILE) {
            u64 count = n - start;
            if (count > EMB_TILE) count = EMB_TILE;
            __syncthreads();  // the previous tile has been consumed
            for (u64 t = threadIdx.x; t < count; t += blockDim.x) tile[t] = ids[start + t];
            __syncthreads();
            for (u64 t = 0; t < count; t++) {
                u64 row;
                if (!id_in_range<I>(tile[t], rows, row) || row % buckets != b) continue;
                const T* g = dout + (start + t) * dim;
                T* dst = dtable + row * dim;
                for (u64 d = threadIdx.x; d < dim; d += blockDim.x) {
                    dst[d] = from_acc<T>(to_acc(dst[d]) + to_acc(g[d]));
                }
            }
        }
    }
}

#define EMBEDDING_KERNELS(T, S, I, IS)                                                         \
    extern "C" __global__ void BRRR_ROWS embedding_##S##_##IS(T* out, const I* ids, const T* table, u64 n, u64 dim, \
                                                     u64 rows) {                               \
        embedding_impl<T, I>(out, ids, table, n, dim, rows);                                   \
    }                                                                                          \
    BRRR_REGISTER(embedding_##S##_##IS)                                                        \
    extern "C" __global__ void BRRR_ROWS embedding_backward_##S##_##IS(T* dtable, const I* ids, const T* dout, u64 n, \
                                                              u64 dim, u64 rows, u64 buckets) { \
        embedding_backward_impl<T, I>(dtable, ids, dout, n, dim, rows, buckets);               \
    }                                                                                          \
    BRRR_REGISTER(embedding_backward_##S##_##IS)

#define EMBEDDING_FOR(T, S)             \
    EMBEDDING_KERNELS(T, S, u32, u32)   \
    EMBEDDING_KERNELS(T, S, i32, i32)

EMBEDDING_FOR(f16_t, f16)
EMBEDDING_FOR(bf16_t, bf16)
EMBEDDING_FOR(float, f32)
EMBEDDING_FOR(double, f64)
