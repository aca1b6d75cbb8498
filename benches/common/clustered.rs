//! A clustered knowledge base: titles of 4 words and contents of 40 words drawn from a
//! 60-word technical vocabulary in six topics, so that most entries are similar to many
//! others. The worst case for similarity on add and for suggestions (issue 9); shared by
//! the memory benchmark and the memory tests.

use tandem_core::memory::{EntryType, NewEntry};

/// Six topics of ten words. An entry draws most of its words from its topic.
pub const TOPICS: [[&str; 10]; 6] = [
    [
        "cors",
        "safari",
        "header",
        "preflight",
        "origin",
        "cookie",
        "browser",
        "chrome",
        "redirect",
        "csp",
    ],
    [
        "auth",
        "jwt",
        "token",
        "session",
        "oauth",
        "login",
        "refresh",
        "expiry",
        "scope",
        "signature",
    ],
    [
        "redis",
        "cache",
        "postgres",
        "query",
        "index",
        "migration",
        "schema",
        "transaction",
        "deadlock",
        "replica",
    ],
    [
        "timeout",
        "retry",
        "backoff",
        "socket",
        "proxy",
        "dns",
        "tls",
        "latency",
        "gateway",
        "keepalive",
    ],
    [
        "docker",
        "build",
        "deploy",
        "pipeline",
        "artifact",
        "linker",
        "compile",
        "dependency",
        "version",
        "rollback",
    ],
    [
        "async", "mutex", "thread", "panic", "memory", "leak", "queue", "worker", "stream",
        "buffer",
    ],
];

/// Words of an entry's own topic, out of 100; the rest come from the whole vocabulary.
const IN_TOPIC: u64 = 75;

/// A deterministic generator of clustered entries.
pub struct Clustered {
    state: u64,
}

impl Clustered {
    pub fn new(seed: u64) -> Clustered {
        Clustered { state: seed.max(1) }
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545F4914F6CDD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn word(&mut self, topic: usize) -> &'static str {
        if self.next() % 100 < IN_TOPIC {
            // Within a topic, the first words are the most common (1/(i+1)-ish).
            let i = self.below(10);
            let j = self.below(i + 1);
            TOPICS[topic][j]
        } else {
            TOPICS[self.below(6)][self.below(10)]
        }
    }

    fn words(&mut self, topic: usize, n: usize) -> String {
        (0..n)
            .map(|_| self.word(topic))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The next entry: a topic, a type, 4 title words, 40 content words, 2 topic tags.
    pub fn entry(&mut self) -> NewEntry {
        let topic = self.below(TOPICS.len());
        let entry_type = EntryType::ALL[self.below(EntryType::ALL.len())];
        let title = self.words(topic, 4);
        let content = self.words(topic, 40);
        let first = self.below(10);
        let second = (first + 1 + self.below(9)) % 10;
        NewEntry {
            entry_type: Some(entry_type),
            title,
            content,
            tags: vec![TOPICS[topic][first].into(), TOPICS[topic][second].into()],
            project: Some(format!("project{}", self.below(5))),
            ..Default::default()
        }
    }
}
