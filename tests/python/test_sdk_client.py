"""`tandem mcp` driven by the official Python MCP SDK (a real third-party client).

The SDK validates every structured result against the tool's declared outputSchema, so
these tests also check that Tandem's outputs match its schemas. `tandem mcp` goes through
the data dir's daemon, as an agent's does: each test's fixture stops the daemon it caused.
"""

import json
import os
import subprocess
import tempfile

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

TANDEM = os.environ.get("TANDEM_BIN", os.path.join(os.path.dirname(__file__), "../../target/debug/tandem"))


@pytest.fixture
def params():
    with tempfile.TemporaryDirectory(prefix="tandem-py") as root:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "TANDEM_HOME": os.path.join(root, "tandem-home"),
            "HOME": os.path.join(root, "home"),
            "XDG_DATA_HOME": os.path.join(root, "xdg/data"),
            "XDG_CONFIG_HOME": os.path.join(root, "xdg/config"),
            "XDG_STATE_HOME": os.path.join(root, "xdg/state"),
            "TANDEM_EMBEDDING_MODEL": "off",
            # A daemon the stop below missed goes by itself.
            "TANDEM_DAEMON_IDLE_SECS": "30",
        }
        try:
            yield StdioServerParameters(command=os.path.abspath(TANDEM), args=["mcp"], env=env)
        finally:
            subprocess.run([os.path.abspath(TANDEM), "daemon", "stop"], env=env, check=True,
                           capture_output=True, timeout=30)


async def session_run(params, body):
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            return await body(session, init)


@pytest.mark.anyio
async def test_tools_listed_and_instructions(params):
    async def body(session, init):
        assert init.server_info.name == "tandem"
        assert "rekall_help()" in init.instructions
        tools = (await session.list_tools()).tools
        assert [t.name for t in tools] == [
            "rekall_help", "rekall_search", "rekall_add", "rekall_show",
            "rekall_suggest_links", "rekall_suggest_generalize", "rekall_suggest_entries",
            "rekall_link",
            "rekall_accept_suggestion", "rekall_reject_suggestion",
            "start_workflow", "start_task", "log_decision", "log_issue", "log_milestone",
            "complete_task",
            "mcp_environment", "mcp_discover", "mcp_activate", "mcp_deactivate", "mcp_call",
        ]
        # mcp_call answers with what the downstream tool answers.
        assert all(t.output_schema for t in tools if t.name != "mcp_call")

    await session_run(params, body)


@pytest.mark.anyio
async def test_add_search_show_link_with_schema_validation(params):
    async def body(session, _):
        help_ = await session.call_tool("rekall_help", {"topic": "search"})
        assert not help_.is_error
        assert "Search workflow" in help_.structured_content["guide"]

        a = await session.call_tool("rekall_add", {
            "type": "bug", "title": "Fix timeout authentication API",
            "content": "The default 30s timeout is too short for the auth API.",
            "tags": ["Timeout", "auth api"], "project": "myapp", "confidence": 4,
        })
        assert not a.is_error, a
        assert a.structured_content["tags"] == ["timeout", "auth-api"]
        b = await session.call_tool("rekall_add", {
            "type": "bug", "title": "Auth API timeout under load",
            "content": "Under load the auth API timeout of 30s is too short; raise it.",
            "tags": ["timeout", "auth-api"],
        })
        assert b.structured_content["similar_entries"][0]["id"] == a.structured_content["id"]

        found = await session.call_tool("rekall_search", {"query": "auth timeout", "project": "myapp"})
        assert found.structured_content["total"] == 1
        assert found.structured_content["results"][0]["title"] == "Fix timeout authentication API"
        # The text rendering carries the same JSON for clients without structured content.
        assert json.loads(found.content[0].text) == found.structured_content

        shown = await session.call_tool("rekall_show", {"id": a.structured_content["id"][:10]})
        assert shown.structured_content["confidence"] == 4
        assert shown.structured_content["project"] == "myapp"

        linked = await session.call_tool("rekall_link", {
            "source_id": b.structured_content["id"], "target_id": a.structured_content["id"],
            "relation_type": "derived_from",
        })
        assert linked.structured_content["created"] is True

        sugg = await session.call_tool("rekall_suggest_links", {})
        assert sugg.structured_content["total_pending"] == 1
        gen = await session.call_tool("rekall_suggest_generalize", {"limit": 3})
        assert gen.structured_content["total_pending"] == 0
        rejected = await session.call_tool("rekall_reject_suggestion",
                                           {"suggestion_id": sugg.structured_content["suggestions"][0]["id"]})
        assert rejected.structured_content["rejected"] is True

    await session_run(params, body)


@pytest.mark.anyio
async def test_errors_are_tool_errors_with_spec_codes(params):
    async def body(session, _):
        cases = [
            ("rekall_show", {"id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, "ENTRY_NOT_FOUND"),
            ("rekall_add", {"type": "feature", "title": "x"}, "INVALID_ENTRY_TYPE"),
            ("rekall_accept_suggestion", {"suggestion_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, "SUGGESTION_NOT_FOUND"),
            ("rekall_search", {"query": "x", "limit": 100}, "INVALID_ARGUMENT"),
        ]
        for tool, args, code in cases:
            r = await session.call_tool(tool, args)
            assert r.is_error, (tool, args)
            err = json.loads(r.content[0].text)["error"]
            assert err["code"] == code, (tool, args, err)
            assert err["message"]

    await session_run(params, body)


@pytest.mark.anyio
async def test_entry_resource(params):
    async def body(session, _):
        a = await session.call_tool("rekall_add", {"type": "reference", "title": "BM25 explained", "content": "k1 and b."})
        templates = (await session.list_resource_templates()).resource_templates
        assert templates[0].uri_template == "tandem://memory/{id}"
        res = await session.read_resource(f"tandem://memory/{a.structured_content['id']}")
        assert res.contents[0].text.startswith("# BM25 explained")

    await session_run(params, body)


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_task_tracking_flow_in_a_git_repo(params, tmp_path):
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    env = dict(params.env, GIT_CONFIG_GLOBAL="/dev/null", GIT_AUTHOR_NAME="T", GIT_AUTHOR_EMAIL="t@e",
               GIT_COMMITTER_NAME="T", GIT_COMMITTER_EMAIL="t@e")
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, env=env, check=True, capture_output=True)
    git("init", "-q", "-b", "main")
    (repo / "auth.ts").write_text("a\n")
    git("add", "-A")
    git("commit", "-qm", "init")
    params.args = ["mcp", "--workspace", str(repo)]

    async def body(session, _):
        wf = await session.call_tool("start_workflow", {"name": "Add authentication"})
        assert not wf.is_error, wf
        task = await session.call_tool("start_task", {
            "workflow_id": wf.structured_content["workflow_id"], "name": "Setup JWT middleware",
            "goal": "Verify tokens", "areas": ["auth"],
        })
        assert task.structured_content["snapshot_type"] == "git"
        tid = task.structured_content["task_id"]
        d = await session.call_tool("log_decision", {
            "task_id": tid, "category": "library_choice", "question": "Which JWT library?",
            "options_considered": ["jsonwebtoken", "jose"], "chosen": "jsonwebtoken", "reasoning": "Mature",
        })
        assert d.structured_content["count"] == 1
        m = await session.call_tool("log_milestone", {"task_id": tid, "message": "Installing...", "progress": 50})
        assert "guidance" not in m.structured_content
        (repo / "auth.ts").write_text("a2\n")
        (repo / "utils.ts").write_text("u\n")
        done = await session.call_tool("complete_task", {
            "task_id": tid, "status": "success",
            "outcome": {"summary": "JWT middleware created", "achievements": ["verifies signatures"], "limitations": []},
            "metadata": {"packages_added": ["jsonwebtoken"], "tests_status": "passed"},
        })
        assert not done.is_error, done
        out = done.structured_content
        assert out["files_changed"]["modified"] == ["auth.ts"]
        assert out["files_changed"]["added"] == ["utils.ts"]
        assert out["verification"]["scope_match"] is False
        assert out["verification"]["unexpected_files"] == ["utils.ts"]
        bad = await session.call_tool("complete_task", {"task_id": tid, "status": "success", "outcome": {"summary": "x"}})
        assert bad.is_error
        assert json.loads(bad.content[0].text)["error"]["code"] == "TASK_ALREADY_COMPLETED"

    await session_run(params, body)


@pytest.mark.anyio
async def test_gateway_activation_is_followed_through_list_changed(params):
    """Spec 001 with a client that follows tools/list_changed: activate a real server
    (server-everything), get told, list its tools, call one, deactivate it."""
    everything = os.environ.get("TANDEM_TEST_EVERYTHING")
    if not everything:
        pytest.skip("scripts/test installs server-everything and exports TANDEM_TEST_EVERYTHING")
    home = params.env["TANDEM_HOME"]
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "config.json"), "w") as f:
        json.dump({"mcpServers": {"everything": {
            "command": everything, "args": ["stdio"], "autostart": False}}}, f)
    changed = anyio.Event()

    async def on_message(message):
        # The SDK hands over the notification itself (older ones wrapped it in `root`).
        if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
            changed.set()

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            assert "# MCP Server Environment" in init.instructions
            env = await session.call_tool("mcp_environment", {})
            assert not env.is_error, env
            assert [s["status"] for s in env.structured_content["servers"]] == ["available"]
            found = await session.call_tool("mcp_discover", {"intent": "test every protocol feature"})
            assert found.structured_content["servers"][0]["name"] == "everything"

            activated = await session.call_tool("mcp_activate", {"name": "everything"})
            assert not activated.is_error, activated
            with anyio.fail_after(10):
                await changed.wait()
            names = [t.name for t in (await session.list_tools()).tools]
            assert "everything__echo" in names
            echoed = await session.call_tool("everything__echo", {"message": "through the gateway"})
            assert not echoed.is_error
            assert "through the gateway" in echoed.content[0].text

            # The server's progress reaches the agent, under the agent's own token.
            seen = []

            async def on_progress(progress, total, message):
                seen.append((progress, total))

            done = await session.call_tool(
                "everything__trigger-long-running-operation", {"duration": 0.3, "steps": 3},
                progress_callback=on_progress)
            assert not done.is_error, done
            assert seen == [(1, 3), (2, 3), (3, 3)], seen

            changed = anyio.Event()
            gone = await session.call_tool("mcp_deactivate", {"name": "everything"})
            assert "everything__echo" in gone.structured_content["toolsRemoved"]
            with anyio.fail_after(10):
                await changed.wait()
            names = [t.name for t in (await session.list_tools()).tools]
            assert not any(n.startswith("everything__") for n in names)


SDK_ROOT = "file:///sdk/project"
SDK_SAMPLED = "The SDK's model answers"


def answering_client(asked):
    """The SDK client's three callbacks, each noting what it was asked in `asked`."""

    async def elicit(context, params):
        if isinstance(params, types.ElicitRequestURLParams):
            asked.append(("url", params.url))
            return types.ElicitResult(action="accept")
        asked.append(("form", params.message))
        return types.ElicitResult(action="accept", content={"name": "Grace Hopper", "check": True})

    async def sample(context, params):
        asked.append(("sampling", None))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=SDK_SAMPLED),
            model="sdk-model")

    async def roots(context):
        asked.append(("roots", None))
        return types.ListRootsResult(roots=[types.Root(uri=SDK_ROOT)])

    return {"elicitation_callback": elicit, "sampling_callback": sample,
            "list_roots_callback": roots}


@pytest.mark.anyio
async def test_every_conditional_tool_reaches_an_sdk_client_that_declares_it(params):
    """Issue 49 with the official Python SDK as the agent: through Tandem it sees the tools
    it sees connected to server-everything directly, and its elicitation, sampling and roots
    callbacks answer what the server asks."""
    everything = os.environ.get("TANDEM_TEST_EVERYTHING")
    if not everything:
        pytest.skip("scripts/test installs server-everything and exports TANDEM_TEST_EVERYTHING")
    asked = []
    direct = StdioServerParameters(command=everything, args=["stdio"])
    async with stdio_client(direct) as (read, write):
        async with ClientSession(read, write, **answering_client(asked)) as session:
            await session.initialize()
            direct_names = sorted(t.name for t in (await session.list_tools()).tools)
    assert "trigger-elicitation-request" in direct_names

    home = params.env["TANDEM_HOME"]
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "config.json"), "w") as f:
        json.dump({"mcpServers": {"everything": {"command": everything, "args": ["stdio"]}}}, f)
    asked.clear()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, **answering_client(asked)) as session:
            await session.initialize()
            prefix = "everything__"
            through = sorted(t.name[len(prefix):] for t in (await session.list_tools()).tools
                             if t.name.startswith(prefix))
            assert through == direct_names

            form = await session.call_tool(prefix + "trigger-elicitation-request", {})
            assert "Grace Hopper" in form.content[1].text, form
            page = "https://example.com/sdk"
            url = await session.call_tool(prefix + "trigger-url-elicitation", {"url": page})
            assert not url.is_error, url
            sampled = await session.call_tool(
                prefix + "trigger-sampling-request", {"prompt": "hello", "maxTokens": 20})
            assert SDK_SAMPLED in json.dumps([c.model_dump() for c in sampled.content]), sampled
            roots = await session.call_tool(prefix + "get-roots-list", {})
            assert SDK_ROOT in roots.content[0].text, roots
    kinds = [kind for kind, _ in asked]
    for kind in ["form", "url", "sampling", "roots"]:
        assert kind in kinds, asked
    assert ("url", page) in asked
