//! The benchmarks' generated knowledge base: realistic developer entries (a Zipf-like
//! vocabulary of technical stems, glue words, six types, twenty projects), deterministic
//! from a seed, and queries drawn from the same vocabulary.

use serde_json::{Value, json};
use tandem_core::memory::{EntryType, NewEntry};

/// A generated entry.
pub struct Generated {
    pub entry_type: EntryType,
    pub title: String,
    pub content: String,
    pub tags: Vec<String>,
    pub project: String,
    pub context: Option<String>,
}

impl Generated {
    pub fn new_entry(&self) -> NewEntry {
        NewEntry {
            entry_type: Some(self.entry_type),
            title: self.title.clone(),
            content: self.content.clone(),
            tags: self.tags.clone(),
            project: Some(self.project.clone()),
            context: self.context.clone(),
            ..Default::default()
        }
    }

    pub fn tandem_record(&self, i: usize) -> Value {
        let ts = "2026-01-01T00:00:00Z";
        let mut record = json!({
            "record": "entry",
            "id": record_id(i).to_string(),
            "type": self.entry_type.as_str(),
            "title": self.title,
            "content": self.content,
            "tags": self.tags,
            "project": self.project,
            "confidence": 3,
            "memory_type": "episodic",
            "status": "active",
            "created_at": ts,
            "updated_at": ts,
            "access_count": 0,
        });
        if let Some(context) = &self.context {
            record["context"] = json!(context);
        }
        record
    }

    pub fn reference_record(&self, i: usize) -> Value {
        json!({
            "type": "entity",
            "name": format!("{} #{i}", self.title),
            "entityType": self.entry_type.as_str(),
            "observations": [self.content],
        })
    }
}

/// Deterministic generator of developer-knowledge text.
pub struct Corpus {
    state: u64,
    words: Vec<String>,
    /// Each entry comes with a context ([`Corpus::with_contexts`]).
    contexts: bool,
}

const STEMS: &[&str] = &[
    "auth",
    "token",
    "cache",
    "timeout",
    "retry",
    "socket",
    "query",
    "index",
    "schema",
    "migration",
    "deploy",
    "build",
    "compile",
    "linker",
    "async",
    "await",
    "mutex",
    "thread",
    "pool",
    "queue",
    "header",
    "cors",
    "safari",
    "chrome",
    "render",
    "layout",
    "style",
    "config",
    "env",
    "secret",
    "docker",
    "kernel",
    "memory",
    "leak",
    "panic",
    "error",
    "parse",
    "json",
    "yaml",
    "toml",
    "route",
    "handler",
    "session",
    "cookie",
    "redirect",
    "proxy",
    "tls",
    "cert",
    "dns",
    "latency",
    "bench",
    "profile",
    "trace",
    "log",
    "metric",
    "alert",
    "test",
    "fixture",
    "mock",
    "snapshot",
    "git",
    "rebase",
    "merge",
    "branch",
    "commit",
    "diff",
    "patch",
    "review",
    "lint",
    "format",
    "api",
    "client",
    "server",
    "stream",
    "buffer",
    "encode",
    "decode",
    "unicode",
    "locale",
    "time",
];
const SUFFIXES: &[&str] = &[
    "", "s", "er", "ing", "ed", "ion", "ment", "ness", "al", "ity", "ize", "or", "ure", "ive",
    "able",
];
const GLUE: &[&str] = &[
    "the", "a", "when", "with", "under", "after", "before", "on", "in", "for", "because", "so",
    "and", "but", "fails", "breaks", "needs", "uses", "returns", "drops",
];
/// The words [`Corpus::diverse`] adds.
const DIVERSE_WORDS: usize = 40_000;
const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "be", "da", "fu", "go", "hi", "ja", "ke", "pa",
    "qu", "ri", "so", "ze",
];
const TYPES: [EntryType; 6] = [
    EntryType::Bug,
    EntryType::Pattern,
    EntryType::Decision,
    EntryType::Pitfall,
    EntryType::Config,
    EntryType::Reference,
];

impl Corpus {
    pub fn new(seed: u64) -> Corpus {
        let mut words = Vec::new();
        for s in STEMS {
            for x in SUFFIXES {
                words.push(format!("{s}{x}"));
            }
        }
        for i in 0..800 {
            words.push(
                format!(
                    "{}{}",
                    STEMS[i % STEMS.len()],
                    ["x", "ql", "io", "db", "rs", "js", "ts", "go"][i % 8]
                ) + &i.to_string(),
            );
        }
        Corpus {
            state: seed.max(1),
            words,
            contexts: false,
        }
    }

    /// The same generator, each entry with a context of 20 to 59 words: the conversation
    /// an agent was in when it wrote the entry (spec 003's `context`). Its words are the
    /// entries' own, so a word most entries hold is in most contexts too, and a search
    /// finds it in two fields.
    #[allow(dead_code)] // a bench module: not every bench uses every generator
    pub fn with_contexts(self) -> Corpus {
        Corpus {
            contexts: true,
            ..self
        }
    }

    /// The same generator over a wide vocabulary: after the technical words,
    /// [`DIVERSE_WORDS`] more made of syllables, as a real knowledge base names thousands of
    /// services, libraries, functions and errors. [`Corpus::new`]'s few hundred stems put
    /// each query's words in a large share of the entries: the clustered worst case of a
    /// search, and of the similarity an add looks for.
    #[allow(dead_code)] // a bench module: not every bench uses every generator
    pub fn diverse(seed: u64) -> Corpus {
        let mut corpus = Corpus::new(seed);
        for i in 0..DIVERSE_WORDS {
            // `i` in base 20, a syllable a digit, then one more: no two alike.
            let mut word = String::new();
            let mut n = i;
            loop {
                word.push_str(SYLLABLES[n % SYLLABLES.len()]);
                n /= SYLLABLES.len();
                if n == 0 {
                    break;
                }
            }
            word.push_str(SYLLABLES[(i * 7) % SYLLABLES.len()]);
            corpus.words.push(word);
        }
        corpus
    }

    /// Where the generator is in its sequence, to go on from there ([`Corpus::resumed`]).
    #[allow(dead_code)] // a bench module: not every bench uses every generator
    pub fn state(&self) -> u64 {
        self.state
    }

    /// The generator at `state`, as [`Corpus::state`] gave it.
    #[allow(dead_code)]
    pub fn resumed(self, state: u64) -> Corpus {
        Corpus {
            state: state.max(1),
            ..self
        }
    }

    pub fn next(&mut self) -> u64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545F4914F6CDD1D)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        // Zipf-like: small indexes far more often, as in real vocabularies.
        let r = (self.next() % 10_000) as f64 / 10_000.0;
        let i = ((items.len() as f64).powf(r) - 1.0) as usize;
        &items[i.min(items.len() - 1)]
    }

    pub fn word(&mut self) -> String {
        if self.next().is_multiple_of(4) {
            GLUE[(self.next() % GLUE.len() as u64) as usize].to_string()
        } else {
            let words = std::mem::take(&mut self.words);
            let w = self.pick(&words).clone();
            self.words = words;
            w
        }
    }

    pub fn sentence(&mut self, n: usize) -> String {
        (0..n).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }

    pub fn entry(&mut self) -> Generated {
        let title_words = 4 + (self.next() % 5) as usize;
        let mut title = self.sentence(title_words);
        title.truncate(100);
        let content_words = 60 + (self.next() % 80) as usize;
        let content = self.sentence(content_words) + ".";
        let tags = (0..3)
            .map(|_| STEMS[(self.next() % STEMS.len() as u64) as usize].to_string())
            .collect();
        let entry_type = TYPES[(self.next() % 6) as usize];
        let project = format!("project{}", self.next() % 20);
        let context = self.contexts.then(|| {
            let n = 20 + (self.next() % 40) as usize;
            self.sentence(n)
        });
        Generated {
            entry_type,
            title,
            content,
            tags,
            project,
            context,
        }
    }

    /// One of the numbered, rarer words.
    pub fn rare_word(&mut self) -> String {
        let first_rare = STEMS.len() * SUFFIXES.len();
        let i = first_rare + (self.next() as usize) % (self.words.len() - first_rare);
        self.words[i].clone()
    }

    pub fn query(&mut self) -> String {
        let n = 2 + (self.next() % 2) as usize;
        let words = std::mem::take(&mut self.words);
        let q = (0..n)
            .map(|_| self.pick(&words).clone())
            .collect::<Vec<_>>()
            .join(" ");
        self.words = words;
        q
    }
}

/// The id of record `i`: a millisecond apart each, with 80 bits as random as a real ULID's
/// (a bijection of `i`), so that what ids cost on disk (sled's keys, the index's terms and
/// fast fields) is what a user's entries cost; sequential ids packed into almost nothing.
pub fn record_id(i: usize) -> ulid::Ulid {
    let random =
        (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835) & ((1 << 80) - 1);
    ulid::Ulid::from_parts(1_700_000_000_000 + i as u64, random)
}
