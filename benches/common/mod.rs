//! What the benchmarks share: percentiles, formatting, a generated file tree, an LSP client.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

pub mod clustered;
pub mod corpus;
pub mod home;
pub mod load;
pub mod lsp;

#[derive(Clone, Copy, Default)]
pub struct Stats {
    pub n: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Stats {
    pub fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Stats {
            n: samples.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// A `kB` figure of `/proc/PID/status` (0 when unreadable).
pub fn proc_status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// This process's page faults so far, minor and major (`/proc/self/stat`; zeros elsewhere).
pub fn page_faults() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis, from the state (field 3):
    // minflt is field 10, majflt field 12.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse().ok()).unwrap_or(0);
    (field(10), field(12))
}

/// Starts a bench's section of `docs/benchmarks.md`: its heading and what it measures.
///
/// A bench prints its sections as Markdown on stdout, one `##` heading each, and its
/// progress on stderr; `scripts/bench` stamps the sections and writes them into the file.
pub fn section(title: &str, about: &str) {
    println!("## {title}\n\n{about}\n");
}

pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// The path of generated file `i`: a hundred files a directory.
pub fn file_path(i: usize) -> String {
    format!("d{:04}/f{i}.txt", i / 100)
}

/// Writes `files` small text files under `root`.
pub fn generate(root: &Path, files: usize) {
    for i in 0..files {
        let p = root.join(file_path(i));
        if i % 100 == 0 {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        }
        let body: String = (0..10).map(|l| format!("file {i} line {l}\n")).collect();
        std::fs::write(p, body).unwrap();
    }
}
