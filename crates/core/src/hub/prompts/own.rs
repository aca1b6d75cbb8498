//! Tandem's own conventional prompts (spec 000): a `system_prompt` telling the agent how to
//! use memory and task tracking, and the pair `tool_call:memory_index` /
//! `tool_result:memory_index` showing it what the memory holds, as a tool call that already
//! happened (the spec's Obsidian example). The MCP face serves them as prompts; the
//! injection includes them as the server `tandem`.

use serde_json::json;

use crate::memory::{Memory, MemoryError};

/// The server name Tandem's own prompts carry in the injection and its settings.
pub const SERVER: &str = "tandem";
pub const SYSTEM_PROMPT: &str = "system_prompt";
pub const MEMORY_INDEX_CALL: &str = "tool_call:memory_index";
pub const MEMORY_INDEX_RESULT: &str = "tool_result:memory_index";

/// `(name, description)` of each prompt.
pub const PROMPTS: &[(&str, &str)] = &[
    (
        SYSTEM_PROMPT,
        "How to use Tandem's memory and task tracking (conventional prompt: injected as system instructions)",
    ),
    (
        MEMORY_INDEX_CALL,
        "A simulated call to the memory index (conventional prompt, paired with tool_result:memory_index)",
    ),
    (
        MEMORY_INDEX_RESULT,
        "The memory overview: entries by type, the newest and the most read (conventional prompt)",
    ),
];

const SYSTEM: &str = "\
You work with Tandem, a memory and task tracker shared with the user's editor.

Memory (the rekall_* tools): before solving a problem, search it (rekall_search) for bugs, \
patterns, decisions, pitfalls, configs and references already recorded; read a result with \
rekall_show(id). When you fix a bug, make a decision or hit a pitfall worth remembering, add \
it (rekall_add) with a precise title, tags and the context. Cite entries you used as [ID].

Task tracking: for any multi-step change, call start_workflow, then start_task with the \
areas (paths or names) you expect to touch. Log real decisions (log_decision), problems \
(log_issue, requires_human_review when a person must look) and progress (log_milestone with \
a percentage). Finish with complete_task and an honest outcome. The user sees all of it live \
in the editor: the lines you changed, your progress, and what needs review.";

/// A prompt's text, or `None` for an unknown name.
pub fn text(name: &str, memory: &Memory) -> Result<Option<String>, MemoryError> {
    Ok(match name {
        SYSTEM_PROMPT => Some(SYSTEM.to_string()),
        MEMORY_INDEX_CALL => Some(
            "Let me check the memory index to see what is already known before I start.".into(),
        ),
        MEMORY_INDEX_RESULT => {
            let overview = memory.overview(10, 5)?;
            Some(
                json!({
                    "success": true,
                    "tool": "memory_index",
                    "data": overview,
                    "how_to_use": "search with rekall_search(query), read an entry with rekall_show(id), cite it as [ID]",
                })
                .to_string(),
            )
        }
        _ => None,
    })
}
