//! Shards: llm.c's format read back token for token, brrr's writer byte for byte, and
//! every malformed file an error that names it.

use brrr_data::shard::{HEADER_BYTES, Shard, TokenWidth, shard_bytes, write_shard};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A shard built from the format's definition alone (llm.c `write_datafile`: a header
/// of 256 int32 — magic, version, count, zeros — then the tokens little-endian),
/// independently of brrr's writer.
fn reference_shard(tokens: &[u32], u32_tokens: bool) -> Vec<u8> {
    let mut header = [0i32; 256];
    header[0] = if u32_tokens { 20240801 } else { 20240520 };
    header[1] = if u32_tokens { 7 } else { 1 };
    header[2] = tokens.len() as i32;
    let mut out = Vec::new();
    for h in header {
        out.extend_from_slice(&h.to_le_bytes());
    }
    for &t in tokens {
        if u32_tokens {
            out.extend_from_slice(&t.to_le_bytes());
        } else {
            out.extend_from_slice(&(t as u16).to_le_bytes());
        }
    }
    out
}

fn random_tokens(n: usize, max: u32, seed: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0..max)).collect()
}

#[test]
fn reference_shards_read_back_token_for_token() {
    let dir = tempfile::tempdir().unwrap();
    for (u32_tokens, max) in [(false, 50257), (true, 128_256)] {
        let tokens = random_tokens(10_007, max, 1);
        let p = dir.path().join(format!("ref_{u32_tokens}.bin"));
        std::fs::write(&p, reference_shard(&tokens, u32_tokens)).unwrap();
        let s = Shard::open(&p).unwrap();
        assert_eq!(s.len(), tokens.len());
        assert_eq!(s.to_vec(), tokens);
        assert_eq!(s.token(10_006), Some(tokens[10_006]));
        assert_eq!(s.token(10_007), None);
        let want = if u32_tokens {
            TokenWidth::U32
        } else {
            TokenWidth::U16
        };
        assert_eq!(s.header().width, want);
    }
}

#[test]
fn brrr_writer_has_the_exact_byte_layout() {
    let dir = tempfile::tempdir().unwrap();
    for (width, max, u32_tokens) in [
        (TokenWidth::U16, 65_536, false),
        (TokenWidth::U32, u32::MAX, true),
    ] {
        let tokens = random_tokens(3_001, max, 2);
        let p = dir.path().join("w.bin");
        write_shard(&p, &tokens, width).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes, reference_shard(&tokens, u32_tokens));
        assert_eq!(bytes.len(), HEADER_BYTES + tokens.len() * width.bytes());
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
    // An empty shard is valid: a header announcing 0 tokens.
    let p = dir.path().join("empty.bin");
    write_shard(&p, &[], TokenWidth::U16).unwrap();
    assert!(Shard::open(&p).unwrap().is_empty());
    // A token too wide for u16 is refused, not truncated.
    let e = shard_bytes(&[1, 70_000], TokenWidth::U16).unwrap_err();
    assert!(
        e.to_string().contains("70000") && e.to_string().contains("u16"),
        "{e}"
    );
}

fn open_err(name: &str, bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    let e = Shard::open(&p).unwrap_err().to_string();
    assert!(e.contains(name), "the error names the file: {e}");
    e
}

#[test]
fn malformed_shards_are_errors_naming_file_and_field() {
    let good = reference_shard(&random_tokens(100, 50_000, 3), false);
    let e = open_err("short.bin", &good[..good.len() - 1]);
    assert!(
        e.contains("truncated") && e.contains("100 u16 tokens"),
        "{e}"
    );
    let mut long = good.clone();
    long.push(0);
    assert!(open_err("long.bin", &long).contains("oversized"));
    assert!(open_err("tiny.bin", &good[..100]).contains("shorter than the 1024-byte header"));
    assert!(open_err("nothing.bin", &[]).contains("shorter"));

    let with_word = |i: usize, v: i32| {
        let mut b = good.clone();
        b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        b
    };
    let e = open_err("png.bin", &with_word(0, 0x474e_5089));
    assert!(e.contains("magic number") && e.contains("20240520"), "{e}");
    let e = open_err("v2.bin", &with_word(1, 2));
    assert!(e.contains("version 2") && e.contains("expected 1"), "{e}");
    // The u32 magic with the u16 version is also wrong.
    let e = open_err("mixed.bin", &with_word(0, 20240801));
    assert!(e.contains("version 1") && e.contains("expected 7"), "{e}");
    let e = open_err("neg.bin", &with_word(2, -5));
    assert!(e.contains("negative token count -5"), "{e}");
    let e = open_err("count.bin", &with_word(2, 101));
    assert!(e.contains("truncated"), "{e}");
    let e = open_err("reserved.bin", &with_word(200, 1));
    assert!(e.contains("word 200"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let e = Shard::open(dir.path().join("absent.bin"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("absent.bin") && e.contains("not found"), "{e}");
    let e = Shard::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
}

/// Random bytes and random mutations of valid shards: the reader returns `Ok` (and then
/// every token is readable) or `Err`, and never panics.
#[test]
fn fuzzed_bytes_never_panic() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let base16 = reference_shard(&random_tokens(2_000, 50_000, 5), false);
    let base32 = reference_shard(&random_tokens(1_000, 1 << 20, 6), true);
    let (mut ok, mut err) = (0, 0);
    for i in 0..3_000 {
        let bytes: Vec<u8> = match i % 3 {
            0 => {
                let n = rng.random_range(0..1200);
                (0..n).map(|_| rng.random()).collect()
            }
            _ => {
                let mut b = if i % 3 == 1 {
                    base16.clone()
                } else {
                    base32.clone()
                };
                for _ in 0..rng.random_range(1..4) {
                    match rng.random_range(0..4) {
                        0 => {
                            let at = rng.random_range(0..b.len());
                            b[at] = rng.random();
                        }
                        1 if b.len() >= 16 => {
                            // A header word, the fields that matter most.
                            let w = rng.random_range(0..4usize);
                            let v: i32 = rng.random();
                            b[4 * w..4 * w + 4].copy_from_slice(&v.to_le_bytes());
                        }
                        1 | 2 => b.truncate(rng.random_range(0..b.len())),
                        _ => b.extend((0..rng.random_range(1..9)).map(|_| rng.random::<u8>())),
                    }
                    if b.is_empty() {
                        break;
                    }
                }
                b
            }
        };
        let r = std::panic::catch_unwind(|| match Shard::from_bytes("fuzz.bin", bytes) {
            Ok(s) => {
                let v = s.to_vec();
                assert_eq!(v.len(), s.len());
                true
            }
            Err(e) => {
                assert!(e.to_string().contains("fuzz.bin"), "{e}");
                false
            }
        });
        match r {
            Ok(true) => ok += 1,
            Ok(false) => err += 1,
            Err(_) => panic!("the reader panicked on case {i}"),
        }
    }
    // Byte flips in the token area leave valid shards; header damage does not.
    assert!(ok > 100 && err > 1000, "ok {ok}, err {err}");
}
