//! Memory learns from tasks (issue 12), through the Rust API on one store: a completed
//! task's decisions and issues become entry suggestions (type, title, content, tags, the
//! task, its workflow and the files it changed in a real git repository); accepted, one is
//! an ordinary entry; rejected, it never comes back; what the memory already says is not
//! suggested, by words and by meaning.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tandem_core::learn::{self, TaskCompletion};
use tandem_core::memory::{EntryType, Memory, NewEntry, NoProgress, SearchQuery};
use tandem_core::store::Store;
use tandem_core::tasks::{
    Completion, CompletionStatus, DecisionCategory, IssueType, NewDecision, NewIssue, NewMilestone,
    NewTask, NewWorkflow, Outcome, Tasks,
};

use crate::memory_embeddings::test_model;
use crate::util::{TestHome, entry, git, repo_with, write_files};

/// Memory and tasks on one store, and a git repository to work in.
struct World {
    _home: TestHome,
    repo: PathBuf,
    tasks: Tasks,
    memory: Memory,
}

impl World {
    fn new() -> World {
        let home = TestHome::new();
        let repo = home.path().join("repo");
        repo_with(
            &repo,
            &[
                ("auth.ts", "export const auth = 1;\n"),
                ("api.ts", "export const api = 1;\n"),
                ("README.md", "readme\n"),
            ],
        );
        let store = Arc::new(Store::open(&home.tandem_home()).unwrap());
        let tasks = Tasks::open(store.clone()).unwrap();
        let memory = Memory::open(store, &NoProgress).unwrap();
        World {
            _home: home,
            repo,
            tasks,
            memory,
        }
    }

    /// The same, with the test embedding model ready.
    fn with_model() -> World {
        let w = World::new();
        w.memory.use_embedder(test_model()).unwrap();
        w
    }

    fn workflow(&self, name: &str) -> String {
        self.tasks
            .start_workflow(
                &self.repo,
                NewWorkflow {
                    name: name.into(),
                    ..Default::default()
                },
            )
            .unwrap()
            .workflow_id
    }

    fn start(&self, workflow_id: &str, name: &str) -> String {
        self.tasks
            .start_task(
                &self.repo,
                NewTask {
                    workflow_id: workflow_id.into(),
                    name: name.into(),
                    goal: "Verify JWT tokens on every request".into(),
                    areas: vec!["auth".into(), "api".into()],
                    ..Default::default()
                },
            )
            .unwrap()
            .task_id
    }

    fn decide(&self, task_id: &str, d: &Decision) {
        self.tasks
            .log_decision(NewDecision {
                task_id: task_id.into(),
                category: d.category,
                question: d.question.into(),
                options_considered: d.options.iter().map(|o| o.to_string()).collect(),
                chosen: d.chosen.into(),
                reasoning: d.reasoning.into(),
                trade_offs: d.trade_offs.map(str::to_string),
            })
            .unwrap();
    }

    fn complete(&self, task_id: &str) -> TaskCompletion {
        learn::complete_task(&self.tasks, &self.memory, completion(task_id)).unwrap()
    }

    /// A task of `workflow_id` that logs `decisions`, then completes.
    fn task_deciding(
        &self,
        workflow_id: &str,
        name: &str,
        decisions: &[&Decision],
    ) -> TaskCompletion {
        let task = self.start(workflow_id, name);
        for d in decisions {
            self.decide(&task, d);
        }
        self.complete(&task)
    }
}

fn completion(task_id: &str) -> Completion {
    Completion {
        task_id: task_id.into(),
        status: CompletionStatus::Success,
        outcome: Outcome {
            summary: "JWT middleware in place.".into(),
            ..Default::default()
        },
        metadata: None,
    }
}

struct Decision {
    category: DecisionCategory,
    question: &'static str,
    options: &'static [&'static str],
    chosen: &'static str,
    reasoning: &'static str,
    trade_offs: Option<&'static str>,
}

const JOSE: Decision = Decision {
    category: DecisionCategory::LibraryChoice,
    question: "Which JWT library should verify tokens?",
    options: &["jsonwebtoken", "jose"],
    chosen: "jose",
    reasoning: "Typed API, maintained, and works in edge runtimes",
    trade_offs: Some("Fewer examples online"),
};

const MIDDLEWARE: Decision = Decision {
    category: DecisionCategory::Architecture,
    question: "Where should token verification happen?",
    options: &["middleware", "each handler"],
    chosen: "middleware",
    reasoning: "One place to audit; handlers stay simple",
    trade_offs: None,
};

const SKEW: &str =
    "Clock skew between servers made fresh tokens fail verification as not yet valid";
const SKEW_FIX: &str = "Allow 30 seconds of clock tolerance in jose's jwtVerify";

/// Entries on other subjects, so that word weights mean something.
fn background(memory: &Memory) {
    for e in [
        entry(
            EntryType::Bug,
            "Safari date parsing fails on ISO strings",
            "new Date('2024-01-02 10:00') gives Invalid Date in Safari; put a T between date and time.",
            &["safari", "dates"],
        ),
        entry(
            EntryType::Pitfall,
            "Postgres deadlock when two transactions update rows in different order",
            "Update rows in primary key order.",
            &["postgres", "locking"],
        ),
        entry(
            EntryType::Pattern,
            "Retry flaky HTTP calls with exponential backoff and jitter",
            "Wrap outbound requests in a capped exponential backoff with random jitter.",
            &["http", "retry"],
        ),
        entry(
            EntryType::Decision,
            "Use sled for storage",
            "We chose sled over SQLite: embedded, pure Rust.",
            &["storage"],
        ),
    ] {
        memory.add(e).unwrap();
    }
}

/// The suggestions' types and titles, sorted (events logged within a millisecond are
/// stored in no particular order).
fn titles(done: &TaskCompletion) -> Vec<(String, String)> {
    let mut titles: Vec<(String, String)> = done
        .memory_suggestions
        .iter()
        .map(|s| (s.entry_type.clone(), s.title.clone()))
        .collect();
    titles.sort();
    titles
}

fn search(memory: &Memory, query: &str) -> Vec<String> {
    memory
        .search(&SearchQuery {
            query: query.into(),
            ..SearchQuery::default()
        })
        .unwrap()
        .results
        .into_iter()
        .map(|r| r.id)
        .collect()
}

#[test]
fn a_completed_task_suggests_its_decisions_and_issues_as_entries() {
    let w = World::new();
    let wf = w.workflow("Add authentication");
    let task = w.start(&wf, "Setup JWT middleware");
    w.decide(&task, &JOSE);
    w.decide(&task, &MIDDLEWARE);
    w.tasks
        .log_issue(NewIssue {
            task_id: task.clone(),
            issue_type: IssueType::BugEncountered,
            description: SKEW.into(),
            resolution: SKEW_FIX.into(),
            requires_human_review: false,
        })
        .unwrap();
    w.tasks
        .log_milestone(NewMilestone {
            task_id: task.clone(),
            message: "Tests pass".into(),
            progress: Some(90.0),
            metadata: None,
        })
        .unwrap();
    // A commit, an untracked file and a deletion during the task.
    write_files(&w.repo, &[("auth.ts", "export const auth = 2;\n")]);
    git(&w.repo, &["commit", "-qam", "auth"]);
    write_files(&w.repo, &[("src/middleware.ts", "verify();\n")]);
    std::fs::remove_file(w.repo.join("README.md")).unwrap();

    let done = w.complete(&task);
    assert_eq!(done.task.files_changed.added, ["src/middleware.ts"]);
    let jose_title = "Which JWT library should verify tokens? → jose";
    let middleware_title = "Where should token verification happen? → middleware";
    assert_eq!(
        titles(&done),
        [
            ("bug".to_string(), SKEW.to_string()),
            ("decision".to_string(), middleware_title.to_string()),
            ("decision".to_string(), jose_title.to_string()),
        ],
        "one per decision and issue, none for the milestone"
    );
    let hint = done.hint.as_deref().unwrap();
    assert!(
        hint.contains("3 memory suggestions") && hint.contains("rekall_suggest_entries"),
        "{hint}"
    );
    assert!(hint.contains("rekall_accept_suggestion") && hint.contains("rekall_reject_suggestion"));

    // The review lists them with the proposed entries.
    let pending = w.memory.entry_suggestions(None).unwrap();
    assert_eq!(pending.total_pending, 3);
    let proposed = |title: &str| {
        pending
            .suggestions
            .iter()
            .find(|s| s.entry.title == title)
            .unwrap_or_else(|| panic!("no suggestion titled {title}: {pending:#?}"))
    };
    let jose = proposed(jose_title);
    assert_eq!(
        jose.entry.content,
        "Which JWT library should verify tokens?\n\n\
         Options considered: jsonwebtoken; jose\n\
         Chosen: jose\n\
         Reasoning: Typed API, maintained, and works in edge runtimes\n\
         Trade-offs: Fewer examples online\n"
    );
    assert_eq!(
        jose.entry.tags,
        ["library-choice", "add-authentication", "auth", "api"]
    );
    assert_eq!(jose.entry.project.as_deref(), Some("repo"));
    assert_eq!(jose.entry.confidence, 3);
    let context = jose.entry.context.as_deref().unwrap();
    for said in [
        task.as_str(),
        "\"Setup JWT middleware\"",
        wf.as_str(),
        "\"Add authentication\"",
        "Files changed: added src/middleware.ts; modified auth.ts; deleted README.md.",
    ] {
        assert!(context.contains(said), "{said:?} not in {context}");
    }
    assert!(
        jose.reason.starts_with("Decision logged in task"),
        "{}",
        jose.reason
    );
    assert_eq!(
        proposed(middleware_title).entry.tags,
        ["architecture", "add-authentication", "auth", "api"]
    );
    let skew = proposed(SKEW);
    assert_eq!(skew.entry.entry_type, "bug");
    assert_eq!(
        skew.entry.content,
        format!("{SKEW}\n\nResolution: {SKEW_FIX}\n")
    );
    assert_eq!(skew.entry.tags[0], "bug-encountered");

    // A suggestion is not an entry yet.
    assert!(search(&w.memory, "jose JWT library").is_empty());

    // Accepted: an ordinary entry, found by search, shown with its context.
    let accepted = w.memory.accept(&jose.id).unwrap();
    assert_eq!(accepted.suggestion_type, "entry");
    let created = accepted.entry_created.unwrap();
    assert_eq!(
        (created.title.as_str(), created.entry_type.as_str()),
        (jose_title, "decision")
    );
    assert_eq!(search(&w.memory, "jose JWT library")[0], created.id);
    let shown = w.memory.show(&created.id).unwrap();
    assert_eq!(shown.content, jose.entry.content);
    assert_eq!(shown.tags, jose.entry.tags);
    assert_eq!(shown.context, jose.entry.context);
    assert_eq!(
        w.memory.accept(&jose.id).unwrap_err().code(),
        "SUGGESTION_ALREADY_RESOLVED"
    );

    // Rejected: gone from the review.
    w.memory.reject(&skew.id).unwrap();
    let left = w.memory.entry_suggestions(None).unwrap();
    assert_eq!(left.total_pending, 1);
    assert_eq!(left.suggestions[0].entry.title, middleware_title);

    // Learning from the same task again suggests nothing: accepted, rejected and pending
    // alike were suggested before.
    let again = learn::learn_from(&w.tasks, &w.memory, &task).unwrap();
    assert!(again.suggested.is_empty(), "{again:?}");
    assert_eq!(again.skipped.len(), 3);
    assert_eq!(w.memory.entry_suggestions(None).unwrap().total_pending, 1);
    // And the task itself is closed.
    let twice = learn::complete_task(&w.tasks, &w.memory, completion(&task)).unwrap_err();
    assert_eq!(twice.code(), "TASK_ALREADY_COMPLETED");
}

#[test]
fn the_same_decision_from_another_task_is_not_suggested_twice() {
    let w = World::new();
    background(&w.memory);
    let wf = w.workflow("Add authentication");
    // Logged twice in one task: one suggestion.
    let first = w.task_deciding(&wf, "Setup JWT middleware", &[&JOSE, &JOSE]);
    assert_eq!(first.memory_suggestions.len(), 1, "{first:?}");
    // Another task logs it again while it is pending: nothing new.
    let second = w.task_deciding(&wf, "Refresh tokens", &[&JOSE]);
    assert!(second.memory_suggestions.is_empty(), "{second:?}");
    assert!(
        second.hint.as_deref().unwrap().contains("suggested before"),
        "{second:?}"
    );
    // Accepted, then logged again by a task of another workflow: nothing new.
    w.memory
        .accept(&first.memory_suggestions[0].suggestion_id)
        .unwrap();
    let other = w.workflow("Mobile login");
    let third = w.task_deciding(&other, "Verify tokens on mobile", &[&JOSE]);
    assert!(third.memory_suggestions.is_empty(), "{third:?}");
    // Rejected, then logged again: it stays rejected.
    let fourth = w.task_deciding(&wf, "Move verification", &[&MIDDLEWARE]);
    w.memory
        .reject(&fourth.memory_suggestions[0].suggestion_id)
        .unwrap();
    let fifth = w.task_deciding(&wf, "Move verification again", &[&MIDDLEWARE]);
    assert!(fifth.memory_suggestions.is_empty(), "{fifth:?}");
    assert_eq!(w.memory.entry_suggestions(None).unwrap().total_pending, 0);
    assert_eq!(
        search(&w.memory, "jose JWT library").len(),
        1,
        "one entry for the decision"
    );
}

/// The jose decision, written by hand in other words.
fn jose_by_hand() -> NewEntry {
    entry(
        EntryType::Decision,
        "Use jose to verify JWTs",
        "Which JWT library should verify tokens? We chose jose over jsonwebtoken: a typed API, maintained, and it works in edge runtimes.",
        &["jwt", "auth"],
    )
}

/// The same question, another choice: another decision.
fn jsonwebtoken_by_hand() -> NewEntry {
    entry(
        EntryType::Decision,
        "Which JWT library should verify tokens? → jsonwebtoken",
        "Which JWT library should verify tokens?\n\nOptions considered: jsonwebtoken; jose\nChosen: jsonwebtoken\nReasoning: Most downloads and the team knows it\n",
        &["library-choice", "add-authentication", "auth"],
    )
}

fn a_decision_the_memory_holds_is_not_suggested(world: fn() -> World) {
    let w = world();
    background(&w.memory);
    let by_hand = w.memory.add(jose_by_hand()).unwrap();
    let wf = w.workflow("Add authentication");
    let done = w.task_deciding(&wf, "Setup JWT middleware", &[&JOSE, &MIDDLEWARE]);
    assert_eq!(
        titles(&done),
        [(
            "decision".to_string(),
            "Where should token verification happen? → middleware".to_string()
        )],
        "{done:#?}"
    );
    assert!(
        done.hint
            .as_deref()
            .unwrap()
            .contains("1 of its decisions and issues was already"),
        "{done:?}"
    );
    let skipped = learn::learn_from(&w.tasks, &w.memory, &done.task.task_id).unwrap();
    assert!(
        skipped
            .skipped
            .iter()
            .any(|s| s.because.contains("the memory already has it")
                && s.because.contains(&by_hand.id)),
        "{skipped:?}"
    );

    // Another choice to the same question is another decision: it is suggested.
    let w = world();
    background(&w.memory);
    w.memory.add(jsonwebtoken_by_hand()).unwrap();
    let wf = w.workflow("Add authentication");
    let done = w.task_deciding(&wf, "Setup JWT middleware", &[&JOSE]);
    assert_eq!(done.memory_suggestions.len(), 1, "{done:#?}");
}

#[test]
fn a_decision_the_memory_holds_is_not_suggested_by_words() {
    a_decision_the_memory_holds_is_not_suggested(World::new);
}

#[test]
fn a_decision_the_memory_holds_is_not_suggested_by_meaning() {
    a_decision_the_memory_holds_is_not_suggested(World::with_model);
}

/// Accepting with a model embeds the new entry, as any add does; the repository path is
/// the project.
#[test]
fn an_accepted_suggestion_is_added_like_any_entry() {
    let w = World::with_model();
    let wf = w.workflow("Add authentication");
    let done = w.task_deciding(&wf, "Setup JWT middleware", &[&MIDDLEWARE]);
    let accepted = w
        .memory
        .accept(&done.memory_suggestions[0].suggestion_id)
        .unwrap();
    let created = accepted.entry_created.unwrap();
    assert!(created.embeddings_calculated, "{created:?}");
    let shown = w.memory.show(&created.id).unwrap();
    assert!(shown.embeddings.summary && shown.embeddings.context);
    assert_eq!(shown.project.as_deref(), Some(project_of(&w.repo)));
}

fn project_of(repo: &Path) -> &str {
    repo.file_name().unwrap().to_str().unwrap()
}
