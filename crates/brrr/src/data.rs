//! The training text, its tokenizer, and reproducible batches: [`brrr_train::data`],
//! re-exported, plus where the corpus shipped with brrr lies.

pub use brrr_train::data::*;

/// The corpus shipped with brrr (see `crates/brrr/corpus/README.md`), as a path in the
/// source tree. It exists wherever the crate was built from a checkout.
pub const DEFAULT_CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/sotu.txt");

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped corpus loads, and the numbers its README quotes are right.
    #[test]
    fn shipped_corpus_matches_its_readme() {
        let c = Corpus::load(DEFAULT_CORPUS).unwrap();
        assert_eq!(c.len(), 2_671_649);
        assert_eq!(c.text().chars().count(), 2_670_322);
        let h = unigram_entropy_nats(c.tokens());
        assert!((h - 3.0407).abs() < 5e-5, "{h}");
        assert!((h / 2f64.ln() - 4.3868).abs() < 5e-5, "{h}");
        let distinct = c
            .tokens()
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        assert_eq!(distinct, 96);
        assert_eq!(c.val().len(), 267_164);
        assert!(
            c.text().starts_with("Mr. President, Mr. Speaker"),
            "{}",
            &c.text()[..40]
        );
    }
}
