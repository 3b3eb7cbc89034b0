//! The shard loader: ranks split each epoch exactly, a resumed loader continues on the
//! next batch, the prefetcher changes nothing but timing.

use brrr_data::loader::windows_in;
use brrr_data::shard::{TokenWidth, shard_bytes};
use brrr_data::{Batch, BatchSource};
use brrr_data::{Prefetcher, Shard, ShardLoader};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Shards whose every token encodes where it is: token = shard · 10000 + index, so a
/// batch row names the window it came from.
fn shards(lens: &[usize]) -> Arc<Vec<Shard>> {
    let v = lens
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            let tokens: Vec<u32> = (0..n as u32).map(|i| s as u32 * 10_000 + i).collect();
            Shard::from_bytes(
                format!("s{s}.bin"),
                shard_bytes(&tokens, TokenWidth::U32).unwrap(),
            )
            .unwrap()
        })
        .collect();
    Arc::new(v)
}

/// `(shard, window)` of every row, from the first input token.
fn windows_of(b: &Batch, seq: usize) -> Vec<(u32, u32)> {
    (0..b.batch)
        .map(|r| {
            let t = b.inputs[r * seq];
            (t / 10_000, (t % 10_000) / seq as u32)
        })
        .collect()
}

#[test]
fn ranks_see_disjoint_windows_and_together_all() {
    let seq = 8;
    // 3 shards of 49, 81, 41 tokens: 6 + 10 + 5 = 21 windows... make it divisible:
    // 6 + 10 + 8 = 24 windows = 4 ranks × 3 batches × 2 rows.
    let data = shards(&[49, 81, 65]);
    let total: usize = data.iter().map(|s| windows_in(s.len(), seq)).sum();
    assert_eq!(total, 24);
    let world = 4;
    for epoch in 0..2 {
        let mut seen = Vec::new();
        for rank in 0..world {
            let mut l = ShardLoader::new(data.clone(), 2, seq, 7, 1 << 20, rank, world).unwrap();
            assert_eq!(l.batches_per_epoch(), 3);
            for _ in 0..epoch * 3 {
                l.next_batch().unwrap();
            }
            for _ in 0..3 {
                let b = l.next_batch().unwrap();
                // Rows are real windows: targets are inputs shifted by one.
                for r in 0..2 {
                    assert_eq!(
                        &b.inputs[r * seq + 1..(r + 1) * seq],
                        &b.targets[r * seq..(r + 1) * seq - 1]
                    );
                }
                seen.extend(windows_of(&b, seq));
            }
        }
        let distinct: BTreeSet<_> = seen.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            seen.len(),
            "epoch {epoch}: a window was seen twice"
        );
        assert_eq!(
            distinct.len(),
            total,
            "epoch {epoch}: some window was never seen"
        );
    }
    // Another epoch is another order.
    let mut l = ShardLoader::new(data.clone(), 2, seq, 7, 1 << 20, 0, 1).unwrap();
    let first: Vec<_> = (0..12)
        .flat_map(|_| windows_of(&l.next_batch().unwrap(), seq))
        .collect();
    let second: Vec<_> = (0..12)
        .flat_map(|_| windows_of(&l.next_batch().unwrap(), seq))
        .collect();
    assert_ne!(first, second);
    assert_eq!(
        first.iter().collect::<BTreeSet<_>>(),
        second.iter().collect::<BTreeSet<_>>()
    );
}

#[test]
fn resumed_loader_continues_on_the_next_batch() {
    let data = shards(&[1000, 333, 2048]);
    let mk = || ShardLoader::new(data.clone(), 3, 16, 42, 1 << 20, 1, 2).unwrap();
    let mut full = mk();
    let all: Vec<Batch> = (0..200).map(|_| full.next_batch().unwrap()).collect();
    for stop in [0, 1, 57, 143] {
        let mut a = mk();
        for want in &all[..stop] {
            assert_eq!(&a.next_batch().unwrap(), want);
        }
        let saved = a.position();
        let mut b = ShardLoader::new(data.clone(), 3, 16, 1, 1 << 20, 1, 2).unwrap();
        b.set_position(&saved).unwrap();
        // Another seed would give other batches: the seed is part of the run's config,
        // so resume with the same one.
        let mut b2 = mk();
        b2.set_position(&saved).unwrap();
        for want in &all[stop..] {
            assert_eq!(&b2.next_batch().unwrap(), want);
        }
        let _ = b.next_batch().unwrap();
    }
    // Another data-parallel layout is refused.
    let mut other = ShardLoader::new(data.clone(), 3, 16, 42, 1 << 20, 0, 4).unwrap();
    let e = other
        .set_position(&full.position())
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 1 of 2"), "{e}");
    assert!(
        other
            .set_position("epoch=0 batch=x rank=0 world=4")
            .is_err()
    );
}

#[test]
fn prefetcher_yields_the_same_batches_and_resumes_exactly() {
    let data = shards(&[5000, 3000]);
    let mk = || ShardLoader::new(data.clone(), 4, 32, 3, 1 << 20, 0, 1).unwrap();
    let mut plain = mk();
    let want: Vec<Batch> = (0..60).map(|_| plain.next_batch().unwrap()).collect();
    let positions: Vec<String> = {
        let mut l = mk();
        (0..60)
            .map(|_| {
                l.next_batch().unwrap();
                l.position()
            })
            .collect()
    };
    for depth in [0, 1, 4] {
        let mut p = Prefetcher::new(Box::new(mk()), depth);
        assert_eq!(p.fingerprint(), mk().fingerprint());
        for i in 0..30 {
            assert_eq!(p.next_batch().unwrap(), want[i]);
            // The position is the consumer's, however far the thread ran ahead.
            assert_eq!(p.position(), positions[i]);
        }
        // Resume elsewhere: the producer is stopped, rewound and restarted.
        p.set_position(&positions[9]).unwrap();
        for w in &want[10..20] {
            assert_eq!(&p.next_batch().unwrap(), w);
        }
        assert!(p.set_position("nonsense").is_err());
    }
}

#[test]
fn bad_loader_shapes_and_vocab_are_errors() {
    let data = shards(&[100]);
    assert!(ShardLoader::new(data.clone(), 0, 8, 0, 10, 0, 1).is_err());
    assert!(ShardLoader::new(data.clone(), 1, 8, 0, 10, 2, 2).is_err());
    let e = ShardLoader::new(data.clone(), 64, 8, 0, 10, 0, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("fewer than one batch"), "{e}");
    // Token ids up to 99 with a vocabulary of 50: named shard and index.
    let mut l = ShardLoader::new(data, 1, 8, 0, 50, 0, 1).unwrap();
    let e = (0..12)
        .find_map(|_| l.next_batch().err())
        .unwrap()
        .to_string();
    assert!(
        e.contains("s0.bin") && e.contains("vocabulary of 50"),
        "{e}"
    );
}
