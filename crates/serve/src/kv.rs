//! [`KvCache`]: the keys and values of every sequence in the batch, in the blocks of a
//! [`crate::BlockAllocator`], on the backend; and [`LayerCache`], one layer's view of
//! it, which `brrr_nn::CausalSelfAttention` attends through.
//!
//! Each layer keeps two tensors of `num_blocks · block_size` rows of `H·D` values (a
//! token's keys of every head, and its values). Before a forward the engine describes
//! the batch ([`KvCache::set_batch`]): which sequences, at which offsets of the
//! flattened token row, which slots their new tokens go to and which slots their
//! whole context is in. Each layer then writes its new keys and values into their slots
//! and attends over the context it gathers back: every decode of the batch in one set
//! of batched products (contexts padded to the longest and masked), prefill chunks one
//! by one.
//!
//! The gather is the simple form of PagedAttention: a kernel that reads the blocks in
//! place through the block table (Kwon et al. 2023, §4.1) saves copying the context
//! once per layer and step; here the backend's embedding lookup (a row gather, on every
//! backend) copies it, so every backend runs the paged cache with the kernels it has.

use brrr_backend::{Backend, DType, Error, Result};
use brrr_nn::CachedAttention;
use brrr_tensor::Tensor;
use std::sync::{Arc, Mutex};

/// One sequence of this step's batch, as the layers see it.
#[derive(Clone, Debug)]
pub struct BatchSeq {
    /// Where its new tokens start in the flattened row.
    pub offset: usize,
    /// Slots of its new tokens, in order.
    pub new_slots: Vec<u32>,
    /// Slots of its whole context (earlier tokens, then the new ones), in order.
    pub context_slots: Vec<u32>,
}

struct Inner<B: Backend> {
    /// Per layer: keys, then values, `[slots, H·D]`.
    layers: Vec<(Tensor<B>, Tensor<B>)>,
    batch: Vec<BatchSeq>,
}

/// The paged KV cache of a model with `n_layer` layers of `H·D` wide heads (see the
/// module's documentation). Cloning shares it.
pub struct KvCache<B: Backend> {
    inner: Arc<Mutex<Inner<B>>>,
    slots: usize,
    width: usize,
}

impl<B: Backend> Clone for KvCache<B> {
    fn clone(&self) -> Self {
        KvCache {
            inner: self.inner.clone(),
            slots: self.slots,
            width: self.width,
        }
    }
}

/// Bytes of keys and values one token takes in every layer: `2 · n_layer · width ·
/// dtype bytes` (the figure that sets how many tokens, and so requests, fit).
pub fn kv_bytes_per_token(n_layer: usize, width: usize, dtype: DType) -> usize {
    2 * n_layer * width * dtype.size_in_bytes()
}

impl<B: Backend> KvCache<B> {
    /// Zeroed storage for `slots` tokens in each of `n_layer` layers, `width` (`H·D`)
    /// values a token, in `dtype`.
    pub fn new(
        backend: &B,
        n_layer: usize,
        slots: usize,
        width: usize,
        dtype: DType,
    ) -> Result<Self> {
        let layers = (0..n_layer)
            .map(|_| {
                Ok((
                    Tensor::zeros(backend, [slots, width], dtype)?,
                    Tensor::zeros(backend, [slots, width], dtype)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache {
            inner: Arc::new(Mutex::new(Inner {
                layers,
                batch: Vec::new(),
            })),
            slots,
            width,
        })
    }

    /// Token slots per layer.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Layer `layer`'s view, to set as its attention's cache.
    pub fn layer(&self, layer: usize) -> LayerCache<B> {
        LayerCache {
            cache: self.clone(),
            layer,
        }
    }

    /// Describes the next forward's batch (see [`BatchSeq`]).
    pub fn set_batch(&self, batch: Vec<BatchSeq>) -> Result<()> {
        for s in &batch {
            if let Some(&bad) = s.context_slots.iter().find(|&&x| x as usize >= self.slots) {
                return Err(Error::invalid(
                    "KvCache::set_batch",
                    format!("slot {bad} is outside the cache's {} slots", self.slots),
                ));
            }
            if !s.context_slots.ends_with(&s.new_slots) {
                return Err(Error::invalid(
                    "KvCache::set_batch",
                    "a sequence's context must end with its new tokens",
                ));
            }
        }
        self.lock()?.batch = batch;
        Ok(())
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner<B>>> {
        self.inner
            .lock()
            .map_err(|_| Error::invalid("KvCache", "a thread panicked while holding the cache"))
    }
}

/// One layer's view of a [`KvCache`]: what its attention attends through.
pub struct LayerCache<B: Backend> {
    cache: KvCache<B>,
    layer: usize,
}

impl<B: Backend> CachedAttention<B> for LayerCache<B> {
    fn attend(&self, qkv: &Tensor<B>, heads: usize, scale: f32) -> Result<Tensor<B>> {
        let mut inner = self.cache.lock()?;
        let Inner { layers, batch } = &mut *inner;
        let (kc, vc) = layers.get_mut(self.layer).ok_or_else(|| {
            Error::invalid("LayerCache::attend", format!("no layer {}", self.layer))
        })?;
        let w = self.cache.width;
        let dims = qkv.dims();
        if dims.len() != 3
            || dims[0] != 1
            || dims[2] != 3 * w
            || heads == 0
            || !w.is_multiple_of(heads)
        {
            return Err(Error::shape(
                "LayerCache::attend",
                format!(
                    "expected one flattened row [1, S, 3·{w}] of {heads} heads, got {}",
                    qkv.shape()
                ),
            ));
        }
        let s_total = dims[1];
        // Each token's q, k and v side by side: `[S, w]` views, rows as the cache holds them.
        let rows = qkv.reshape([s_total, 3 * w])?;
        let q = rows.narrow(1, 0, w)?.contiguous()?;
        // One scatter of keys and one of values for the whole batch.
        let slot_of_row = slots_of_rows(batch, s_total)?;
        write_rows(&rows.narrow(1, w, w)?, kc, &slot_of_row)?;
        write_rows(&rows.narrow(1, 2 * w, w)?, vc, &slot_of_row)?;
        // Decodes (one new token each) attend together, padded to the longest context;
        // prefill chunks one by one. `order`: the batch row each output row belongs to.
        let (decodes, prefills): (Vec<&BatchSeq>, Vec<&BatchSeq>) =
            batch.iter().partition(|s| s.new_slots.len() == 1);
        let (mut parts, mut order) = (Vec::new(), Vec::with_capacity(s_total));
        if !decodes.is_empty() {
            parts.push(attend_decodes(&q, kc, vc, &decodes, heads, scale)?);
            order.extend(decodes.iter().map(|s| s.offset as u32));
        }
        for s in &prefills {
            parts.push(attend_prefill(&q, kc, vc, s, heads, scale)?);
            order.extend((s.offset..s.offset + s.new_slots.len()).map(|o| o as u32));
        }
        if order.len() != s_total {
            return Err(Error::invalid(
                "LayerCache::attend",
                format!(
                    "the batch covers {} of the row's {s_total} tokens",
                    order.len()
                ),
            ));
        }
        let y = match parts.len() {
            1 => parts
                .pop()
                .ok_or_else(|| Error::invalid("LayerCache::attend", "no output"))?,
            _ => Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)?,
        };
        if order.iter().enumerate().all(|(i, &o)| o as usize == i) {
            return y.reshape([1, s_total, w]);
        }
        // Back to the batch's order: output row `order[j]` is `y`'s row `j`.
        let mut back = vec![0u32; s_total];
        for (j, &o) in order.iter().enumerate() {
            back[o as usize] = j as u32;
        }
        Tensor::from_u32(q.backend(), &back, [1, s_total])?.embedding(&y)
    }
}

/// The decodes' attention in one go: sequence `i`'s query (row `offset` of `q`, `[S,
/// w]`) over its context, gathered from the cache into `[N·H, Lmax, D]` with the
/// slots past its own length masked. Returns `[N, w]`.
fn attend_decodes<B: Backend>(
    q: &Tensor<B>,
    kc: &Tensor<B>,
    vc: &Tensor<B>,
    seqs: &[&BatchSeq],
    heads: usize,
    scale: f32,
) -> Result<Tensor<B>> {
    let (n, w) = (seqs.len(), q.dims()[1]);
    let d = w / heads;
    let lmax = seqs
        .iter()
        .map(|s| s.context_slots.len())
        .max()
        .unwrap_or(1);
    let (mut slots, mut mask) = (Vec::with_capacity(n * lmax), Vec::with_capacity(n * lmax));
    for s in seqs {
        for j in 0..lmax {
            let (slot, m) = match s.context_slots.get(j) {
                Some(&x) => (x, 0.0),
                None => (s.context_slots[0], f32::NEG_INFINITY),
            };
            slots.push(slot);
            mask.push(m);
        }
    }
    let be = q.backend();
    let slots = Tensor::from_u32(be, &slots, [n, lmax])?;
    let gather = |cache: &Tensor<B>| {
        slots
            .embedding(cache)?
            .reshape([n, lmax, heads, d])?
            .permute(&[0, 2, 1, 3])?
            .to_dtype(DType::F32)?
            .contiguous()?
            .reshape([n * heads, lmax, d])
    };
    let (keys, values) = (gather(kc)?, gather(vc)?);
    let at: Vec<u32> = seqs.iter().map(|s| s.offset as u32).collect();
    let queries = Tensor::from_u32(be, &at, [n])?
        .embedding(q)?
        .to_dtype(DType::F32)?
        .reshape([n * heads, 1, d])?;
    let scores = queries
        .matmul(&keys.transpose(-1, -2)?)?
        .reshape([n, heads, lmax])?;
    let mask = Tensor::from_f32(be, &mask, [n, 1, lmax], DType::F32)?;
    let att = scores
        .add(&mask)?
        .softmax(scale, false)?
        .reshape([n * heads, 1, lmax])?;
    att.matmul(&values)?.reshape([n, w])?.to_dtype(q.dtype())
}

/// One prefill chunk's attention: rows `offset..offset + T` of `q` over the sequence's
/// whole context. Returns `[T, w]`.
fn attend_prefill<B: Backend>(
    q: &Tensor<B>,
    kc: &Tensor<B>,
    vc: &Tensor<B>,
    s: &BatchSeq,
    heads: usize,
    scale: f32,
) -> Result<Tensor<B>> {
    let (t, l, w) = (s.new_slots.len(), s.context_slots.len(), q.dims()[1]);
    let d = w / heads;
    let heads_of = |rows: Tensor<B>, len: usize| {
        rows.reshape([len, heads, d])?
            .permute(&[1, 0, 2])?
            .contiguous()
    };
    let ctx = Tensor::from_u32(q.backend(), &s.context_slots, [l])?;
    let keys = heads_of(ctx.embedding(kc)?, l)?;
    let values = heads_of(ctx.embedding(vc)?, l)?;
    let queries = heads_of(q.narrow(0, s.offset, t)?, t)?;
    attend_one(&queries, &keys, &values, scale)?
        .permute(&[1, 0, 2])?
        .reshape([t, w])
}

/// The cache slot of each of the row's `s_total` tokens; an error unless the batch's
/// sequences cover the row exactly.
fn slots_of_rows(batch: &[BatchSeq], s_total: usize) -> Result<Vec<u32>> {
    let mut slots = vec![u32::MAX; s_total];
    for s in batch {
        let end = s.offset + s.new_slots.len();
        let dst = slots.get_mut(s.offset..end).ok_or_else(|| {
            Error::invalid(
                "LayerCache::attend",
                "a sequence runs past the row's tokens",
            )
        })?;
        dst.copy_from_slice(&s.new_slots);
    }
    if slots.contains(&u32::MAX) {
        return Err(Error::invalid(
            "LayerCache::attend",
            "the batch does not cover every token of the row",
        ));
    }
    Ok(slots)
}

/// Writes row `i` of `rows` into row `slots[i]` of `cache`: one scatter, whatever the
/// batch (a copy per run of consecutive slots cost a launch per request and layer).
fn write_rows<B: Backend>(rows: &Tensor<B>, cache: &mut Tensor<B>, slots: &[u32]) -> Result<()> {
    if slots.is_empty() {
        return Ok(());
    }
    let rows = rows.to_dtype(cache.dtype())?;
    let ids = Tensor::from_u32(rows.backend(), slots, [slots.len()])?;
    ids.scatter_rows(&rows, cache)
}

/// One sequence's attention: queries `[H, T, D]` of its `T` newest tokens over keys and
/// values `[H, L, D]` of its whole context (the last `T` of which are those tokens), in
/// f32; query `r` sees context positions `0..=L-T+r` (causal, offset by the cached part).
fn attend_one<B: Backend>(
    q: &Tensor<B>,
    k: &Tensor<B>,
    v: &Tensor<B>,
    scale: f32,
) -> Result<Tensor<B>> {
    let (t, l) = (q.dims()[1], k.dims()[1]);
    let f32 = |x: &Tensor<B>| x.to_dtype(DType::F32)?.contiguous();
    let scores = f32(q)?.matmul(&f32(k)?.transpose(-1, -2)?)?; // [H, T, L]
    let att = if t == l {
        scores.softmax(scale, true)?
    } else if t == 1 {
        scores.softmax(scale, false)?
    } else {
        // A prefill chunk after cached tokens: mask the future with -inf.
        let past = l - t;
        let mask: Vec<f32> = (0..t)
            .flat_map(|r| {
                (0..l).map(move |c| {
                    if c <= past + r {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                })
            })
            .collect();
        let mask = Tensor::from_f32(q.backend(), &mask, [1, t, l], DType::F32)?;
        scores.add(&mask)?.softmax(scale, false)?
    };
    att.matmul(&f32(v)?)?.to_dtype(q.dtype())
}
