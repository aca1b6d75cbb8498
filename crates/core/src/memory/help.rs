//! `rekall_help`: the agent's guide, by topic (spec 003: "call it first, once a session").

use super::api::HelpOutcome;
use super::error::MemoryError;

/// The topics, in the order `all` prints them.
pub const TOPICS: &[&str] = &["search", "capture", "links", "citations", "all"];

const HEADER: &str = "# Tandem memory: agent guide\n\
A shared knowledge base of bugs, patterns, decisions, pitfalls, configs and references.\n\
Search it before you solve; capture what you learn after.\n";

const SEARCH: &str = "## Search workflow
1. `rekall_search(query, context?)` gives compact results: id, type, title, score (0-1), a ~100-char snippet, tags.
   Pass `context` (a few lines of the conversation) to sharpen the ranking; filter with `type` or `project`; `limit` 1-20 (default 5).
2. If a result looks relevant: `rekall_show(id)` for the full content, context and links. IDs may be shortened to 5+ characters.
3. Cite what you used (see Citations).

## Proactive triggers
- Fixing a bug: search for past fixes of the same error or component first.
- Building a feature: search for existing patterns and decisions.
- An error message is mentioned: search for it (quote its distinctive words).
- Choosing between options: search for earlier decisions and pitfalls.
";

const CAPTURE: &str = "## Capture workflow
After solving a bug or problem, or making a decision worth keeping:
- `rekall_add(type, title, content, tags?, context?, project?, confidence?, memory_type?)`
  - type: bug | pattern | decision | pitfall | config | reference
  - title: at most 100 characters, specific (\"Fix CORS preflight on Safari iOS\").
  - content: the problem, the cause, the fix or decision, and why.
  - tags: 2-5, kebab-case (they are normalised: \"Safari iOS\" becomes safari-ios).
  - context: the relevant part of the conversation (over 10,000 characters, only the first 8,000 are kept).
  - confidence: 0-5 (default 3); memory_type: episodic (one occurrence, default) or semantic (a general rule).
- The answer lists `similar_entries` and how many link suggestions were created: review them (see Links).
";

const LINKS: &str = "## Links and suggestions
- `rekall_link(source_id, target_id, relation_type)`: relation_type is related (default), supersedes, derived_from or contradicts.
  Linking an entry to itself is refused (SELF_LINK_ERROR), and so is a duplicate (LINK_ALREADY_EXISTS).
  A `supersedes` link marks its target superseded.
- Every add looks for similar entries and may create suggestions:
  - `rekall_suggest_links(limit?)`: pairs that look related.
  - `rekall_suggest_generalize(limit?)`: 3+ similar entries of one type that could become one semantic entry.
  - An entry keeps at most 5 pending link suggestions and 3 generalisations, the strongest; a weaker one gives way.
- When you complete a task (`complete_task`), its decisions and issues become entry suggestions, listed in its `memory_suggestions`:
  review them with `rekall_suggest_entries(limit?)` (the proposed entry, with the task, workflow and files in its context) and accept or reject each.
  What the memory already says is not suggested again.
- `rekall_accept_suggestion(suggestion_id)` creates the link, returns the `generalize_command` to run, or adds the suggested entry (`entry_created`).
- `rekall_reject_suggestion(suggestion_id)`: the suggestion never comes back.
";

const CITATIONS: &str = "## Citations
Cite entries inline by ID (a 7+ character prefix is enough) and title:
\"According to [01HX123] Fix CORS Safari header, the preflight fails because...\"
Anyone can then open the entry with `rekall_show(id)` or `tandem memory show ID`.
";

/// The guide for one topic (`all` when `None`).
pub fn guide(topic: Option<&str>) -> Result<HelpOutcome, MemoryError> {
    let topic = topic
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or("all");
    let sections: Vec<&str> = match topic.to_ascii_lowercase().as_str() {
        "search" => vec![SEARCH],
        "capture" => vec![CAPTURE],
        "links" => vec![LINKS],
        "citations" => vec![CITATIONS],
        "all" => vec![SEARCH, CAPTURE, LINKS, CITATIONS],
        _ => {
            return Err(MemoryError::invalid_argument(
                "topic",
                format!(
                    "unknown topic '{topic}'; expected one of: {}",
                    TOPICS.join(", ")
                ),
            ));
        }
    };
    let mut guide = String::from(HEADER);
    for s in sections {
        guide.push('\n');
        guide.push_str(s);
    }
    Ok(HelpOutcome {
        guide,
        topics_available: TOPICS.iter().map(|t| t.to_string()).collect(),
    })
}
