//! Tandem's search engine: documents in, scored hits out.
//!
//! A document is an id, its texts (a title, tags, a body and a context) and two facets a
//! search filters by: a [`Kind`] and an optional group. The engine knows nothing of what
//! the documents mean or where they are kept: the knowledge base (`tandem-core`'s
//! `memory`) turns its entries into [`Document`]s and hits back into results.
//!
//! It has two indexes, each derived data that its owner can always build again:
//!
//! - [`text::TextIndex`]: BM25 over a tantivy index, with the analyzer of [`stem`] and the
//!   top hits found by [`maxscore`] where tantivy's own scorer reads more than it needs.
//! - [`vectors::VectorIndex`]: every document's summary vector, quantised to int8
//!   ([`quantised`]), searched exactly while the table is small and through lists around
//!   k-means [`centroids`] once it is large. The rows live in a mapped base
//!   ([`vector_base`]) and an append-only file over it ([`vector_file`]).
//!
//! [`embeddings::Embedder`] makes the vectors from text (a static model2vec model).
//! [`hybrid`] runs a hybrid search once its caller has made its plans: BM25 and the
//! vectors side by side (on two threads when the table is large), then each candidate's
//! coverage of the query, and the results the caller ranks and shows; [`stages`] shares
//! its last steps between its thread and a helper.
//!
//! Invariants:
//! - No index is the truth. Each records how far it got (a sequence number, a file
//!   generation); its owner catches it up or rebuilds it.
//! - A [`Kind`]'s number is its place in the [`Kinds`] the engine is given: the text index
//!   and the vector file store the name, the vector base the number, so the order is part
//!   of the on-disk format.
//! - No `unsafe`: the mapped base is read through tantivy's mapping.

pub mod centroids;
pub mod embeddings;
pub mod files;
pub mod hybrid;
pub mod maxscore;
pub mod quantised;
pub mod stages;
pub mod stem;
pub mod text;
pub mod vector_base;
pub mod vector_file;
pub mod vectors;

use ulid::Ulid;

/// A document's kind, a facet a search filters by: its place in the engine's [`Kinds`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Kind(pub u8);

/// The kinds' names, in order. A kind past the end reads as the first.
#[derive(Debug, Clone, Copy)]
pub struct Kinds(pub &'static [&'static str]);

impl Kinds {
    pub fn name(self, kind: Kind) -> &'static str {
        self.0
            .get(usize::from(kind.0))
            .copied()
            .unwrap_or(self.0[0])
    }

    /// The kind of this name, in any case, around blanks.
    pub fn parse(self, name: &str) -> Option<Kind> {
        let name = name.trim();
        let at = self.0.iter().position(|n| n.eq_ignore_ascii_case(name))?;
        Some(Kind(at as u8))
    }
}

/// What a document's group is matched by: exactly, but in any case and around blanks.
pub fn group_key(group: &str) -> String {
    group.trim().to_lowercase()
}

/// One document as the engine indexes it.
#[derive(Debug, Clone, Copy)]
pub struct Document<'a> {
    pub id: Ulid,
    /// The sequence number of the write that made it: an index holds every write up to
    /// the highest it was given ([`text::IndexState`]).
    pub seq: u64,
    pub kind: Kind,
    pub group: Option<&'a str>,
    pub title: &'a str,
    pub tags: &'a [String],
    pub body: &'a str,
    /// What the document was written about (a conversation, a task): searched, weighing
    /// less than its own words.
    pub context: Option<&'a str>,
}

/// What can be indexed as a [`Document`]: a rebuild reads its owner's records.
pub trait AsDocument {
    fn as_document(&self) -> Document<'_>;
}

impl AsDocument for Document<'_> {
    fn as_document(&self) -> Document<'_> {
        *self
    }
}

/// What the tests of this crate and of those above it share (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use std::path::Path;

    use crate::embeddings::Embedder;

    /// The model `scripts/test` builds (`scripts/make-test-model`): all-MiniLM-L6-v2 distilled
    /// into 256 dimensions.
    pub fn test_model() -> Embedder {
        let Some(dir) = std::env::var_os("TANDEM_TEST_MODEL") else {
            panic!(
                "TANDEM_TEST_MODEL is not set: run scripts/test (it builds the test model into \
             .test-deps/model), or .test-deps/venv/bin/python scripts/make-test-model DIR \
             and set TANDEM_TEST_MODEL=DIR"
            );
        };
        Embedder::load(Path::new(&dir)).unwrap_or_else(|e| panic!("loading the test model: {e}"))
    }
}

impl<T: AsDocument + ?Sized> AsDocument for &T {
    fn as_document(&self) -> Document<'_> {
        (**self).as_document()
    }
}

/// Documents for the engine's own tests: owned, with the knowledge base's six kinds.
#[cfg(test)]
pub(crate) mod test_docs {
    use super::{AsDocument, Document, Kind, Kinds};
    use ulid::Ulid;

    pub const KINDS: Kinds = Kinds(&[
        "bug",
        "pattern",
        "decision",
        "pitfall",
        "config",
        "reference",
    ]);
    pub const BUG: Kind = Kind(0);
    pub const PATTERN: Kind = Kind(1);
    pub const PITFALL: Kind = Kind(3);
    pub const CONFIG: Kind = Kind(4);
    pub const REFERENCE: Kind = Kind(5);

    #[derive(Debug, Clone)]
    pub struct Doc {
        pub id: Ulid,
        pub seq: u64,
        pub kind: Kind,
        pub group: Option<String>,
        pub title: String,
        pub tags: Vec<String>,
        pub body: String,
        pub context: Option<String>,
    }

    impl Doc {
        pub fn new(
            kind: Kind,
            title: impl Into<String>,
            body: impl Into<String>,
            tags: Vec<String>,
        ) -> Doc {
            Doc {
                id: Ulid::new(),
                seq: 0,
                kind,
                group: None,
                title: title.into(),
                tags,
                body: body.into(),
                context: None,
            }
        }
    }

    impl AsDocument for Doc {
        fn as_document(&self) -> Document<'_> {
            Document {
                id: self.id,
                seq: self.seq,
                kind: self.kind,
                group: self.group.as_deref(),
                title: &self.title,
                tags: &self.tags,
                body: &self.body,
                context: self.context.as_deref(),
            }
        }
    }
}
