/// Field by field, with checked arithmetic for the size.
pub fn read_header(bytes: &[u8], file_len: u64) -> Result<(usize, usize), String> {
    if bytes.len() < 1024 {
        return Err("shorter than the 1024-byte header".into());
    }
    let word = |i: usize| {
        i32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ])
    };
    let width = match (word(0), word(1)) {
        (20240520, 1) => 2,
        (20240801, 7) => 4,
        (m, v) => return Err(format!("magic {m} with version {v}")),
    };
    let tokens = usize::try_from(word(2)).map_err(|_| "negative count".to_string())?;
    if (3..256).any(|i| word(i) != 0) {
        return Err("a reserved word is not zero".into());
    }
    let want = (tokens as u64) * width as u64 + 1024;
    if file_len != want {
        return Err(format!("file has {file_len} bytes, the header says {want}"));
    }
    Ok((width as usize, tokens))
}
