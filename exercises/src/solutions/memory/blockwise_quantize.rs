use super::Blockwise;

/// Block by block: the absmax, then each value's nearest product `map[k] · absmax`.
pub fn quantize_blockwise(map: &[f32; 256], x: &[f32], block: usize) -> Blockwise {
    let mut q = Blockwise {
        codes: Vec::with_capacity(x.len()),
        absmax: Vec::with_capacity(x.len().div_ceil(block)),
    };
    for b in x.chunks(block) {
        let absmax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        // An all-zero block is encoded against 1: its codes are then those of 0.
        let a = if absmax > 0.0 { absmax } else { 1.0 };
        q.absmax.push(absmax);
        q.codes.extend(b.iter().map(|&v| {
            let dist = |k: usize| (map[k] * a - v).abs();
            // `min_by` keeps the first of equal minima: the lower code on a tie.
            (0..256)
                .min_by(|&i, &j| dist(i).total_cmp(&dist(j)))
                .unwrap_or(0) as u8
        }));
    }
    q
}

/// Each code's map value times its block's absmax.
pub fn dequantize_blockwise(map: &[f32; 256], q: &Blockwise, block: usize) -> Vec<f32> {
    q.codes
        .iter()
        .enumerate()
        .map(|(i, &c)| map[c as usize] * q.absmax[i / block])
        .collect()
}
