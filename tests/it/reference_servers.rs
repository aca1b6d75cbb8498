//! The npm reference MCP servers that `scripts/test` installs answer through the rmcp
//! client as `TESTING.md` describes: proof that the install works before the hub relies
//! on them.

use crate::util::{Downstream, everything_bin, filesystem_bin};

fn command(bin: std::path::PathBuf) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.kill_on_drop(true);
    cmd
}

#[tokio::test]
async fn server_everything_lists_prompts_and_completes() {
    let mut cmd = command(everything_bin());
    cmd.arg("stdio");
    let s = Downstream::start(cmd).await;
    let names = s.prompt_names().await;
    for wanted in ["simple-prompt", "args-prompt", "completable-prompt"] {
        assert!(names.iter().any(|n| n == wanted), "{wanted} in {names:?}");
    }
    let departments = s
        .client
        .complete_prompt_argument("completable-prompt", "department", "E", None)
        .await
        .unwrap();
    assert!(
        departments.values.iter().any(|v| v == "Engineering"),
        "{departments:?}"
    );
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn server_filesystem_lists_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(filesystem_bin());
    cmd.arg(dir.path());
    let s = Downstream::start(cmd).await;
    let tools = s.tool_names().await;
    assert!(tools.iter().any(|t| t == "read_text_file"), "{tools:?}");
    s.client.cancel().await.unwrap();
}
