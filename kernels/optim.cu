// optim.cu — the optimizer step and the two mixed-precision kernels.
//
// AdamW (Loshchilov & Hutter 2019, decoupled weight decay), fused into one pass: each
// element's parameter, gradient and two moments are read once and written once, where
// an unfused step would launch ~10 elementwise kernels.
//
// The AMP pair keeps the training step free of host round trips:
// - unscale_check_finite multiplies gradients by 1/scale and raises found_inf if any
//   value is inf or NaN (PyTorch's _amp_foreach_non_finite_check_and_unscale_);
// - adamw reads found_inf on the device and skips the whole update when it is set;
// - update_loss_scale applies GradScaler's rule to the scale, also on the device.

// Host-computed constants of one AdamW step; must match `AdamWArgs` in ops.rs.
struct AdamWArgs {
    float lr;
    float beta1;
    float beta2;
    float eps;
    float weight_decay;
    float grad_scale;
    double inv_bias_correction1;  // 1 / (1 - beta1^step), computed in f64 on the host
    double inv_bias_correction2;  // 1 / (1 - beta2^step)
};

// One element of the step in the compute type A: updates m and v, returns the parameter.
template <class A>
BRRR_DEVICE A adamw_elem(A p, A g, float* m, float* v, const AdamWArgs& a, A gscale) {
    const A b1 = A(a.beta1), b2 = A(a.beta2);
    g = g * gscale;
    const A mi = b1 * A(*m) + (A(1) - b1) * g;
    const A vi = b2 * A(*v) + (A(1) - b2) * g * g;
    *m = (float)mi;
    *v = (float)vi;
    const A mhat = mi * A(a.inv_bias_correction1);
    const A vhat = vi * A(a.inv_bias_correction2);
    return p - A(a.lr) * (mhat / (m_sqrt(vhat) + A(a.eps)) + A(a.weight_decay) * p);
}

// The gradient factor: grad_scale times *inv_scale (when given), in the compute type. With
// grad_scale = 1 the product is exactly *inv_scale, so a factor passed either way (the
// clip coefficient, say) gives bitwise the same step.
template <class A> BRRR_DEVICE A adamw_gscale(const AdamWArgs& a, const float* inv_scale) {
    A gscale = A(a.grad_scale);
    if (inv_scale != 0) gscale *= A(*inv_scale);
    return gscale;
}

template <class P, class G>
BRRR_DEVICE void adamw_impl(P* param, const G* grad, float* m, float* v, u64 n, const AdamWArgs& a,
                            const float* inv_scale, const float* found_inf) {
    typedef typename Acc<P>::type A;
    if (found_inf != 0 && *found_inf != 0.0f) return;  // a skipped step
    const A gscale = adamw_gscale<A>(a, inv_scale);
    for (u64 i = global_thread_id(); i < n; i += global_thread_count()) {
        const A p = to_acc(param[i]);
        param[i] = from_acc<P>(adamw_elem<A>(p, A(to_acc(grad[i])), &m[i], &v[i], a, gscale));
    }
}

// Master weights (as llm.c's adamw_update): the f32 master takes the f32 step, and the
// compute copy (f16/bf16/f32) gets the new value rounded once, in the same pass.
template <class P, class G>
BRRR_DEVICE void adamw_master_impl(float* master, P* copy, const G* grad, float* m, float* v, u64 n,
                                   const AdamWArgs& a, const float* inv_scale, const float* found_inf) {
    if (found_inf != 0 && *found_inf != 0.0f) return;  // a skipped step
    const float gscale = adamw_gscale<float>(a, inv_scale);
    for (u64 i = global_thread_id(); i < n; i += global_thread_count()) {
        const float w = adamw_elem<float>(master[i], to_acc(grad[i]), &m[i], &v[i], a, gscale);
        master[i] = w;
        copy[i] = from_acc<P>(w);
    }
}

#define ADAMW(P, PS, G, GS)                                                                    \
    extern "C" __global__ void BRRR_FLAT adamw_##PS##_##GS(P* param, const G* grad, float* m, float* v, u64 n, \
                                                 AdamWArgs a, const float* inv_scale,          \
                                                 const float* found_inf) {                     \
        adamw_impl<P, G>(param, grad, m, v, n, a, inv_scale, found_inf);                       \
    }                                                                                          \
    BRRR_REGISTER(adamw_##PS##_##GS)

#define ADAMW_FOR(P, PS)              \
    ADAMW(P, PS, f16_t, f16)          \
    ADAMW(P, PS, bf16_t, bf16)        \
    ADAMW(P, PS, float, f32)          \
    ADAMW(P, PS, double, f64)

ADAMW_FOR(f16_t, f16)
ADAMW_FOR(bf16_t, bf16)
ADAMW_FOR(float, f32)
ADAMW_FOR(double, f64)

#define ADAMW_MASTER(P, PS, G, GS)                                                             \
    extern "C" __global__ void BRRR_FLAT adamw_master_##PS##_##GS(float* master, P* copy, const G* grad, float* m, \
                                                 float* v, u64 n, AdamWArgs a,                 \
                                                 const float* inv_scale, const float* found_inf) { \
        adamw_master_impl<P, G>(master, copy, grad, m, v, n, a, inv_scale, found_inf);        \
    }                                                                                          \
    BRRR_REGISTER(adamw_master_##PS##_##GS)

ADAMW_MASTER(f16_t, f16, f16_t, f16)
ADAMW_MASTER(f16_t, f16, float, f32)
ADAMW_MASTER(bf16_t, bf16, bf16_t, bf16)
ADAMW_MASTER(bf16_t, bf16, float, f32)
ADAMW_MASTER(float, f32, float, f32)

// ---- AdamW with 8-bit block-wise quantised moments (Dettmers et al. 2022) ----------
// One block of 256 threads per quantisation block of 2048 values, 8 values (two code
// words) per thread: decode m and v (map[code] * the block's absmax), update them and the
// parameter with adamw_elem (the f32 arithmetic of adamw), reduce the new absmax of each
// moment over the block, encode each value to its nearest code. Layout as
// brrr_backend::QuantizedMoments: `codes` m's words then v's, `absmax` m's blocks then
// v's, `maps` m's 256 values then v's. `param` and `grad` point at the range's start.
#define Q8_BLOCK 2048
#define Q8_PER 8

// The nearest code of x against absmax (brrr_backend::quant8::encode): a binary search
// over products map[k] * absmax, each rounded once (__fmul_rn: no FMA contraction with
// the subtraction after it, so every backend compares the same numbers).
BRRR_DEVICE unsigned q8_nearest(const float* map, float x, float absmax) {
    const float a = absmax > 0.0f ? absmax : 1.0f;
    unsigned k = 0;
    for (unsigned step = 128; step > 0; step >>= 1)
        if (__fmul_rn(map[k + step - 1], a) < x) k += step;
    if (k > 0 && x - __fmul_rn(map[k - 1], a) <= __fmul_rn(map[k], a) - x) return k - 1;
    return k;
}

template <class P>
BRRR_DEVICE void adamw_8bit_impl(P* param, const P* grad, unsigned* codes, float* absmax,
                                 const float* maps, u64 n, const AdamWArgs& a,
                                 const float* inv_scale, const float* found_inf) {
    if (found_inf != 0 && *found_inf != 0.0f) return;  // a skipped step
    const u64 words = (n + 3) / 4, nb = (n + Q8_BLOCK - 1) / Q8_BLOCK;
    const float gscale = adamw_gscale<float>(a, inv_scale);
    for (u64 blk = blockIdx.x; blk < nb; blk += gridDim.x) {
        const float ma_old = absmax[blk], va_old = absmax[nb + blk];
        float mv[Q8_PER], vv[Q8_PER];
        float mmax = 0.0f, vmx = 0.0f;
        const u64 j0 = blk * Q8_BLOCK + (u64)threadIdx.x * Q8_PER;
        for (int t = 0; t < Q8_PER; ++t) {
            const u64 j = j0 + t;
            mv[t] = 0.0f;
            vv[t] = 0.0f;
            if (j < n) {
                const unsigned sh = 8u * (unsigned)(j & 3);
                float m = maps[(codes[j >> 2] >> sh) & 0xffu] * ma_old;
                float v = maps[256 + ((codes[words + (j >> 2)] >> sh) & 0xffu)] * va_old;
                const float w = adamw_elem<float>(to_acc(param[j]), to_acc(grad[j]), &m, &v, a, gscale);
                param[j] = from_acc<P>(w);
                mv[t] = m;
                vv[t] = v;
                mmax = fmaxf(mmax, fabsf(m));
                vmx = fmaxf(vmx, fabsf(v));
            }
        }
        // Every thread read the old absmax above; the reductions' barriers order that
        // before thread 0 overwrites it.
        const float ma = block_reduce<float>(mmax, 1);
        const float va = block_reduce<float>(vmx, 1);
        for (int q = 0; q < 2; ++q) {
            const u64 w = j0 / 4 + q;
            if (w >= words) continue;
            unsigned pm = 0, pv = 0;
            for (int b = 0; b < 4; ++b) {
                pm |= q8_nearest(maps, mv[q * 4 + b], ma) << (8 * b);
                pv |= q8_nearest(maps + 256, vv[q * 4 + b], va) << (8 * b);
            }
            codes[w] = pm;
            codes[words + w] = pv;
        }
        if (threadIdx.x == 0) {
            absmax[blk] = ma;
            absmax[nb + blk] = va;
        }
    }
}

#define ADAMW_8BIT(P, PS)                                                                      \
    extern "C" __global__ void BRRR_FLAT adamw_8bit_##PS(P* param, const P* grad, unsigned* codes, \
                                                 float* absmax, const float* maps, u64 n,      \
                                                 AdamWArgs a, const float* inv_scale,          \
                                                 const float* found_inf) {                     \
        adamw_8bit_impl<P>(param, grad, codes, absmax, maps, n, a, inv_scale, found_inf);     \
    }                                                                                          \
    BRRR_REGISTER(adamw_8bit_##PS)

ADAMW_8BIT(f16_t, f16)
ADAMW_8BIT(bf16_t, bf16)
ADAMW_8BIT(float, f32)

// torch.nn.utils.clip_grad_norm_'s factor from the f32 sum of squares, one thread, in f64
// as brrr-cpu computes it (IEEE sqrt and division are correctly rounded in both, so the
// two agree bitwise): norm = sqrt(sumsq), coef = min(1, max_norm / (norm + 1e-6)). The
// comparison form of the min gives 1 for a NaN norm, as Rust's f64::min does.
extern "C" __global__ void BRRR_FLAT clip_coefficient(const float* sumsq, double max_norm, float* norm,
                                            float* coef) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const double nrm = m_sqrt((double)*sumsq);
    const double c = max_norm / (nrm + 1e-6);
    *norm = (float)nrm;
    *coef = (float)(c < 1.0 ? c : 1.0);
}
BRRR_REGISTER(clip_coefficient)

// grads *= inv_scale[0]; found_inf[0] = 1 if any gradient is inf or NaN, before or
// after unscaling.
// Many threads may store 1.0 at once; they store the same value, and nothing ever
// clears the flag here.
template <class T>
BRRR_DEVICE void unscale_impl(T* grads, u64 n, const float* inv_scale, float* found_inf) {
    typedef typename Acc<T>::type A;
    const A inv = A(*inv_scale);
    bool bad = false;
    for (u64 i = global_thread_id(); i < n; i += global_thread_count()) {
        const A g = to_acc(grads[i]);
        const T out = from_acc<T>(g * inv);
        // The incoming value (as PyTorch checks it), and the stored result: a finite
        // product can still overflow when rounded back to f16 (as brrr-cpu checks).
        if (!is_finite(g) || !is_finite(to_acc(out))) bad = true;
        grads[i] = out;
    }
    if (bad) *found_inf = 1.0f;
}

#define UNSCALE(T, S)                                                                          \
    extern "C" __global__ void BRRR_FLAT unscale_check_finite_##S(T* grads, u64 n, const float* inv_scale, float* found_inf) { \
        unscale_impl<T>(grads, n, inv_scale, found_inf);                                       \
    }                                                                                          \
    BRRR_REGISTER(unscale_check_finite_##S)

UNSCALE(f16_t, f16)
UNSCALE(bf16_t, bf16)
UNSCALE(float, f32)
UNSCALE(double, f64)

// GradScaler's update (torch._amp_update_scale_), one thread, with Megatron-LM's
// hysteresis (growth_tracker[1] counts overflows since the last growth; only read when
// hysteresis > 1) and minimum scale.
extern "C" __global__ void BRRR_FLAT update_loss_scale(float* scale, i32* growth_tracker, const float* found_inf,
                                             float growth_factor, float backoff_factor, i32 growth_interval,
                                             i32 hysteresis, float min_scale) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    if (*found_inf != 0.0f) {
        growth_tracker[0] = 0;
        if (hysteresis > 1) {
            const i32 infs = growth_tracker[1] == 0x7fffffff ? growth_tracker[1] : growth_tracker[1] + 1;
            growth_tracker[1] = infs;
            if (infs < hysteresis) return;
        }
        const float backed_off = *scale * backoff_factor;
        *scale = backed_off < min_scale ? min_scale : backed_off;
    } else {
        const i32 successful = growth_tracker[0] + 1;
        if (successful == growth_interval) {
            const float grown = *scale * growth_factor;
            if (is_finite(grown)) *scale = grown;
            growth_tracker[0] = 0;
            if (hysteresis > 1) growth_tracker[1] = 0;
        } else {
            growth_tracker[0] = successful;
        }
    }
}
BRRR_REGISTER(update_loss_scale)

// ---- multi-tensor apply ---------------------------------------------------------------
//
// A model's parameters are many buffers (148 in GPT-2 124M). Zeroing their gradients,
// summing their squares and updating them with AdamW is little work per buffer, so one
// kernel per buffer and phase costs more in launches than on the GPU. These kernels take
// the whole list in one launch, as apex's multi_tensor_apply and PyTorch's _foreach_
// kernels do: the host uploads a table with one row per non-empty buffer, cuts each
// buffer into chunks of `chunk` elements, and numbers the chunks across the list. Block b
// takes chunks b, b + gridDim.x, ...; a chunk lies in one buffer, found by a binary
// search over the rows' first chunk numbers (about 8 steps for 148 rows, once a chunk).
// Within a chunk the work is that of the one-buffer kernel, so the results are its bits
// (the sum of squares adds in another order: per chunk, then over chunks).

// One buffer of a multi-tensor launch; must match `MultiTensorRow` in multi.rs.
struct MultiTensorRow {
    u64 ptr[5];          // the op's buffers (adamw: param, grad, m, v, master; others: ptr[0])
    u64 n;               // elements
    u64 first_chunk;     // the number of its first chunk in the launch
    float weight_decay;  // adamw: this buffer's decay (0 for biases and LayerNorm gains)
    u32 pad;
};

// The row that holds chunk c: the last row whose first chunk is at most c.
BRRR_DEVICE u64 mt_row(const MultiTensorRow* rows, u64 count, u64 c) {
    u64 lo = 0, hi = count;
    while (hi - lo > 1) {
        const u64 mid = lo + (hi - lo) / 2;
        if (rows[mid].first_chunk <= c) lo = mid;
        else hi = mid;
    }
    return lo;
}

// Elements [*start, *end) of chunk c, and its row.
BRRR_DEVICE const MultiTensorRow& mt_chunk(const MultiTensorRow* rows, u64 count, u64 c, u64 chunk,
                                           u64* start, u64* end) {
    const MultiTensorRow& r = rows[mt_row(rows, count, c)];
    *start = (c - r.first_chunk) * chunk;
    *end = *start + chunk < r.n ? *start + chunk : r.n;
    return r;
}

template <class T>
BRRR_DEVICE void multi_fill_impl(const MultiTensorRow* rows, u64 count, u64 chunks, u64 chunk, T bits) {
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        u64 start, end;
        const MultiTensorRow& r = mt_chunk(rows, count, c, chunk, &start, &end);
        T* p = (T*)r.ptr[0];
        for (u64 i = start + threadIdx.x; i < end; i += blockDim.x) p[i] = bits;
    }
}

#define MULTI_FILL(T, S)                                                                       \
    extern "C" __global__ void BRRR_FLAT multi_tensor_fill_##S(const MultiTensorRow* rows, u64 count, \
                                                     u64 chunks, u64 chunk, u64 bits) {        \
        multi_fill_impl<T>(rows, count, chunks, chunk, (T)bits);                               \
    }                                                                                          \
    BRRR_REGISTER(multi_tensor_fill_##S)

MULTI_FILL(unsigned short, b16)
MULTI_FILL(u32, b32)
MULTI_FILL(u64, b64)

// partial[c] = the sum of squares of chunk c, each element widened to f32 and squared
// with one rounding (as reduce.cu's fused sum of squares); the host then adds the
// partial results in order with reduce_rows_final.
template <class T>
BRRR_DEVICE void multi_sum_squares_impl(float* partial, const MultiTensorRow* rows, u64 count, u64 chunks,
                                        u64 chunk) {
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        u64 start, end;
        const MultiTensorRow& r = mt_chunk(rows, count, c, chunk, &start, &end);
        const T* x = (const T*)r.ptr[0];
        float acc = 0.0f;
        for (u64 i = start + threadIdx.x; i < end; i += blockDim.x) {
            const float v = to_acc(x[i]);
            acc += __fmul_rn(v, v);
        }
        acc = block_reduce(acc, 0);
        if (threadIdx.x == 0) partial[c] = acc;
    }
}

#define MULTI_SUM_SQUARES(T, S)                                                                \
    extern "C" __global__ void BRRR_FLAT multi_tensor_sum_squares_##S(float* partial,          \
                                                     const MultiTensorRow* rows, u64 count,    \
                                                     u64 chunks, u64 chunk) {                  \
        multi_sum_squares_impl<T>(partial, rows, count, chunks, chunk);                        \
    }                                                                                          \
    BRRR_REGISTER(multi_tensor_sum_squares_##S)

MULTI_SUM_SQUARES(f16_t, f16)
MULTI_SUM_SQUARES(bf16_t, bf16)
MULTI_SUM_SQUARES(float, f32)

// adamw_impl over the list: ptr = {param, grad, m, v}.
template <class P, class G>
BRRR_DEVICE void multi_adamw_impl(const MultiTensorRow* rows, u64 count, u64 chunks, u64 chunk, AdamWArgs a,
                                  const float* inv_scale, const float* found_inf) {
    typedef typename Acc<P>::type A;
    if (found_inf != 0 && *found_inf != 0.0f) return;  // a skipped step
    const A gscale = adamw_gscale<A>(a, inv_scale);
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        u64 start, end;
        const MultiTensorRow& r = mt_chunk(rows, count, c, chunk, &start, &end);
        P* param = (P*)r.ptr[0];
        const G* grad = (const G*)r.ptr[1];
        float* m = (float*)r.ptr[2];
        float* v = (float*)r.ptr[3];
        AdamWArgs ra = a;
        ra.weight_decay = r.weight_decay;
        for (u64 i = start + threadIdx.x; i < end; i += blockDim.x) {
            const A p = to_acc(param[i]);
            param[i] = from_acc<P>(adamw_elem<A>(p, A(to_acc(grad[i])), &m[i], &v[i], ra, gscale));
        }
    }
}

// adamw_master_impl over the list: ptr = {copy, grad, m, v, master}.
template <class P, class G>
BRRR_DEVICE void multi_adamw_master_impl(const MultiTensorRow* rows, u64 count, u64 chunks, u64 chunk,
                                         AdamWArgs a, const float* inv_scale, const float* found_inf) {
    if (found_inf != 0 && *found_inf != 0.0f) return;  // a skipped step
    const float gscale = adamw_gscale<float>(a, inv_scale);
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        u64 start, end;
        const MultiTensorRow& r = mt_chunk(rows, count, c, chunk, &start, &end);
        P* copy = (P*)r.ptr[0];
        const G* grad = (const G*)r.ptr[1];
        float* m = (float*)r.ptr[2];
        float* v = (float*)r.ptr[3];
        float* master = (float*)r.ptr[4];
        AdamWArgs ra = a;
        ra.weight_decay = r.weight_decay;
        for (u64 i = start + threadIdx.x; i < end; i += blockDim.x) {
            const float w = adamw_elem<float>(master[i], to_acc(grad[i]), &m[i], &v[i], ra, gscale);
            master[i] = w;
            copy[i] = from_acc<P>(w);
        }
    }
}

#define MULTI_ADAMW(P, PS, G, GS)                                                              \
    extern "C" __global__ void BRRR_FLAT multi_tensor_adamw_##PS##_##GS(const MultiTensorRow* rows, \
                                                     u64 count, u64 chunks, u64 chunk,          \
                                                     AdamWArgs a, const float* inv_scale,       \
                                                     const float* found_inf) {                  \
        multi_adamw_impl<P, G>(rows, count, chunks, chunk, a, inv_scale, found_inf);          \
    }                                                                                          \
    BRRR_REGISTER(multi_tensor_adamw_##PS##_##GS)

#define MULTI_ADAMW_FOR(P, PS)          \
    MULTI_ADAMW(P, PS, f16_t, f16)      \
    MULTI_ADAMW(P, PS, bf16_t, bf16)    \
    MULTI_ADAMW(P, PS, float, f32)      \
    MULTI_ADAMW(P, PS, double, f64)

MULTI_ADAMW_FOR(f16_t, f16)
MULTI_ADAMW_FOR(bf16_t, bf16)
MULTI_ADAMW_FOR(float, f32)
MULTI_ADAMW_FOR(double, f64)

#define MULTI_ADAMW_MASTER(P, PS, G, GS)                                                       \
    extern "C" __global__ void BRRR_FLAT multi_tensor_adamw_master_##PS##_##GS(                \
        const MultiTensorRow* rows, u64 count, u64 chunks, u64 chunk, AdamWArgs a,             \
        const float* inv_scale, const float* found_inf) {                                      \
        multi_adamw_master_impl<P, G>(rows, count, chunks, chunk, a, inv_scale, found_inf);   \
    }                                                                                          \
    BRRR_REGISTER(multi_tensor_adamw_master_##PS##_##GS)

MULTI_ADAMW_MASTER(f16_t, f16, f16_t, f16)
MULTI_ADAMW_MASTER(f16_t, f16, float, f32)
MULTI_ADAMW_MASTER(bf16_t, bf16, bf16_t, bf16)
MULTI_ADAMW_MASTER(bf16_t, bf16, float, f32)
MULTI_ADAMW_MASTER(float, f32, float, f32)
