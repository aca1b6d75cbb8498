//! The analyzer's filters after its tokenizer (lower-casing, folding to ASCII, dropping
//! English stop words, stemming) in one, with a cache of the words already seen.
//!
//! Every text the memory reads goes through the analyzer: documents as they are indexed,
//! weighed for similarity and checked for a search's coverage, queries, snippets. Those
//! four filters are most of its cost, the Snowball stemmer first. A knowledge base repeats
//! its vocabulary, so each word as written is looked up among those already seen
//! (`foldhash`, far cheaper than the filters) and only a new one goes through the filters
//! (`cargo bench --bench memory` times indexing and search). The cache is one for the
//! process, bounded by [`MAX_CACHED_WORDS`] (it starts over when full), and gives exactly
//! what the filters give, tantivy's own for the first three: the index's terms do not
//! change with it.

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

use frostem::{Algorithm, Stemmer};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RawTokenizer, StopWordFilter, TextAnalyzer, Token,
    TokenFilter, TokenStream, Tokenizer,
};

/// The cache holds at most this many words (~4 MB of short words and their terms).
const MAX_CACHED_WORDS: usize = 65_536;

/// A word as the tokenizer gives it → its term, `None` for a stop word.
type Terms = HashMap<Box<str>, Option<Box<str>>, foldhash::fast::RandomState>;

static TERMS: LazyLock<RwLock<Terms>> = LazyLock::new(|| RwLock::new(Terms::default()));

/// The analyzer's filters after its tokenizer, through the cache.
#[derive(Clone)]
pub struct CachedNormalizer {
    /// Lower-casing, folding and stop words, for one word: tantivy's filters.
    filters: TextAnalyzer,
}

impl CachedNormalizer {
    pub fn english() -> CachedNormalizer {
        CachedNormalizer {
            filters: TextAnalyzer::builder(RawTokenizer::default())
                .filter(LowerCaser)
                .filter(AsciiFoldingFilter)
                .filter(
                    StopWordFilter::new(Language::English)
                        .expect("English stop words are built in"),
                )
                .build(),
        }
    }
}

impl TokenFilter for CachedNormalizer {
    type Tokenizer<T: Tokenizer> = CachedNormalizerFilter<T>;

    fn transform<T: Tokenizer>(self, inner: T) -> CachedNormalizerFilter<T> {
        CachedNormalizerFilter {
            inner,
            filters: self.filters,
        }
    }
}

#[derive(Clone)]
pub struct CachedNormalizerFilter<T> {
    inner: T,
    filters: TextAnalyzer,
}

impl<T: Tokenizer> Tokenizer for CachedNormalizerFilter<T> {
    type TokenStream<'a> = CachedNormalizerStream<'a, T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        CachedNormalizerStream {
            tail: self.inner.token_stream(text),
            filters: &mut self.filters,
            stemmer: Stemmer::new(Algorithm::English),
        }
    }
}

pub struct CachedNormalizerStream<'a, T> {
    tail: T,
    filters: &'a mut TextAnalyzer,
    stemmer: Stemmer,
}

impl<T> CachedNormalizerStream<'_, T> {
    /// `word`'s term, through the filters and the stemmer; `None` for a stop word.
    fn term_of(&mut self, word: &str) -> Option<Box<str>> {
        let mut stream = self.filters.token_stream(word);
        if !stream.advance() {
            return None;
        }
        Some(self.stemmer.stem(&stream.token().text).into())
    }
}

impl<T: TokenStream> TokenStream for CachedNormalizerStream<'_, T> {
    fn advance(&mut self) -> bool {
        while self.tail.advance() {
            let word = &mut self.tail.token_mut().text;
            {
                let terms = TERMS.read().unwrap_or_else(|e| e.into_inner());
                match terms.get(word.as_str()) {
                    Some(Some(term)) => {
                        word.clear();
                        word.push_str(term);
                        return true;
                    }
                    Some(None) => continue,
                    None => {}
                }
            }
            let raw = std::mem::take(word);
            let term = self.term_of(&raw);
            if let Some(t) = &term {
                self.tail.token_mut().text.push_str(t);
            }
            let kept = term.is_some();
            let mut terms = TERMS.write().unwrap_or_else(|e| e.into_inner());
            if terms.len() >= MAX_CACHED_WORDS {
                terms.clear();
            }
            terms.insert(raw.into(), term);
            if kept {
                return true;
            }
        }
        false
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
        AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer,
        Stemmer as TantivyStemmer, StopWordFilter, TextAnalyzer,
    };

    use super::*;

    fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<(String, usize, usize)> {
        let mut stream = analyzer.token_stream(text);
        let mut out = Vec::new();
        while let Some(t) = stream.next() {
            out.push((t.text.clone(), t.offset_from, t.offset_to));
        }
        out
    }

    /// The cache gives what tantivy's own filters give, terms and offsets, the first time a
    /// word is seen and after, on the labelled set's text and on words the filters treat
    /// apart (stop words in any case, exceptions, apostrophes, a leading y, folded accents,
    /// capitals).
    #[test]
    fn the_cached_terms_are_the_filters() {
        let labelled = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../benches/data/memory-labelled.json"),
        )
        .unwrap();
        let special = "The THE the An and AND Dying lying tying skis news gently generously \
                       yelling Yvonne's café CAFÉ Naïve cañon Running runs ran communism \
                       arguing argued happy Straße ÆON ﬁle";
        let mut theirs = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .filter(AsciiFoldingFilter)
            .filter(StopWordFilter::new(Language::English).unwrap())
            .filter(TantivyStemmer::new(Language::English))
            .build();
        let mut ours = crate::text::analyzer();
        for text in [special, labelled.as_str()] {
            let want = tokens(&mut theirs, text);
            assert!(want.len() > 10);
            for _ in 0..2 {
                assert_eq!(tokens(&mut ours, text), want);
            }
        }
    }
}
