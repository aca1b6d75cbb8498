//! English stemming with a cache of the words already stemmed: the analyzer's last filter.
//!
//! Every text the memory reads goes through the analyzer: entries as they are indexed,
//! weighed for similarity and checked for a search's coverage, queries, snippets. The
//! Snowball stemmer takes ~180 ns a word here; a lookup among the words already seen, ~16 ns
//! (`foldhash`), and a knowledge base repeats its vocabulary. The cache is one for the
//! process, bounded by [`MAX_CACHED_WORDS`] (it starts over when full), and gives exactly
//! what the stemmer gives: the index's terms do not change with it.

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

use frostem::{Algorithm, Stemmer};
use tantivy::tokenizer::{Token, TokenFilter, TokenStream, Tokenizer};

/// The cache holds at most this many words (~2 MB of short words and their stems).
const MAX_CACHED_WORDS: usize = 32_768;

type Stems = HashMap<Box<str>, Box<str>, foldhash::fast::RandomState>;

static STEMS: LazyLock<RwLock<Stems>> = LazyLock::new(|| RwLock::new(Stems::default()));

/// The stem of `word` (lower-cased, as the analyzer gives it).
fn stem_into(stemmer: &Stemmer, word: &str, out: &mut String) {
    out.clear();
    if let Some(stem) = STEMS.read().unwrap_or_else(|e| e.into_inner()).get(word) {
        out.push_str(stem);
        return;
    }
    let stem = stemmer.stem(word);
    out.push_str(&stem);
    let mut stems = STEMS.write().unwrap_or_else(|e| e.into_inner());
    if stems.len() >= MAX_CACHED_WORDS {
        stems.clear();
    }
    stems.insert(word.into(), out.as_str().into());
}

/// The analyzer's English stemmer, through the cache.
#[derive(Clone, Copy, Default)]
pub struct CachedStemmer;

impl TokenFilter for CachedStemmer {
    type Tokenizer<T: Tokenizer> = CachedStemmerFilter<T>;

    fn transform<T: Tokenizer>(self, inner: T) -> CachedStemmerFilter<T> {
        CachedStemmerFilter { inner }
    }
}

#[derive(Clone)]
pub struct CachedStemmerFilter<T> {
    inner: T,
}

impl<T: Tokenizer> Tokenizer for CachedStemmerFilter<T> {
    type TokenStream<'a> = CachedStemmerStream<T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        CachedStemmerStream {
            tail: self.inner.token_stream(text),
            stemmer: Stemmer::new(Algorithm::English),
            buffer: String::new(),
        }
    }
}

pub struct CachedStemmerStream<T> {
    tail: T,
    stemmer: Stemmer,
    buffer: String,
}

impl<T: TokenStream> TokenStream for CachedStemmerStream<T> {
    fn advance(&mut self) -> bool {
        if !self.tail.advance() {
            return false;
        }
        let token = self.tail.token_mut();
        stem_into(&self.stemmer, &token.text, &mut self.buffer);
        std::mem::swap(&mut token.text, &mut self.buffer);
        true
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

#[cfg(test)]
mod tests {
    use tantivy::tokenizer::{
        AsciiFoldingFilter, Language, LowerCaser, SimpleTokenizer, Stemmer as TantivyStemmer,
        TextAnalyzer,
    };

    use super::*;

    fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
        let mut stream = analyzer.token_stream(text);
        let mut out = Vec::new();
        while let Some(t) = stream.next() {
            out.push(t.text.clone());
        }
        out
    }

    /// The cache gives the stemmer's own stems, the first time a word is seen and after,
    /// on the labelled set's text and on words the stemmer treats apart (exceptions,
    /// apostrophes, a leading y, folded accents).
    #[test]
    fn the_cached_stems_are_the_stemmers() {
        let labelled = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("benches/data/memory-labelled.json"),
        )
        .unwrap();
        let special = "dying lying tying skis news gently generously yelling Yvonne's \
                       café naïve cañon running runs ran communism arguing argued happy";
        let base = || {
            TextAnalyzer::builder(SimpleTokenizer::default())
                .filter(LowerCaser)
                .filter(AsciiFoldingFilter)
        };
        let mut theirs = base()
            .filter(TantivyStemmer::new(Language::English))
            .build();
        let mut ours = base().filter(CachedStemmer).build();
        for text in [special, labelled.as_str()] {
            let want = tokens(&mut theirs, text);
            assert!(want.len() > 10);
            for _ in 0..2 {
                assert_eq!(tokens(&mut ours, text), want);
            }
        }
    }
}
