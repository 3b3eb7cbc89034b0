//! `prepare`: documents behind end-of-text, the first shard for validation, GPT-2's BPE.

use brrr_data::Shard;
use brrr_data::prepare::{PrepareOptions, Tokenizer, TokenizerKind, open_data_dir, prepare};

#[test]
fn gpt2_bpe_matches_known_ids() {
    // GPT-2's published encoding of "Hello world" (r50k_base).
    let t = Tokenizer::new(TokenizerKind::Gpt2);
    assert_eq!(t.encode("Hello world"), vec![15496, 995]);
    // The special token's text is text, not the special token.
    assert!(!t.encode("<|endoftext|>").contains(&50256));
}

#[test]
fn documents_are_separated_and_the_first_shard_validates() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "abc").unwrap();
    std::fs::write(
        dir.path().join("b.jsonl"),
        "{\"text\": \"de\"}\n\n{\"body\": 1, \"text\": \"fgh\"}\n",
    )
    .unwrap();
    let opts = PrepareOptions {
        inputs: vec![dir.path().join("a.txt"), dir.path().join("b.jsonl")],
        out_dir: dir.path().join("out"),
        tokenizer: TokenizerKind::Bytes,
        shard_tokens: 4,
        text_field: "text".into(),
        name: "t".into(),
    };
    let mut calls = 0;
    let s = prepare(&opts, &mut |_, _| calls += 1).unwrap();
    assert!(calls > 0);
    assert_eq!((s.documents, s.tokens, s.shards.len()), (3, 11, 3));
    let all: Vec<u32> = s
        .shards
        .iter()
        .flat_map(|p| Shard::open(p).unwrap().to_vec())
        .collect();
    let want: Vec<u32> = "\0abc\0de\0fgh".bytes().map(u32::from).collect();
    assert_eq!(all, want);
    let d = open_data_dir(&opts.out_dir).unwrap();
    assert_eq!(d.val.len(), 1);
    assert_eq!(d.val[0].to_vec(), vec![0, 97, 98, 99]);
    assert_eq!(d.train.len(), 2);

    // A line without the field names the file, the line and the flag.
    std::fs::write(
        dir.path().join("c.jsonl"),
        "{\"text\": \"x\"}\n{\"body\": \"y\"}\n",
    )
    .unwrap();
    let bad = PrepareOptions {
        inputs: vec![dir.path().join("c.jsonl")],
        ..opts.clone()
    };
    let e = prepare(&bad, &mut |_, _| {}).unwrap_err().to_string();
    assert!(
        e.contains("c.jsonl") && e.contains("line 2") && e.contains("--text-field"),
        "{e}"
    );
}
