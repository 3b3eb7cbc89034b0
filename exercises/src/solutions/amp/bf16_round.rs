/// Adding `0x7FFF` plus the lowest kept bit carries into the kept bits exactly when
/// the dropped half is above one half, or equal to it and the kept value is odd.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7FC0;
    }
    let bits = x.to_bits();
    let lsb = (bits >> 16) & 1;
    (bits.wrapping_add(0x7FFF + lsb) >> 16) as u16
}
