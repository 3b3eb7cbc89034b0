// embedding.cu — token-embedding lookup, its backward (a scatter-add) and its inverse (a
// scatter of rows).
//
// Forward: out[i, :] = table[ids[i], :], one block per id, threads across the row.
// An id outside [0, rows) produces a zero row (the GPU cannot return an error; the
// tensor layer checks ids on upload).
//
// Backward: dtable[ids[i], :] += dout[i, :]. Ids repeat (every sequence has many "the"),
// so a naive parallel loop races. Atomics would fix the race but make the sum's order,
// and so its rounding, change from run to run. Instead the table rows are split into
// `buckets` classes (row % buckets), each owned by one warp (v2, v3; a block in v1) that
// walks through all ids in order and adds only the rows of its class. Every table
// element is then updated by exactly one thread, in the order of i: the result is
// deterministic and equal to a sequential loop, in every dtype, without atomics. An id
// outside [0, rows) adds nothing. The id list is staged through shared memory in tiles.

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

// Scatter: table[ids[i], :] = rows[i, :], the forward's inverse (a paged KV cache's
// store of a step's new keys and values). One block per id, threads across the row; the
// ids are distinct (the host's contract), so no two blocks write one row. An id outside
// [0, rows) writes nothing.
template <class T, class I>
BRRR_DEVICE void scatter_rows_impl(T* table, const I* ids, const T* src, u64 n, u64 dim, u64 rows) {
    for (u64 i = blockIdx.x; i < n; i += gridDim.x) {
        u64 row;
        if (!id_in_range<I>(ids[i], rows, row)) continue;
        T* dst = table + row * dim;
        const T* s = src + i * dim;
        for (u64 d = threadIdx.x; d < dim; d += blockDim.x) dst[d] = s[d];
    }
}

#define EMB_TILE 256

// v1, kept for the benchmark (`cuda_bench embedding`) and as the fallback for tables of
// more than 2^32 rows: a block per bucket, and every thread of it walks every id with a
// 64-bit modulo. Only about n / buckets ids match a block, so nearly all of its work is
// the scan, repeated by each of the block's 8 warps and each of its sm_count * 8 blocks.
template <class T, class I>
BRRR_DEVICE void embedding_backward_v1_impl(T* dtable, const I* ids, const T* dout, u64 n, u64 dim, u64 rows,
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

// v2: a warp per bucket, ids scanned 32 at a time with a ballot.
// The block stages a tile of ids with each one's bucket already computed (a u32 modulo,
// once per id and block instead of once per id and thread; the host guarantees that
// rows fit in u32 and falls back to v1 otherwise). Each warp then reads 32 buckets at
// once, one per lane, ballots "is it mine", and walks the set bits from the lowest, so
// its ids come in the order of i; for each one the 32 lanes add the dout row into the
// table row. A warp owns its rows alone and adds in the order of i: the sums, and their
// rounding, are v1's and a sequential loop's, bit for bit, in every dtype.
#define EMB_TILE_V2 1024
#define EMB_NO_BUCKET 0xffffffffu

// dst[d] += g[d] for d = lane, lane + 32, ...: 8 elements per lane loaded before any is
// stored, so one id costs dim / 256 memory round trips rather than dim / 32.
template <class T> BRRR_DEVICE void embedding_add_row_warp(T* dst, const T* g, u64 dim, u32 lane) {
    typedef typename Acc<T>::type A;
    u64 d = lane;
    for (; d + 7 * 32 < dim; d += 8 * 32) {
        A a[8], b[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            a[k] = to_acc(dst[d + 32 * k]);
            b[k] = to_acc(g[d + 32 * k]);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) dst[d + 32 * k] = from_acc<T>(a[k] + b[k]);
    }
    for (; d < dim; d += 32) dst[d] = from_acc<T>(to_acc(dst[d]) + to_acc(g[d]));
}

// Stages ids[start, start + count) as (row, bucket); EMB_NO_BUCKET marks an id outside
// [0, rows), which matches no warp (the forward gives it a zero row; it adds nothing).
template <class I>
BRRR_DEVICE void embedding_stage_tile(u32* tile_row, u32* tile_bucket, const I* ids, u64 start, u32 count,
                                      u32 rows, u32 buckets) {
    for (u32 t = threadIdx.x; t < count; t += blockDim.x) {
        u64 row = 0;
        const bool ok = id_in_range<I>(ids[start + t], rows, row);
        tile_row[t] = (u32)row;
        tile_bucket[t] = ok ? (u32)row % buckets : EMB_NO_BUCKET;
    }
}

template <class T, class I>
BRRR_DEVICE void embedding_backward_v2_impl(T* dtable, const I* ids, const T* dout, u64 n, u64 dim, u32 rows,
                                            u32 buckets) {
    __shared__ u32 tile_row[EMB_TILE_V2];
    __shared__ u32 tile_bucket[EMB_TILE_V2];
    const u32 lane = threadIdx.x & 31;
    const u32 warps = blockDim.x >> 5;
    // Block-uniform loop (it contains __syncthreads); buckets < 2^31 (host), no overflow.
    for (u32 first = blockIdx.x * warps; first < buckets; first += gridDim.x * warps) {
        // In the last block a warp may get a bucket >= buckets: it matches nothing but
        // still takes part in the barriers and ballots.
        const u32 mine = first + (threadIdx.x >> 5);
        for (u64 start = 0; start < n; start += EMB_TILE_V2) {
            const u32 count = (u32)(n - start < EMB_TILE_V2 ? n - start : EMB_TILE_V2);
            __syncthreads();  // every warp is done with the previous tile
            embedding_stage_tile<I>(tile_row, tile_bucket, ids, start, count, rows, buckets);
            __syncthreads();
            for (u32 t0 = 0; t0 < count; t0 += 32) {
                const u32 t = t0 + lane;
                const bool match = t < count && tile_bucket[t] == mine;
                unsigned set = __ballot_sync(0xffffffffu, match);  // warp-uniform
                while (set != 0) {
                    const u32 j = t0 + (u32)(__ffs((int)set) - 1);  // lowest bit: smallest i
                    set &= set - 1;
                    embedding_add_row_warp<T>(dtable + (u64)tile_row[j] * dim, dout + (start + j) * dim, dim, lane);
                }
            }
        }
    }
}

// v3 (what the backend runs): v2's warp per bucket, with the additions of one row
// batched. Text is skewed: in GPT-2's tokens a few ids make up several percent of a batch
// each, so the warp owning such a row adds hundreds of dout rows to it, one after another,
// and in v2 each addition is a read-modify-write of the table row with at most 8 loads
// per lane in flight. v3 first compacts the warp's matches in a tile into a list (a ballot
// and a prefix count: the order of i is kept), then takes each run of consecutive matches
// with the same row at once: the table row is read once into registers, the dout rows of
// four ids are loaded together, added in the order of i, and the row is written once.
// Each addition is still rounded to T (`round_to<T>`), so the bits are v1's and v2's.
#define EMB_V3_WARPS 8  // the host launches 256 threads: the match lists are per warp

template <class T> BRRR_DEVICE typename Acc<T>::type round_to(typename Acc<T>::type x) {
    return to_acc(from_acc<T>(x));
}

// dst[d] += g_j[d] for each j in js[0..count), in that order, for the 8 columns
// d = d0, d0 + 32, ..., d0 + 224 (g_j = dout + j * dim): the table's read once, the dout
// rows of four ids loaded before any of them is added. FULL: all 8 columns are inside the
// row, so no load is conditional; a conditional load compiles to a branch around it, and
// with the branches ptxas issued the 32 loads of a batch one after another (seen in the
// bf16 kernel's SASS), not together.
template <class T, bool FULL>
BRRR_DEVICE void embedding_add_run_cols(T* dst, const T* dout, const unsigned short* js, u32 count, u64 dim,
                                        u64 d0) {
    typedef typename Acc<T>::type A;
    A acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = FULL || d0 + 32 * k < dim ? to_acc(dst[d0 + 32 * k]) : A(0);
    u32 c = 0;
    for (; c + 4 <= count; c += 4) {
        // Raw values first, converted after: all 32 loads are in flight before the
        // first addition needs one.
        T g[4][8];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const T* src = dout + (u64)js[c + q] * dim;
#pragma unroll
            for (int k = 0; k < 8; k++) g[q][k] = FULL || d0 + 32 * k < dim ? src[d0 + 32 * k] : from_acc<T>(A(0));
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] = round_to<T>(acc[k] + to_acc(g[q][k]));
        }
    }
    for (; c < count; c++) {
        const T* src = dout + (u64)js[c] * dim;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (FULL || d0 + 32 * k < dim) acc[k] = round_to<T>(acc[k] + to_acc(src[d0 + 32 * k]));
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        if (FULL || d0 + 32 * k < dim) dst[d0 + 32 * k] = from_acc<T>(acc[k]);
    }
}

// A run of one row's ids (js, in the order of i) added into dst: whole groups of 8
// columns per lane without bounds checks, then the row's tail.
template <class T>
BRRR_DEVICE void embedding_add_run_warp(T* dst, const T* dout, const unsigned short* js, u32 count, u64 dim,
                                        u32 lane) {
    u64 d0 = lane;
    for (; d0 + 7 * 32 < dim; d0 += 8 * 32) embedding_add_run_cols<T, true>(dst, dout, js, count, dim, d0);
    if (d0 < dim) embedding_add_run_cols<T, false>(dst, dout, js, count, dim, d0);
}

// The positions t in [0, count) of the staged tile whose bucket is `mine`, in increasing
// order, into list; returns how many (the same in every lane).
BRRR_DEVICE u32 embedding_my_matches(unsigned short* list, const u32* tile_bucket, u32 count, u32 mine, u32 lane) {
    u32 m = 0;
    for (u32 t0 = 0; t0 < count; t0 += 32) {
        const u32 t = t0 + lane;
        const bool match = t < count && tile_bucket[t] == mine;
        const unsigned set = __ballot_sync(0xffffffffu, match);  // warp-uniform
        if (match) list[m + __popc(set & ((1u << lane) - 1u))] = (unsigned short)t;
        m += (u32)__popc(set);
    }
    __syncwarp();  // the list is written by every lane and read by all
    return m;
}

template <class T, class I>
BRRR_DEVICE void embedding_backward_v3_impl(T* dtable, const I* ids, const T* dout, u64 n, u64 dim, u32 rows,
                                            u32 buckets) {
    __shared__ u32 tile_row[EMB_TILE_V2];
    __shared__ u32 tile_bucket[EMB_TILE_V2];
    __shared__ unsigned short lists[EMB_V3_WARPS][EMB_TILE_V2];
    const u32 lane = threadIdx.x & 31;
    const u32 warp = threadIdx.x >> 5;
    const u32 warps = blockDim.x >> 5;  // at most EMB_V3_WARPS (launch bounds: 256)
    unsigned short* list = lists[warp];
    for (u32 first = blockIdx.x * warps; first < buckets; first += gridDim.x * warps) {
        const u32 mine = first + warp;  // >= buckets in part of the last block: no matches
        for (u64 start = 0; start < n; start += EMB_TILE_V2) {
            const u32 count = (u32)(n - start < EMB_TILE_V2 ? n - start : EMB_TILE_V2);
            __syncthreads();  // every warp is done with the previous tile
            embedding_stage_tile<I>(tile_row, tile_bucket, ids, start, count, rows, buckets);
            __syncthreads();
            const u32 m = embedding_my_matches(list, tile_bucket, count, mine, lane);
            // Runs of consecutive matches with one row; rows are independent, so a row
            // that comes back later in the list starts a new run, in order.
            for (u32 a = 0; a < m;) {
                const u32 row = tile_row[list[a]];
                u32 b = a + 1;
                while (b < m && tile_row[list[b]] == row) b++;
                embedding_add_run_warp<T>(dtable + (u64)row * dim, dout + start * dim, list + a, b - a, dim, lane);
                a = b;
            }
            __syncwarp();  // every lane has read the list before the next tile rewrites it
        }
    }
}

#define EMBEDDING_KERNELS(T, S, I, IS)                                                         \
    extern "C" __global__ void BRRR_ROWS embedding_##S##_##IS(T* out, const I* ids, const T* table, u64 n, u64 dim, \
                                                     u64 rows) {                               \
        embedding_impl<T, I>(out, ids, table, n, dim, rows);                                   \
    }                                                                                          \
    BRRR_REGISTER(embedding_##S##_##IS)                                                        \
    extern "C" __global__ void BRRR_ROWS scatter_rows_##S##_##IS(T* table, const I* ids, const T* src, u64 n, \
                                                                 u64 dim, u64 rows) {          \
        scatter_rows_impl<T, I>(table, ids, src, n, dim, rows);                                \
    }                                                                                          \
    BRRR_REGISTER(scatter_rows_##S##_##IS)                                                     \
    extern "C" __global__ void BRRR_FLAT embedding_backward_v2_##S##_##IS(T* dtable, const I* ids, const T* dout, \
                                                                 u64 n, u64 dim, u64 rows, u64 buckets) { \
        /* the host checked that rows (and so buckets) fit in u32 */                           \
        embedding_backward_v2_impl<T, I>(dtable, ids, dout, n, dim, (u32)rows, (u32)buckets);  \
    }                                                                                          \
    BRRR_REGISTER(embedding_backward_v2_##S##_##IS)                                            \
    extern "C" __global__ void BRRR_ROWS embedding_backward_v1_##S##_##IS(T* dtable, const I* ids, const T* dout, \
                                                                 u64 n, u64 dim, u64 rows, u64 buckets) { \
        embedding_backward_v1_impl<T, I>(dtable, ids, dout, n, dim, rows, buckets);            \
    }                                                                                          \
    BRRR_REGISTER(embedding_backward_v1_##S##_##IS)                                            \
    extern "C" __global__ void BRRR_FLAT embedding_backward_v3_##S##_##IS(T* dtable, const I* ids, const T* dout, \
                                                                 u64 n, u64 dim, u64 rows, u64 buckets) { \
        /* the host checked that rows (and so buckets) fit in u32 */                           \
        embedding_backward_v3_impl<T, I>(dtable, ids, dout, n, dim, (u32)rows, (u32)buckets);  \
    }                                                                                          \
    BRRR_REGISTER(embedding_backward_v3_##S##_##IS)

#define EMBEDDING_FOR(T, S)             \
    EMBEDDING_KERNELS(T, S, u32, u32)   \
    EMBEDDING_KERNELS(T, S, i32, i32)

EMBEDDING_FOR(f16_t, f16)
EMBEDDING_FOR(bf16_t, bf16)
EMBEDDING_FOR(float, f32)
EMBEDDING_FOR(double, f64)
