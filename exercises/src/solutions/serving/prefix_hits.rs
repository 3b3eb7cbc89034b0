/// For each prompt: the most leading blocks it shares with an earlier prompt that
/// filled them, among the full blocks of its first `len − 1` tokens.
pub fn prefix_hits(prompts: &[Vec<u32>], block_size: usize) -> Vec<usize> {
    let bs = block_size.max(1);
    prompts
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let usable = q.len().saturating_sub(1) / bs;
            let blocks = prompts[..i]
                .iter()
                .map(|p| {
                    let common = p.iter().zip(q).take_while(|(a, b)| a == b).count();
                    (common / bs).min(p.len() / bs)
                })
                .max()
                .unwrap_or(0);
            blocks.min(usable) * bs
        })
        .collect()
}
