use super::f16_round;

/// Row by row, group by group: the f16 scale, the clamped rounded codes, back.
pub fn int4_roundtrip(w: &[f32], cols: usize, group: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(w.len());
    for g in w
        .chunks(cols.max(1))
        .flat_map(|row| row.chunks(group.max(1)))
    {
        let absmax = g.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let scale = if absmax > 0.0 {
            f16_round(absmax / 7.0)
        } else {
            1.0
        };
        out.extend(g.iter().map(|x| {
            let code = (x / scale).round().clamp(-7.0, 7.0) as i8;
            f32::from(code) * scale
        }));
    }
    out
}
