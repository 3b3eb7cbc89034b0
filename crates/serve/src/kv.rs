//! [`KvCache`]: the keys and values of every sequence in the batch, in the blocks of a
//! [`crate::BlockAllocator`], on the backend; and [`LayerCache`], one layer's view of
//! it, which `brrr_nn::CausalSelfAttention` attends through.
//!
//! Each layer keeps two tensors of `num_blocks · block_size` rows of `H·D` values (a
//! token's keys of every head, and its values). Before a forward the engine describes
//! the batch ([`KvCache::set_batch`]): which sequences, at which offsets of the
//! flattened token row, which slots their new tokens go to and which slots their
//! whole context is in. Each layer then writes its new keys and values into their slots
//! and attends, sequence by sequence, over the context it gathers back.
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
    fn attend(&self, q: &Tensor<B>, k: &Tensor<B>, v: &Tensor<B>, scale: f32) -> Result<Tensor<B>> {
        let mut inner = self.cache.lock()?;
        let Inner { layers, batch } = &mut *inner;
        let (kc, vc) = layers.get_mut(self.layer).ok_or_else(|| {
            Error::invalid("LayerCache::attend", format!("no layer {}", self.layer))
        })?;
        // Flattened batch: one row of all sequences' tokens, `[H, S, D]`.
        let (h, d) = (q.dims()[0], q.dims()[2]);
        if h * d != self.cache.width || q.dims()[..2] != k.dims()[..2] {
            return Err(Error::shape(
                "LayerCache::attend",
                format!(
                    "q {} k {} vs a cache {} wide",
                    q.shape(),
                    k.shape(),
                    self.cache.width
                ),
            ));
        }
        let mut ys = Vec::with_capacity(batch.len());
        for s in batch.iter() {
            let t = s.new_slots.len();
            write_rows(&rows_of(&k.narrow(1, s.offset, t)?)?, kc, &s.new_slots)?;
            write_rows(&rows_of(&v.narrow(1, s.offset, t)?)?, vc, &s.new_slots)?;
            let ctx = Tensor::from_u32(q.backend(), &s.context_slots, [s.context_slots.len()])?;
            let keys = heads_of(&ctx.embedding(kc)?, h, d)?;
            let values = heads_of(&ctx.embedding(vc)?, h, d)?;
            ys.push(attend_one(
                &q.narrow(1, s.offset, t)?,
                &keys,
                &values,
                scale,
            )?);
        }
        let parts: Vec<&Tensor<B>> = ys.iter().collect();
        Tensor::cat(&parts, 1)
    }
}

/// `[H, T, D]` as `[T, H·D]` rows (a token's heads side by side, the cache's layout).
fn rows_of<B: Backend>(x: &Tensor<B>) -> Result<Tensor<B>> {
    let (h, t, d) = (x.dims()[0], x.dims()[1], x.dims()[2]);
    x.permute(&[1, 0, 2])?.reshape([t, h * d])
}

/// `[L, H·D]` rows back as `[H, L, D]`.
fn heads_of<B: Backend>(rows: &Tensor<B>, h: usize, d: usize) -> Result<Tensor<B>> {
    let l = rows.dims()[0];
    rows.reshape([l, h, d])?.permute(&[1, 0, 2])?.contiguous()
}

/// Writes row `i` of `rows` into row `slots[i]` of `cache`, one copy per run of
/// consecutive slots (a block's worth at most, usually).
fn write_rows<B: Backend>(rows: &Tensor<B>, cache: &mut Tensor<B>, slots: &[u32]) -> Result<()> {
    let rows = rows.to_dtype(cache.dtype())?;
    let mut i = 0;
    while i < slots.len() {
        let mut run = 1;
        while i + run < slots.len() && slots[i + run] == slots[i] + run as u32 {
            run += 1;
        }
        let view = cache.narrow(0, slots[i] as usize, run)?.layout().clone();
        rows.narrow(0, i, run)?.copy_into_view(cache, &view)?;
        i += run;
    }
    Ok(())
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
