"""`tandem lsp` driven by pytest-lsp (pygls), a strict third-party LSP client.

pygls parses every message the server sends into lsprotocol's types, which follow the LSP
specification to the letter, and pytest-lsp checks results and server requests against the
client capabilities declared (VS Code's here); its specification warnings are errors in this
module. An agent works through `tandem mcp` (the official Python MCP SDK) on the same daemon
while the LSP client receives diagnostics, code lenses and progress.
"""

import asyncio
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest
import pytest_lsp
from lsprotocol import types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

pytestmark = pytest.mark.filterwarnings("error::pytest_lsp.checks.LspSpecificationWarning")

TANDEM = os.path.abspath(
    os.environ.get("TANDEM_BIN", os.path.join(os.path.dirname(__file__), "../../target/debug/tandem"))
)
ROOT = pathlib.Path(tempfile.mkdtemp(prefix="tandem-lsp"))
REPO = ROOT / "repo"
ENV = {
    "PATH": os.environ.get("PATH", ""),
    "TANDEM_HOME": str(ROOT / "tandem-home"),
    "HOME": str(ROOT / "home"),
    "XDG_DATA_HOME": str(ROOT / "xdg/data"),
    "XDG_CONFIG_HOME": str(ROOT / "xdg/config"),
    "XDG_STATE_HOME": str(ROOT / "xdg/state"),
    "TANDEM_EMBEDDING_MODEL": "off",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    # A daemon the stop below missed goes by itself.
    "TANDEM_DAEMON_IDLE_SECS": "30",
}
FILES = {
    "src/auth/jwt.rs": "fn verify() {}\n\nfn sign() {}\n",
    "src/utils.rs": "pub fn helper() {}\n",
    "notes.md": "# Notes\n",
}


def git(*args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args],
        cwd=REPO, env=ENV, check=True, capture_output=True,
    )


def make_repo():
    REPO.mkdir(parents=True)
    for path, text in FILES.items():
        (REPO / path).parent.mkdir(parents=True, exist_ok=True)
        (REPO / path).write_text(text)
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "init")


make_repo()


def uri(path):
    return (REPO / path).as_uri()


@pytest.fixture(scope="module", autouse=True)
def stop_the_daemon():
    yield
    subprocess.run([TANDEM, "daemon", "stop"], env=ENV, capture_output=True, timeout=30)
    shutil.rmtree(ROOT, ignore_errors=True)


@pytest_lsp.fixture(
    scope="module",
    config=ClientServerConfig(server_command=[TANDEM, "lsp"], server_env=ENV),
)
async def client(lsp_client: LanguageClient):
    lsp_client.lens_refreshes = 0
    lsp_client.task_changes = []

    @lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def lens_refresh(_params):
        lsp_client.lens_refreshes += 1

    @lsp_client.feature("tandem/taskChanged")
    def task_changed(params):
        lsp_client.task_changes.append(params)

    result = await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            workspace_folders=[types.WorkspaceFolder(uri=REPO.as_uri(), name="repo")],
        )
    )
    assert result.server_info.name == "tandem"
    yield
    await lsp_client.shutdown_session()


def agent():
    return stdio_client(StdioServerParameters(command=TANDEM, args=["mcp"], env=ENV, cwd=str(REPO)))


async def tool(session, name, arguments):
    result = await session.call_tool(name, arguments)
    assert not result.is_error, result
    return result.structured_content


async def until(what, check, timeout=10):
    """Polls `check()` (a function, or a coroutine function) until it gives something true;
    fails after `timeout` seconds."""
    async def poll():
        while True:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
            await asyncio.sleep(0.02)
    try:
        return await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


def open_doc(client, path, language):
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri(path), language_id=language, version=1, text=(REPO / path).read_text()
            )
        )
    )


@pytest.mark.asyncio(loop_scope="module")
async def test_a_task_reaches_the_editor_as_typed_lsp_messages(client: LanguageClient):
    open_doc(client, "src/auth/jwt.rs", "rust")
    open_doc(client, "src/utils.rs", "rust")
    async with agent() as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        wf = await tool(mcp, "start_workflow", {"name": "Auth", "description": "JWT auth"})
        task = await tool(mcp, "start_task", {
            "workflow_id": wf["workflow_id"], "name": "Setup JWT middleware",
            "goal": "verify tokens", "areas": ["src/auth"],
        })
        task_id = task["task_id"]
        (REPO / "src/auth/jwt.rs").write_text("fn verify() {}\nfn parse() {}\n\nfn sign() {}\n")
        (REPO / "src/utils.rs").write_text("pub fn helper() {}\npub fn extra() {}\n")
        await tool(mcp, "log_milestone", {"task_id": task_id, "message": "Running tests", "progress": 75})

        # Diagnostics: the in-scope hunk as information, the out-of-scope one as a warning.
        # The files were written in place (truncated, then written): a diff may see one
        # half-written first, so the diagnostics are awaited at the line the write added.
        def settled(path):
            found = client.diagnostics.get(uri(path)) or []
            return found if any(d.range.start.line == 1 for d in found) else None

        jwt = await until("jwt.rs diagnostics", lambda: settled("src/auth/jwt.rs"))
        assert [(d.range.start.line, d.severity, d.code, d.source) for d in jwt] == [
            (1, types.DiagnosticSeverity.Information, "task-change", "tandem"),
        ]
        assert "Setup JWT middleware" in jwt[0].message
        utils = await until("utils.rs diagnostics", lambda: settled("src/utils.rs"))
        assert [(d.range.start.line, d.severity, d.code) for d in utils] == [
            (1, types.DiagnosticSeverity.Warning, "outside-scope"),
        ]
        assert utils[0].message.startswith("Outside declared scope (src/auth)")

        # Progress: a token created by the server, begin then the milestone's report.
        token = f"tandem-task-{task_id}"
        reports = await until(
            "the milestone's report",
            lambda: [r for r in client.progress_reports.get(token, []) if r.kind == "report"],
        )
        assert reports[-1].percentage == 75 and reports[-1].message == "Running tests"
        assert client.progress_reports[token][0].kind == "begin"
        # The same events as `tandem/taskChanged`, in order, the milestone with its figures.
        changes = await until(
            "the milestone's tandem/taskChanged",
            lambda: [c for c in client.task_changes if c.change == "milestone"],
        )
        assert [c.change for c in client.task_changes][:2] == ["started", "milestone"]
        assert all(c.task_id == task_id for c in client.task_changes)
        assert (changes[-1].progress, changes[-1].message) == (75, "Running tests")

        # Code lenses: the task on line 1 (asked again after the server's refresh request, as
        # clients do), the hunk's own lenses, with commands.
        async def jwt_lenses():
            lenses = await client.text_document_code_lens_async(
                types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri("src/auth/jwt.rs")))
            )
            if any("75%" in lens.command.title for lens in lenses):
                return lenses
        lenses = await until("the lens with the milestone", jwt_lenses)
        assert client.lens_refreshes > 0
        titles = sorted((lens.range.start.line, lens.command.title) for lens in lenses)
        assert titles[0] == (0, "Task: Setup JWT middleware · in progress · 75% · Running tests"), titles
        assert (1, "Decisions (0)") in titles
        assert all(lens.command.command.startswith("tandem.task") for lens in lenses)

        # Completion: the agent's outcome ends the progress and clears the change hints.
        done = await tool(mcp, "complete_task", {"task_id": task_id, "status": "success", "outcome": {"summary": "tokens verified"}})
        assert done["files_changed"]["modified"] == ["src/auth/jwt.rs", "src/utils.rs"]
        await until(
            "the end of the progress",
            lambda: any(r.kind == "end" for r in client.progress_reports[token]),
        )
        await until(
            "the completion's tandem/taskChanged",
            lambda: client.task_changes[-1].change == "completed",
        )
        for path in ["src/auth/jwt.rs", "src/utils.rs"]:
            await until(f"{path} cleared", lambda: len(client.diagnostics[uri(path)]) == 0)

        tasks = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="tandem.tasks.list", arguments=[])
        )
        assert tasks[0]["tasks"][0]["task_id"] == task_id

        # Memory: workspace symbols, hover on a citation, the code action on a selection.
        entry = await tool(mcp, "rekall_add", {
            "type": "pitfall", "title": "Tokens expire at midnight UTC", "content": "Check the clock skew.",
        })
    short = entry["id"][:8]
    symbols = await client.workspace_symbol_async(types.WorkspaceSymbolParams(query="midnight tokens"))
    assert [s.name for s in symbols] == ["Tokens expire at midnight UTC"]
    assert symbols[0].location.uri == f"tandem://memory/{entry['id']}"

    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(
            uri=uri("notes.md"), language_id="markdown", version=2, text=f"See [{short}] first.\n",
        )
    ))
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri("notes.md")),
        position=types.Position(line=0, character=6),
    ))
    assert "Tokens expire at midnight UTC" in hover.contents.value
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri("notes.md")),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=3)),
        context=types.CodeActionContext(diagnostics=[]),
    ))
    assert [a.title for a in actions] == ["Save selection to memory"]
    # The actions have no kind: a request for quick fixes only (VS Code's on a diagnostic)
    # gets none, not actions the client would drop.
    quickfixes = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri("notes.md")),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=3)),
        context=types.CodeActionContext(diagnostics=[], only=[types.CodeActionKind.QuickFix]),
    ))
    assert not quickfixes


@pytest.mark.asyncio(loop_scope="module")
async def test_bad_requests_get_typed_errors_and_the_session_goes_on(client: LanguageClient):
    for command, arguments, code in [
        ("tandem.task.show", ["01NOSUCHTASK"], "TASK_NOT_FOUND"),
        ("tandem.memory.show", [42], "INVALID_ARGUMENT"),
        ("tandem.memory.search", [{"query": "x", "limit": "many"}], "INVALID_ARGUMENT"),
        ("tandem.prompt.run", ["/nowhere:prompt"], "SERVER_NOT_FOUND"),
        ("tandem.inject", [{"conversation": [3]}], "INVALID_ARGUMENT"),
    ]:
        with pytest.raises(JsonRpcException) as raised:
            await client.workspace_execute_command_async(
                types.ExecuteCommandParams(command=command, arguments=arguments)
            )
        assert raised.value.data["error"]["code"] == code, (command, raised.value.data)
    with pytest.raises(JsonRpcException):
        await client.workspace_execute_command_async(types.ExecuteCommandParams(command="tandem.nope"))
    with pytest.raises(JsonRpcException) as raised:
        await client.protocol.send_request_async("tandem/document", {"uri": "tandem://memory/01NOSUCHENTRY0000000000000"})
    assert raised.value.data["error"]["code"] == "ENTRY_NOT_FOUND"
    # A hover past the end of a document, and on a document never opened: nothing, no error.
    assert await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri("notes.md")),
        position=types.Position(line=99, character=0),
    )) is None
    assert await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri("never-opened.md")),
        position=types.Position(line=0, character=0),
    )) is None
    status = await client.protocol.send_request_async("tandem/status", {})
    assert status.daemon is True
