//! AdamW with 8-bit block-wise quantised moments: the reference semantics of
//! `Backend::adamw_8bit` (see `brrr_backend::quant8`).

use crate::check;
use crate::optim::{Consts, Typed};
use crate::par;
use crate::scalar::Float;
use brrr_backend::quant8::{CODES_PER_WORD, Q8_BLOCK, blocks, code_words, encode};
use brrr_backend::{AdamWParams, DType, Error, HostData, Result};

const OP: &str = "adamw_8bit";

/// The state buffers, as host data (see `brrr_backend::QuantizedMoments`).
pub(crate) struct States<'a> {
    pub codes: &'a mut HostData,
    pub absmax: &'a mut HostData,
    pub maps: &'a HostData,
}

/// The two maps, checked: 256 f32 values each.
struct Maps<'a> {
    m: &'a [f32; 256],
    v: &'a [f32; 256],
}

/// One step; blocks run in parallel (each is independent: its own absmax).
pub(crate) fn adamw_8bit(
    p: &AdamWParams,
    param: &mut HostData,
    grad: &HostData,
    s: States<'_>,
    inv_scale: Option<&HostData>,
    found_inf: Option<&HostData>,
) -> Result<()> {
    let r = p.elements(OP, param.len())?;
    let n = r.len();
    check::len(OP, param, r.end)?;
    check::len(OP, grad, r.end)?;
    let maps = maps_of(s.maps)?;
    let (mc, vc) = u32s_mut(s.codes, 2 * code_words(n))?.split_at_mut(code_words(n));
    let (ma, va) = check::f32s_mut(OP, s.absmax, 2 * blocks(n))?.split_at_mut(blocks(n));
    if p.step == 0 {
        return Err(Error::invalid(
            OP,
            "step = 0 (steps count from 1; the bias correction would divide by 0)",
        ));
    }
    let inv_scale = inv_scale.map(|b| check::scalar_f32(OP, b)).transpose()?;
    let skip = found_inf.map(|b| check::scalar_f32(OP, b)).transpose()?;
    if skip.is_some_and(|f| f != 0.0) {
        return Ok(());
    }
    let k = Consts::new(p, inv_scale).typed::<f32>();
    let st = Moments { mc, ma, vc, va };
    let rr = || r.clone();
    match (&mut *param, grad) {
        (HostData::F16(w), HostData::F16(g)) => step_typed(&k, &maps, &mut w[rr()], &g[rr()], st),
        (HostData::BF16(w), HostData::BF16(g)) => step_typed(&k, &maps, &mut w[rr()], &g[rr()], st),
        (HostData::F32(w), HostData::F32(g)) => step_typed(&k, &maps, &mut w[rr()], &g[rr()], st),
        (w, g) => {
            return Err(Error::invalid(
                OP,
                format!(
                    "param and grad must be f16, bf16 or f32 of one dtype; got {} and {}",
                    w.dtype(),
                    g.dtype()
                ),
            ));
        }
    }
    Ok(())
}

fn maps_of(buf: &HostData) -> Result<Maps<'_>> {
    let HostData::F32(v) = buf else {
        return Err(Error::invalid(
            OP,
            format!("maps must be f32, got {}", buf.dtype()),
        ));
    };
    let bad = || Error::invalid(OP, format!("maps must hold 512 values, got {}", v.len()));
    if v.len() != 512 {
        return Err(bad());
    }
    Ok(Maps {
        m: v[..256].try_into().map_err(|_| bad())?,
        v: v[256..].try_into().map_err(|_| bad())?,
    })
}

fn u32s_mut(buf: &mut HostData, n: usize) -> Result<&mut [u32]> {
    match buf {
        HostData::U32(v) => {
            Error::check_len(OP, n, v.len())?;
            Ok(&mut v[..n])
        }
        other => Err(Error::DType {
            op: OP,
            expected: DType::U32,
            got: other.dtype(),
        }),
    }
}

/// The (checked) state slices of the range's elements.
struct Moments<'a> {
    mc: &'a mut [u32],
    ma: &'a mut [f32],
    vc: &'a mut [u32],
    va: &'a mut [f32],
}

fn step_typed<T: Float<C = f32>>(k: &Typed<f32>, maps: &Maps, w: &mut [T], g: &[T], s: Moments) {
    const WORDS: usize = Q8_BLOCK / CODES_PER_WORD;
    let tasks: Vec<_> = par::chunks(w, Q8_BLOCK)
        .into_iter()
        .zip(par::chunks(s.mc, WORDS))
        .zip(par::chunks(s.vc, WORDS))
        .zip(s.ma.iter_mut().zip(s.va.iter_mut()))
        .collect();
    par::run(tasks, |b, (((w, mc), vc), (ma, va))| {
        let g = &g[b * Q8_BLOCK..b * Q8_BLOCK + w.len()];
        block(k, maps, w, g, (mc, ma), (vc, va));
    });
}

/// One block: decode, update in f32, new absmax, re-encode.
fn block<T: Float<C = f32>>(
    k: &Typed<f32>,
    maps: &Maps,
    w: &mut [T],
    g: &[T],
    (mc, ma): (&mut [u32], &mut f32),
    (vc, va): (&mut [u32], &mut f32),
) {
    let mut m = [0.0f32; Q8_BLOCK];
    let mut v = [0.0f32; Q8_BLOCK];
    for (i, (w, g)) in w.iter_mut().zip(g).enumerate() {
        m[i] = maps.m[code(mc, i)] * *ma;
        v[i] = maps.v[code(vc, i)] * *va;
        *w = T::store(k.update(w.load(), g.load(), &mut m[i], &mut v[i]));
    }
    let n = w.len();
    *ma = m[..n].iter().fold(0.0f32, |a, x| a.max(x.abs()));
    *va = v[..n].iter().fold(0.0f32, |a, x| a.max(x.abs()));
    store_codes(maps.m, &m[..n], *ma, mc);
    store_codes(maps.v, &v[..n], *va, vc);
}

/// Element `i`'s code in packed words.
fn code(words: &[u32], i: usize) -> usize {
    ((words[i / CODES_PER_WORD] >> (8 * (i % CODES_PER_WORD))) & 0xff) as usize
}

/// Encodes `x` into `words`; slots past `x.len()` in the last word get the code of 0.
fn store_codes(map: &[f32; 256], x: &[f32], absmax: f32, words: &mut [u32]) {
    for (wi, word) in words.iter_mut().enumerate() {
        let mut packed = 0u32;
        for b in 0..CODES_PER_WORD {
            let val = x.get(wi * CODES_PER_WORD + b).copied().unwrap_or(0.0);
            packed |= u32::from(encode(map, val, absmax)) << (8 * b);
        }
        *word = packed;
    }
}
