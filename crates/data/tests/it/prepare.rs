//! `prepare`: documents behind end-of-text, the first shard for validation, GPT-2's BPE.

use brrr_data::Shard;
use brrr_data::data_dir::{META_FILE, open_data_dir, read_meta};
use brrr_data::prepare::{PrepareOptions, Tokenizer, TokenizerKind, prepare};
use brrr_data::shard::{TokenWidth, write_shard};

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
        replace: false,
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
        replace: true,
        ..opts.clone()
    };
    let e = prepare(&bad, &mut |_, _| {}).unwrap_err().to_string();
    assert!(
        e.contains("c.jsonl") && e.contains("line 2") && e.contains("--text-field"),
        "{e}"
    );
    // The failed replacement left the dataset that was there.
    assert_eq!(open_data_dir(&opts.out_dir).unwrap().train.len(), 2);
}

fn text_opts(dir: &std::path::Path, text: &str, name: &str) -> PrepareOptions {
    let input = dir.join(format!("{name}.txt"));
    std::fs::write(&input, text).unwrap();
    PrepareOptions {
        inputs: vec![input],
        out_dir: dir.join("out"),
        tokenizer: TokenizerKind::Bytes,
        shard_tokens: 4,
        text_field: "text".into(),
        name: name.into(),
        replace: false,
    }
}

/// A directory that holds a dataset is refused unless replaced, and a replacement
/// leaves no shard of the old dataset behind (they trained beside the new ones).
#[test]
fn an_existing_dataset_is_refused_or_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let old = text_opts(dir.path(), "a long old document", "old");
    let n_old = prepare(&old, &mut |_, _| {}).unwrap().shards.len();
    assert!(n_old > 3);
    let new = text_opts(dir.path(), "newer", "new");
    let e = prepare(&new, &mut |_, _| {}).unwrap_err().to_string();
    assert!(
        e.contains("already holds a dataset") && e.contains("--force"),
        "{e}"
    );
    let new = PrepareOptions {
        replace: true,
        ..new
    };
    // A file of the directory that is no shard, `.bin` or not, survives the replacement.
    std::fs::write(new.out_dir.join("notes.bin"), b"keep me").unwrap();
    let s = prepare(&new, &mut |_, _| {}).unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&new.out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "data.json",
            "new_train_000001.bin",
            "new_val_000000.bin",
            "notes.bin"
        ]
    );
    let kept = std::fs::read(new.out_dir.join("notes.bin")).unwrap();
    assert_eq!(kept, b"keep me");
    assert_eq!(s.shards.len(), 2);
    let d = open_data_dir(&new.out_dir).unwrap();
    assert_eq!(d.train.len(), 1);
}

/// `data.json` is checked against its tokenizer, and only its dataset's shards are read.
#[test]
fn data_json_is_checked_and_names_the_shards() {
    let dir = tempfile::tempdir().unwrap();
    let opts = text_opts(dir.path(), "some text to shard", "mine");
    prepare(&opts, &mut |_, _| {}).unwrap();
    let out = &opts.out_dir;
    let n = open_data_dir(out).unwrap().train.len();
    // A stray shard of another name is not part of the dataset.
    write_shard(
        out.join("other_train_000001.bin"),
        &[1, 2, 3],
        TokenWidth::U16,
    )
    .unwrap();
    assert_eq!(open_data_dir(out).unwrap().train.len(), n);
    // A vocabulary that contradicts the tokenizer is an error naming both.
    let meta = r#"{"tokenizer": "gpt2", "vocab_size": 256, "eot": 50256, "name": "mine"}"#;
    std::fs::write(out.join(META_FILE), meta).unwrap();
    let e = open_data_dir(out).unwrap_err().to_string();
    assert!(
        e.contains("vocab_size") && e.contains("256") && e.contains("50257"),
        "{e}"
    );
}

/// A directory of llm.c's shards, as its data scripts write them (no data.json), trains
/// as it is: GPT-2 tokens, the name from the files.
#[test]
fn llmc_shards_without_data_json_are_read_as_gpt2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_shard(
        d.join("tinyshakespeare_val_000000.bin"),
        &[50256, 5962, 22307],
        TokenWidth::U16,
    )
    .unwrap();
    write_shard(
        d.join("tinyshakespeare_train_000001.bin"),
        &[50256, 40, 1101, 13],
        TokenWidth::U16,
    )
    .unwrap();
    let meta = read_meta(d).unwrap();
    assert_eq!(
        (meta.tokenizer, meta.name.as_str(), meta.from_file),
        (TokenizerKind::Gpt2, "tinyshakespeare", false)
    );
    let data = open_data_dir(d).unwrap();
    assert_eq!(
        (data.vocab_size, data.val.len(), data.train.len()),
        (50257, 1, 1)
    );
    // Two datasets in one directory: which one is meant is asked, not guessed.
    write_shard(d.join("fineweb_train_000001.bin"), &[1, 2], TokenWidth::U16).unwrap();
    let e = open_data_dir(d).unwrap_err().to_string();
    assert!(
        e.contains("2 datasets") && e.contains("fineweb") && e.contains("tinyshakespeare"),
        "{e}"
    );
}

/// Tokenizing in pieces gives the whole text's tokens, with GPT-2's BPE too: pieces end
/// only where its pre-tokenizer splits anyway.
#[test]
fn streamed_pieces_tokenize_like_the_whole_text() {
    let dir = tempfile::tempdir().unwrap();
    let para = "It was the best of times,  it was the worst of times; it's\n\nthe age of \
                wisdom. Ça va: 12 345 don't   stop\u{a0} here.\n";
    let mut text = String::new();
    while text.len() < 3 * brrr_data::prepare::PIECE_BYTES {
        text.push_str(para);
    }
    let opts = PrepareOptions {
        tokenizer: TokenizerKind::Gpt2,
        shard_tokens: 1 << 22,
        ..text_opts(dir.path(), &text, "t")
    };
    let s = prepare(&opts, &mut |_, _| {}).unwrap();
    let got: Vec<u32> = s
        .shards
        .iter()
        .flat_map(|p| Shard::open(p).unwrap().to_vec())
        .collect();
    let mut want = vec![50256];
    want.extend(Tokenizer::new(TokenizerKind::Gpt2).encode(&text));
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "the streamed tokens differ from the whole text's"
    );
}

/// An input smaller than one shard still trains: its first tenth validates and the
/// rest is one training shard (before, it became a validation shard alone, and
/// `train --data` found no training shards).
#[test]
fn an_input_smaller_than_a_shard_is_split_to_train() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "x".repeat(99)).unwrap();
    let opts = PrepareOptions {
        inputs: vec![dir.path().join("a.txt")],
        out_dir: dir.path().join("out"),
        tokenizer: TokenizerKind::Bytes,
        shard_tokens: 1000,
        text_field: "text".into(),
        name: "small".into(),
        replace: false,
    };
    let s = prepare(&opts, &mut |_, _| {}).unwrap();
    assert_eq!((s.tokens, s.shards.len()), (100, 2));
    let d = open_data_dir(&opts.out_dir).unwrap();
    assert_eq!((d.val.len(), d.train.len()), (1, 1));
    assert_eq!(d.val[0].to_vec().len(), 10);
    assert_eq!(d.train[0].to_vec().len(), 90);
    let mut all = d.val[0].to_vec();
    all.extend(d.train[0].to_vec());
    assert_eq!(all[0], 0, "the end-of-text token first");
    assert!(all[1..].iter().all(|&t| t == u32::from(b'x')));
}
