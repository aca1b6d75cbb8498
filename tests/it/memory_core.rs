//! The memory core, driven through its Rust API: data-driven cases through `check` helpers.

use tandem_core::calls::CallError;
use tandem_core::memory::{
    EntryType, ImportPart, Memory, MemoryError, MemoryType, NewEntry, RelationType, SearchQuery,
};

use crate::util::{TestHome, entry};

/// A small knowledge base in which each query below has one right answer.
fn fixture(memory: &Memory) -> Vec<String> {
    let items = [
        (
            EntryType::Bug,
            "Fix CORS Safari header",
            "Safari does not accept some CORS headers on preflight requests; send Access-Control-Allow-Headers explicitly.",
            &["cors", "safari", "ios"][..],
            Some("webapp"),
        ),
        (
            EntryType::Pattern,
            "Cross-origin requests best practices",
            "For cross-origin requests always answer the OPTIONS preflight and keep the allowed origins list short.",
            &["cors", "api"][..],
            Some("webapp"),
        ),
        (
            EntryType::Bug,
            "Fix timeout authentication API",
            "The default 30s timeout is too short for the auth API under load; raise it to 90s and retry once.",
            &["timeout", "auth", "api"][..],
            Some("myapp"),
        ),
        (
            EntryType::Decision,
            "Use sled for the local store",
            "We chose sled over SQLite for embedded storage: pure Rust, transactions across trees, no build step.",
            &["storage", "rust"][..],
            None,
        ),
        (
            EntryType::Pitfall,
            "Tokio mutex held across await",
            "Holding a std Mutex guard across an await point deadlocks under load; use tokio::sync::Mutex or scope the guard.",
            &["tokio", "async", "deadlock"][..],
            None,
        ),
        (
            EntryType::Config,
            "Neovim LSP root markers",
            "Set root_markers to .git so the client attaches once per repository.",
            &["neovim", "lsp"][..],
            None,
        ),
        (
            EntryType::Reference,
            "BM25 scoring explained",
            "BM25 ranks documents by term frequency saturation and inverse document frequency, normalised by length.",
            &["search", "ranking"][..],
            None,
        ),
    ];
    items
        .iter()
        .map(|(t, title, content, tags, project)| {
            let mut e = entry(*t, title, content, tags);
            e.project = project.map(str::to_string);
            memory.add(e).unwrap().id
        })
        .collect()
}

fn search(memory: &Memory, query: &str) -> Vec<String> {
    search_with(
        memory,
        SearchQuery {
            query: query.into(),
            ..Default::default()
        },
    )
}

fn search_with(memory: &Memory, q: SearchQuery) -> Vec<String> {
    memory
        .search(&q)
        .unwrap()
        .results
        .into_iter()
        .map(|r| r.title)
        .collect()
}

#[test]
fn search_finds_the_right_entry() {
    let home = TestHome::new();
    let memory = home.memory();
    fixture(&memory);
    // (query, the title that must rank first)
    let cases = [
        ("safari cors", "Fix CORS Safari header"),
        ("preflight headers", "Fix CORS Safari header"),
        ("timeout", "Fix timeout authentication API"),
        ("authentication timeouts", "Fix timeout authentication API"), // stemming
        ("deadlock await", "Tokio mutex held across await"),
        ("TOKIO", "Tokio mutex held across await"), // case
        ("sqlite embedded", "Use sled for the local store"),
        ("root markers", "Neovim LSP root markers"),
        ("inverse document frequency", "BM25 scoring explained"),
        ("ranking", "BM25 scoring explained"), // tag only
    ];
    for (query, want) in cases {
        let got = search(&memory, query);
        assert_eq!(
            got.first().map(String::as_str),
            Some(want),
            "query {query:?} gave {got:?}"
        );
    }
}

#[test]
fn search_output_is_compact_and_normalised() {
    let home = TestHome::new();
    let memory = home.memory();
    fixture(&memory);
    let out = memory
        .search(&SearchQuery {
            query: "cors".into(),
            limit: Some(1),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(out.total, 2, "two entries mention cors");
    assert_eq!(out.results.len(), 1, "limit is honoured");
    let r = &out.results[0];
    assert!(r.score > 0.0 && r.score <= 1.0, "score {}", r.score);
    assert!(
        r.snippet.chars().count() <= 110,
        "snippet too long: {}",
        r.snippet
    );
    assert!(
        r.snippet.to_lowercase().contains("cors"),
        "snippet {:?}",
        r.snippet
    );
    assert_eq!(out.hint, "Use rekall_show(id) for full content and links");

    // Full coverage scores higher than partial coverage.
    let both = memory
        .search(&SearchQuery {
            query: "safari cors".into(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(both.results[0].score, 1.0);
    assert!(both.results[1].score < 0.6, "{:?}", both.results);
}

#[test]
fn search_filters_and_context() {
    let home = TestHome::new();
    let memory = home.memory();
    fixture(&memory);
    // (query, type filter, project filter, context, expected titles)
    type Case<'a> = (
        &'a str,
        Option<EntryType>,
        Option<&'a str>,
        Option<&'a str>,
        Vec<&'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "cors",
            Some(EntryType::Pattern),
            None,
            None,
            vec!["Cross-origin requests best practices"],
        ),
        (
            "cors",
            None,
            Some("WEBAPP"),
            None,
            vec![
                "Fix CORS Safari header",
                "Cross-origin requests best practices",
            ],
        ),
        (
            "api",
            None,
            Some("myapp"),
            None,
            vec!["Fix timeout authentication API"],
        ),
        ("cors", None, Some("nope"), None, vec![]),
        // The context decides between two equally good matches.
        (
            "cors",
            None,
            None,
            Some("the user is on an iPhone with Safari"),
            vec![
                "Fix CORS Safari header",
                "Cross-origin requests best practices",
            ],
        ),
        (
            "cors",
            None,
            None,
            Some("what is the best practice for origins lists"),
            vec![
                "Cross-origin requests best practices",
                "Fix CORS Safari header",
            ],
        ),
    ];
    for (query, t, p, c, want) in cases {
        let got = search_with(
            &memory,
            SearchQuery {
                query: query.into(),
                entry_type: t,
                project: p.map(str::to_string),
                context: c.map(str::to_string),
                ..Default::default()
            },
        );
        assert_eq!(
            got, want,
            "query {query:?} type {t:?} project {p:?} context {c:?}"
        );
    }
}

#[test]
fn bad_input_gets_the_right_code() {
    let home = TestHome::new();
    let memory = home.memory();
    fixture(&memory);
    let long_title = "x".repeat(101);
    let add_cases: Vec<(NewEntry, &str)> = vec![
        (
            NewEntry {
                entry_type: None,
                title: "t".into(),
                ..Default::default()
            },
            "INVALID_ARGUMENT",
        ),
        (entry(EntryType::Bug, "", "c", &[]), "INVALID_ARGUMENT"),
        (
            entry(EntryType::Bug, &long_title, "c", &[]),
            "INVALID_ARGUMENT",
        ),
        (
            NewEntry {
                confidence: Some(6),
                ..entry(EntryType::Bug, "t", "c", &[])
            },
            "INVALID_ARGUMENT",
        ),
        (
            NewEntry {
                confidence: Some(-1),
                ..entry(EntryType::Bug, "t", "c", &[])
            },
            "INVALID_ARGUMENT",
        ),
    ];
    for (new, code) in add_cases {
        let title = new.title.clone();
        let err = memory
            .add(new)
            .err()
            .unwrap_or_else(|| panic!("add {title:?} must fail"));
        assert_eq!(err.code(), code, "{err}");
    }
    let search_cases: Vec<(SearchQuery, &str)> = vec![
        (
            SearchQuery {
                query: "".into(),
                ..Default::default()
            },
            "INVALID_ARGUMENT",
        ),
        (
            SearchQuery {
                query: "x".into(),
                limit: Some(0),
                ..Default::default()
            },
            "INVALID_ARGUMENT",
        ),
        (
            SearchQuery {
                query: "x".into(),
                limit: Some(21),
                ..Default::default()
            },
            "INVALID_ARGUMENT",
        ),
    ];
    for (q, code) in search_cases {
        assert_eq!(memory.search(&q).unwrap_err().code(), code, "{q:?}");
    }
    assert_eq!(
        "bugg".parse::<EntryType>().unwrap_err().code(),
        "INVALID_ENTRY_TYPE"
    );
    assert_eq!(
        "parent".parse::<RelationType>().unwrap_err().code(),
        "INVALID_RELATION_TYPE"
    );
    assert_eq!(
        memory
            .accept("01ARZ3NDEKTSV4RRFFQ69G5FAV")
            .unwrap_err()
            .code(),
        "SUGGESTION_NOT_FOUND"
    );
    assert_eq!(
        memory.reject("nope-nope").unwrap_err().code(),
        "SUGGESTION_NOT_FOUND"
    );
    // The error object is the spec's.
    let err = memory.show("01ARZ3NDEKTSV4RRFFQ69G5FAV").unwrap_err();
    let json = CallError::from(err).to_json();
    assert_eq!(json["error"]["code"], "ENTRY_NOT_FOUND");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("01ARZ3NDEKTSV4RRFFQ69G5FAV")
    );
}

#[test]
fn ids_resolve_by_prefix() {
    let home = TestHome::new();
    let memory = home.memory();
    let ids = fixture(&memory);
    let full = &ids[0];
    // ULIDs made in the same millisecond share a long prefix: the shared part is ambiguous.
    let shared = common_prefix(&ids);
    let cases: Vec<(String, Result<&str, &str>)> = vec![
        (full.clone(), Ok(full)),
        (full.to_lowercase(), Ok(full)),
        (full[..20].to_string(), Ok(full)),
        (full[..4].to_string(), Err("INVALID_ARGUMENT")),
        ("ZZZZZZZZ".into(), Err("ENTRY_NOT_FOUND")),
        ("".into(), Err("INVALID_ARGUMENT")),
    ];
    for (input, want) in cases {
        let got = memory
            .resolve(&input)
            .map(|e| e.id.to_string())
            .map_err(|e| e.code());
        assert_eq!(got.as_deref().map_err(|e| *e), want, "input {input:?}");
    }
    if shared.len() >= 5 {
        match memory.resolve(&shared) {
            Err(MemoryError::AmbiguousId { candidates, .. }) => assert!(candidates.len() >= 2),
            other => panic!("expected ambiguous, got {other:?}"),
        }
    }
}

fn common_prefix(ids: &[String]) -> String {
    let first = &ids[0];
    let n = (0..first.len())
        .take_while(|&i| {
            ids.iter()
                .all(|id| id.as_bytes().get(i) == first.as_bytes().get(i))
        })
        .count();
    first[..n].to_string()
}

#[test]
fn links_both_ways_and_their_errors() {
    let home = TestHome::new();
    let memory = home.memory();
    let ids = fixture(&memory);
    let (a, b) = (&ids[0], &ids[1]);
    let out = memory.link(a, b, RelationType::Related).unwrap();
    assert!(out.created);
    assert_eq!(out.source.title, "Fix CORS Safari header");
    assert_eq!(out.relation_type, "related");

    let err = memory.link(a, b, RelationType::Related).unwrap_err();
    assert_eq!(err.code(), "LINK_ALREADY_EXISTS");
    assert_eq!(
        memory.link(a, a, RelationType::Related).unwrap_err().code(),
        "SELF_LINK_ERROR"
    );
    assert_eq!(
        memory
            .link(a, "01ARZ3NDEKTSV4RRFFQ69G5FAV", RelationType::Related)
            .unwrap_err()
            .code(),
        "ENTRY_NOT_FOUND"
    );
    // Another relation between the same pair is a different link.
    memory.link(b, a, RelationType::Supersedes).unwrap();

    let shown_a = memory.show(a).unwrap();
    assert_eq!(shown_a.links.outgoing.len(), 1);
    assert_eq!(shown_a.links.outgoing[0].target_id, *b);
    assert_eq!(shown_a.links.incoming.len(), 1);
    assert_eq!(shown_a.links.incoming[0].relation_type, "supersedes");
    assert_eq!(
        shown_a.status, "superseded",
        "a supersedes link marks its target"
    );
    let shown_b = memory.show(b).unwrap();
    assert_eq!(shown_b.links.incoming[0].source_id, *a);
    assert_eq!(shown_b.status, "active");
}

#[test]
fn show_records_access_and_has_every_field() {
    let home = TestHome::new();
    let memory = home.memory();
    let out = memory
        .add(NewEntry {
            context: Some("user: it fails on Safari".into()),
            project: Some("webapp".into()),
            confidence: Some(4),
            memory_type: Some(MemoryType::Semantic),
            ..entry(
                EntryType::Bug,
                "Fix CORS Safari header",
                "Send the header.",
                &["CORS", "Safari iOS"],
            )
        })
        .unwrap();
    assert_eq!(out.tags, ["cors", "safari-ios"]);
    assert!(!out.embeddings_calculated);
    let first = memory.show(&out.id).unwrap();
    assert_eq!(first.access_count, 1);
    assert!(first.last_accessed.is_some());
    let second = memory.show(&out.id).unwrap();
    assert_eq!(second.access_count, 2);
    assert_eq!(second.project.as_deref(), Some("webapp"));
    assert_eq!(second.confidence, 4);
    assert_eq!(second.memory_type, "semantic");
    assert_eq!(second.context.as_deref(), Some("user: it fails on Safari"));
    assert!(second.consolidation_score > 0.0 && second.consolidation_score <= 1.0);
    let json = serde_json::to_value(&second).unwrap();
    for field in [
        "id",
        "type",
        "title",
        "content",
        "tags",
        "project",
        "confidence",
        "status",
        "memory_type",
        "created_at",
        "updated_at",
        "last_accessed",
        "access_count",
        "consolidation_score",
        "embeddings",
        "links",
    ] {
        assert!(json.get(field).is_some(), "show lacks {field}");
    }
}

#[test]
fn long_context_is_cut_to_8000() {
    let home = TestHome::new();
    let memory = home.memory();
    let out = memory
        .add(NewEntry {
            context: Some("word ".repeat(2_001)),
            ..entry(EntryType::Bug, "t", "c", &[])
        })
        .unwrap();
    assert!(out.context_truncated);
    assert_eq!(
        memory
            .show(&out.id)
            .unwrap()
            .context
            .unwrap()
            .chars()
            .count(),
        8_000
    );
    let out = memory
        .add(NewEntry {
            context: Some("w".repeat(10_000)),
            ..entry(EntryType::Bug, "u", "c", &[])
        })
        .unwrap();
    assert!(!out.context_truncated);
}

#[test]
fn read_your_writes() {
    let home = TestHome::new();
    let memory = home.memory();
    for i in 0..20 {
        let title = format!("Unique marker zorglub{i}");
        memory
            .add(entry(EntryType::Reference, &title, "body", &[]))
            .unwrap();
        assert_eq!(
            search(&memory, &format!("zorglub{i}")),
            [title],
            "add {i} not visible at once"
        );
    }
}

#[test]
fn similar_entries_make_suggestions() {
    let home = TestHome::new();
    let memory = home.memory();
    fixture(&memory);
    let timeout = |title: &str| {
        entry(
            EntryType::Bug,
            title,
            "The auth API timeout of 30s is too short under load; raise the timeout and retry the auth API call.",
            &["timeout", "auth", "api"],
        )
    };
    let first = memory.add(timeout("Auth API timeout under load")).unwrap();
    assert_eq!(
        first.similar_entries[0].title,
        "Fix timeout authentication API"
    );
    assert!(
        first.similar_entries[0].score >= 0.35,
        "{:?}",
        first.similar_entries
    );
    assert_eq!(
        first.suggestions_created, 1,
        "one link, no generalisation yet: {first:?}"
    );

    let links = memory.link_suggestions(None).unwrap();
    assert_eq!(links.total_pending, 1);
    assert_eq!(links.suggestions[0].entry_a.id, first.id);
    let gens = memory.generalize_suggestions(None).unwrap();
    assert_eq!(
        gens.total_pending, 0,
        "two bugs are not yet a pile: {gens:?}"
    );

    let second = memory.add(timeout("Auth API timeout again")).unwrap();
    assert!(second.similar_entries.len() >= 2);
    let gens = memory.generalize_suggestions(None).unwrap();
    assert_eq!(gens.total_pending, 1, "three similar bugs: {gens:?}");
    assert_eq!(gens.suggestions[0].entries.len(), 3);

    // Accepting a link suggestion creates the link.
    let link_id = memory.link_suggestions(None).unwrap().suggestions[0]
        .id
        .clone();
    let accepted = memory.accept(&link_id).unwrap();
    assert!(accepted.accepted);
    assert_eq!(accepted.suggestion_type, "link");
    let created = accepted.link_created.unwrap();
    let shown = memory.show(&created.source_id).unwrap();
    assert!(
        shown
            .links
            .outgoing
            .iter()
            .any(|l| l.target_id == created.target_id)
    );
    assert_eq!(
        memory.accept(&link_id).unwrap_err().code(),
        "SUGGESTION_ALREADY_RESOLVED"
    );

    // Accepting a generalisation gives a command that works.
    let gen_id = gens.suggestions[0].id.clone();
    let accepted = memory.accept(&gen_id).unwrap();
    let command = accepted.generalize_command.unwrap();
    assert!(
        command.starts_with("tandem memory generalize "),
        "{command}"
    );
    let ids: Vec<String> = command
        .split_whitespace()
        .skip(3)
        .map(str::to_string)
        .collect();
    let generalized = memory.generalize(&ids, None, None, None).unwrap();
    assert_eq!(generalized.derived_from.len(), 3);
    let shown = memory.show(&generalized.entry.id).unwrap();
    assert_eq!(shown.memory_type, "semantic");
    assert_eq!(shown.links.outgoing.len(), 3);
    assert!(
        shown
            .links
            .outgoing
            .iter()
            .all(|l| l.relation_type == "derived_from")
    );

    // A rejected suggestion never comes back.
    let pending = memory.link_suggestions(None).unwrap();
    for s in &pending.suggestions {
        let r = memory.reject(&s.id).unwrap();
        assert!(r.rejected);
    }
    assert_eq!(memory.link_suggestions(None).unwrap().total_pending, 0);
    assert_eq!(
        memory.link_suggestions(Some(51)).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
}

#[test]
fn unrelated_entries_make_no_suggestions() {
    let home = TestHome::new();
    let memory = home.memory();
    fixture(&memory);
    let out = memory
        .add(entry(
            EntryType::Config,
            "Git commit signing with SSH keys",
            "Set gpg.format to ssh and user.signingkey to the public key file.",
            &["git"],
        ))
        .unwrap();
    assert!(out.similar_entries.is_empty(), "{:?}", out.similar_entries);
    assert_eq!(out.suggestions_created, 0);
}

#[test]
fn restart_keeps_everything_and_rebuilds_a_lost_index() {
    let home = TestHome::new();
    let id = {
        let memory = home.memory();
        fixture(&memory);
        memory
            .add(entry(
                EntryType::Bug,
                "Persisted flux capacitor",
                "It survives",
                &[],
            ))
            .unwrap()
            .id
    };
    {
        let memory = home.memory();
        assert_eq!(memory.entry_count().unwrap(), 8);
        assert_eq!(
            search(&memory, "flux capacitor"),
            ["Persisted flux capacitor"]
        );
        assert_eq!(memory.show(&id).unwrap().title, "Persisted flux capacitor");
    }
    // Lose the index entirely: it is rebuilt from sled at open.
    std::fs::remove_dir_all(home.tandem_home().join("index")).unwrap();
    {
        let memory = home.memory();
        assert_eq!(
            search(&memory, "flux capacitor"),
            ["Persisted flux capacitor"]
        );
    }
    // Corrupt it: same.
    let meta = home.tandem_home().join("index/memory/meta.json");
    std::fs::write(&meta, b"{ not json").unwrap();
    {
        let memory = home.memory();
        assert_eq!(
            search(&memory, "flux capacitor"),
            ["Persisted flux capacitor"]
        );
        assert_eq!(memory.reindex(&tandem_core::memory::NoProgress).unwrap(), 8);
    }
}

#[test]
fn export_import_round_trip() {
    let from = TestHome::new();
    let mut buf = Vec::new();
    let ids = {
        let memory = from.memory();
        let ids = fixture(&memory);
        memory
            .link(&ids[0], &ids[1], RelationType::Related)
            .unwrap();
        memory
            .link(&ids[2], &ids[3], RelationType::Supersedes)
            .unwrap();
        let report = memory.export(&mut buf).unwrap();
        assert_eq!((report.entries, report.links), (7, 2));
        // In pages of every size, the same lines: entries, then links.
        for size in [1, 2, 3, 7, 8, 9, 100] {
            let (mut paged, mut after, mut pages) = (Vec::new(), None, 0);
            loop {
                let (part, next) = memory
                    .export_page(after.as_deref(), size, &mut paged)
                    .unwrap();
                assert!(part.entries + part.links <= size as u64);
                pages += 1;
                match next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            assert_eq!(
                String::from_utf8_lossy(&paged),
                String::from_utf8_lossy(&buf)
            );
            assert!(
                pages >= 9_usize.div_ceil(size),
                "size {size}: {pages} pages"
            );
        }
        for bad in ["", "entry:nope", "link:", "somewhere:01H"] {
            let err = memory
                .export_page(Some(bad), 5, &mut Vec::new())
                .unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT", "{bad}: {err}");
        }
        ids
    };
    let to = TestHome::new();
    let memory = to.memory();
    let report = memory.import(&mut buf.as_slice()).unwrap();
    assert_eq!((report.entries_added, report.links_added), (7, 2));
    assert_eq!(search(&memory, "safari cors")[0], "Fix CORS Safari header");
    assert_eq!(memory.show(&ids[0]).unwrap().links.outgoing.len(), 1);
    // Importing again changes nothing.
    let again = memory.import(&mut buf.as_slice()).unwrap();
    assert_eq!(
        (
            again.entries_added,
            again.entries_unchanged,
            again.links_unchanged
        ),
        (0, 7, 2)
    );
    // A bad line imports nothing and says where.
    let mut bad = buf.clone();
    bad.extend_from_slice(b"{\"record\": \"entry\", \"oops\": 1}\n");
    let err = TestHome::new()
        .memory()
        .import(&mut bad.as_slice())
        .unwrap_err();
    assert!(err.to_string().contains("line 10"), "{err}");
    // A line that is not an object, or names its record twice, says so.
    for (line, says) in [
        ("7", "expected a JSON object"),
        (
            r#"{"record": "entry", "record": "link"}"#,
            "duplicate field `record`",
        ),
    ] {
        let err = TestHome::new()
            .memory()
            .import(&mut format!("{line}\n").as_bytes())
            .unwrap_err();
        assert!(err.to_string().contains(says), "{line}: {err}");
    }
    // The same entry twice in one import (a concatenation of two exports) is one entry,
    // the later version kept, whatever the order.
    let twice = TestHome::new();
    let memory = twice.memory();
    let first = String::from_utf8(buf.clone()).unwrap();
    let line = first.lines().next().unwrap();
    let mut newer: serde_json::Value = serde_json::from_str(line).unwrap();
    newer["title"] = serde_json::json!("Fix CORS Safari header (revised)");
    newer["updated_at"] = serde_json::json!("2099-01-01T00:00:00Z");
    let input = format!("{line}\n{newer}\n{line}\n");
    let report = memory.import(&mut input.as_bytes()).unwrap();
    assert_eq!(
        (
            report.entries_added,
            report.entries_updated,
            report.entries_unchanged
        ),
        (1, 1, 1)
    );
    assert_eq!(memory.overview(0, 0).unwrap().total, 1);
    assert_eq!(memory.entry_count().unwrap(), 1);
    let id = newer["id"].as_str().unwrap();
    assert!(memory.show(id).unwrap().title.ends_with("(revised)"));
    assert_eq!(search(&memory, "revised").len(), 1);
    // Imported again, later still: the entry's document is replaced, not added beside the
    // first import's (an entry new to the import has no document to replace).
    newer["title"] = serde_json::json!("Fix CORS Safari header (revised twice)");
    newer["updated_at"] = serde_json::json!("2099-01-02T00:00:00Z");
    let report = memory.import(&mut format!("{newer}\n").as_bytes()).unwrap();
    assert_eq!(report.entries_updated, 1);
    assert_eq!(search(&memory, "revised").len(), 1);
    assert_eq!(search(&memory, "safari cors").len(), 1);
}

/// Each commit makes a segment, and a search opens each apart: they are merged once writes
/// pause (every one here, the others weighing more than an eighth of the largest), and all
/// of them after a large import. Every entry is found as before.
#[test]
fn the_index_segments_are_merged_when_writes_pause_and_after_each_part_of_an_import() {
    let home = TestHome::new();
    let memory = home.memory();
    let words = ["amber", "birch", "cobalt", "dune", "ember", "fjord"];
    for w in words {
        memory
            .add(entry(
                EntryType::Pattern,
                &format!("{w} pattern"),
                "body",
                &[],
            ))
            .unwrap();
        // A search commits what was written: one segment an add.
        assert_eq!(search(&memory, w).len(), 1, "{w}");
    }
    assert!(memory.index_segments() >= 3, "{}", memory.index_segments());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while memory.index_segments() > 1 {
        assert!(std::time::Instant::now() < deadline, "not merged when idle");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for w in words {
        assert_eq!(search(&memory, w).len(), 1, "{w} after the merge");
    }

    // Another segment, then an import of a few thousand in two parts, as the CLI sends a
    // large one. After the first, the smaller segments are merged and the import's own
    // stays apart; once those beside the largest weigh, everything is one segment.
    memory
        .add(entry(EntryType::Bug, "glacier bug", "body", &[]))
        .unwrap();
    assert_eq!(search(&memory, "glacier").len(), 1);
    assert_eq!(memory.index_segments(), 2);
    let part = |from| references_jsonl("imported", from);
    memory.import(&mut part(0).as_bytes()).unwrap();
    assert_eq!(memory.index_segments(), 2);
    memory.import(&mut part(2500).as_bytes()).unwrap();
    assert_eq!(memory.index_segments(), 1);
    for w in words.iter().chain(&["glacier"]) {
        assert_eq!(search(&memory, w).len(), 1, "{w} after the import");
    }
    assert_eq!(search(&memory, "imported").len(), 5);
}

/// 2,500 references titled `{title} {i}` from `from` on, as JSON Lines to import.
fn references_jsonl(title: &str, from: usize) -> String {
    references_jsonl_of(
        (from..from + 2500).map(|i| (format!("{title} {i}"), format!("number {i}"))),
    )
}

/// References of these titles and contents, as JSON Lines to import.
fn references_jsonl_of(entries: impl Iterator<Item = (String, String)>) -> String {
    let mut jsonl = String::new();
    for (title, content) in entries {
        let e = tandem_core::memory::Entry::new(EntryType::Reference, title, content, Vec::new());
        let mut record = serde_json::to_value(&e).unwrap();
        record["record"] = "entry".into();
        jsonl.push_str(&format!("{record}\n"));
    }
    jsonl
}

/// A large import is parsed on every core; a bad line in each half still names the first,
/// and imports nothing, through the API and the CLI alike.
#[test]
fn a_large_import_names_its_first_bad_line() {
    let mut lines: Vec<String> = references_jsonl("halves", 0)
        .lines()
        .map(str::to_string)
        .collect();
    lines[1700] = r#"{"record": "entry", "title": 7}"#.into();
    lines[2300] = "not json".into();
    let jsonl = lines.join("\n");
    let home = TestHome::new();
    let err = home.memory().import(&mut jsonl.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("line 1701:"), "{err}");
    assert_eq!(home.memory().entry_count().unwrap(), 0);

    let cli = TestHome::new();
    let file = cli.path().join("halves.jsonl");
    std::fs::write(&file, &jsonl).unwrap();
    let out = cli
        .std_command()
        .args(["memory", "import"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("line 1701:"),
        "{stderr}"
    );
    let found = crate::util::succeeds_json({
        let mut c = cli.std_command();
        c.args(["memory", "search", "halves"]);
        c
    });
    assert_eq!(found["total"], 0, "{found}");
}

/// The CLI sends a large import in parts, each but the last saying more follow: each part
/// is durable at once, the index commits and merges once, after the last (meanwhile a
/// search still commits, and sees every part written).
#[test]
fn an_import_in_parts_is_merged_once_its_last_part_is_in() {
    let home = TestHome::new();
    let memory = home.memory();
    let part = |from| references_jsonl("parted", from);
    let total = |memory: &Memory| {
        memory
            .search(&SearchQuery {
                query: "parted".into(),
                ..Default::default()
            })
            .unwrap()
            .total
    };
    for from in [0, 2500] {
        memory
            .import_part(&mut part(from).as_bytes(), ImportPart::More)
            .unwrap();
    }
    assert_eq!(memory.entry_count().unwrap(), 5000);
    assert_eq!(total(&memory), 5000, "a search sees the parts written");
    memory
        .import_part(&mut part(5000).as_bytes(), ImportPart::Last)
        .unwrap();
    assert_eq!(memory.index_segments(), 1);
    assert_eq!(total(&memory), 7500);
    drop(memory);

    // Parts that more were to follow, then the end (the CLI stopped): what they wrote
    // is searchable at the next open.
    let memory = home.memory();
    memory
        .import_part(&mut part(7500).as_bytes(), ImportPart::More)
        .unwrap();
    drop(memory);
    let memory = home.memory();
    assert_eq!(total(&memory), 10_000);
}

/// The first 2,500 references titled `{title} {i}` of an import that more parts follow.
fn first_part_of_an_import(memory: &Memory, title: &str) {
    memory
        .import_part(&mut references_jsonl(title, 0).as_bytes(), ImportPart::More)
        .unwrap();
}

/// Between two parts of an import the index is not committed when writes pause: each
/// commit would cut a segment (a million entries came in 200 parts, and as many segments),
/// merged again and again as they came. A part that no other follows (the CLI stopped) is
/// still committed once the wait for it ends.
#[test]
fn the_pause_between_two_parts_of_an_import_commits_nothing_until_the_wait_ends() {
    let home = TestHome::new();
    let memory = home.memory();
    first_part_of_an_import(&memory, "waiting");
    // Four times the pause after which writes are committed.
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(memory.index_segments(), 0, "committed between two parts");
    let waited = std::time::Instant::now();
    while memory.index_segments() == 0 {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(20),
            "never committed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(memory.index_segments(), 1);
}

/// An add between two parts of an import finds what it resembles among the entries the
/// import left uncommitted (past a few, committed for it), and its write commits them.
#[test]
fn an_add_between_two_parts_of_an_import_commits_what_they_left() {
    let home = TestHome::new();
    let memory = home.memory();
    first_part_of_an_import(&memory, "ledger");
    assert_eq!(memory.index_segments(), 0);
    let out = memory
        .add(entry(
            EntryType::Reference,
            "ledger 7 again",
            "number 7, once more",
            &[],
        ))
        .unwrap();
    assert_eq!(
        memory.index_segments(),
        1,
        "the import's part was committed"
    );
    assert!(
        out.similar_entries.iter().any(|s| s.title == "ledger 7"),
        "{:?}",
        out.similar_entries
    );
}

/// On a large index (10,000 entries and more), a search of common words reads the entries
/// holding every one of them, where BM25's top hits read most of each word's postings:
/// the results are the same, the total counts those entries. When none holds every word,
/// the search is the full one.
#[test]
fn a_search_of_common_words_on_a_large_index_reads_the_entries_holding_them_all() {
    let home = TestHome::new();
    let memory = home.memory();
    // alpha in half the entries, beta in the other half, gamma in a third.
    let jsonl = references_jsonl_of((0..10_000).map(|i| {
        let mut words = vec![if i % 2 == 0 { "alpha" } else { "beta" }];
        if i % 3 == 0 {
            words.push("gamma");
        }
        (
            format!("ledger {i} {}", words.join(" ")),
            format!("row {i}"),
        )
    }));
    memory.import(&mut jsonl.as_bytes()).unwrap();
    let found = |query: &str| {
        memory
            .search(&SearchQuery {
                query: query.into(),
                limit: Some(20),
                ..Default::default()
            })
            .unwrap()
    };
    let both = found("alpha gamma");
    assert_eq!(both.results.len(), 20);
    for r in &both.results {
        assert!(r.title.contains("alpha gamma"), "{}", r.title);
    }
    // 1,667 entries hold both; past 1,000 matches the total is an estimate, to two figures.
    assert_eq!(both.total, 1_700, "the entries holding both");
    // No entry holds both: every entry holding either, as the full search finds them.
    let either = found("alpha beta");
    assert_eq!(either.results.len(), 20);
    assert_eq!(either.total, 10_000);
    // A distinctive word beside a common one: its entry first.
    let one = found("gamma 4242");
    assert!(
        one.results[0].title.starts_with("ledger 4242 "),
        "{:?}",
        one.results[0]
    );
    // A word every entry holds ("ledger") is left out of BM25's query beside a
    // distinctive one; the total still counts the entries holding either.
    let ubiquitous = found("ledger 4242");
    assert!(
        ubiquitous.results[0].title.starts_with("ledger 4242 "),
        "{:?}",
        ubiquitous.results[0]
    );
    assert_eq!(ubiquitous.total, 10_000);
}
