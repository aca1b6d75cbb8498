// End to end in real VS Code: code-server (VS Code in the browser, extensions on a Node host)
// driven by playwright-core and Debian's chromium. The packaged .vsix is installed into a
// fresh code-server (its own user data and extensions dirs) that opens a temporary git
// repository; an agent (the official MCP TypeScript SDK over `tandem mcp`) starts a task and
// edits files; everything is asserted through the UI: the Problems panel, the code lens, the
// Tandem view, the status bar, memory search, the prompt command with server-everything's
// prompts downstream, and signing in to a remote server (the SDK's OAuth example, whose demo
// authorization server approves at once, in a tab of the test's chromium). Screenshots and code-server's logs go to test-artifacts/. Prints the
// activation time and the milestone → status bar latency.
//
// Environment: CODE_SERVER (the binary), CHROMIUM (default /usr/bin/chromium), TANDEM_BIN,
// TANDEM_TEST_EVERYTHING (mcp-server-everything), MCP_SDK (the SDK's package folder), VSIX.

import { execFileSync, spawn } from "node:child_process";
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { chromium } from "playwright-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const ext = path.resolve(here, "../..");
const need = (name) => {
    const v = process.env[name];
    if (!v) throw new Error(`${name} is not set (see the header of test/e2e/run.mjs)`);
    return path.resolve(v);
};
const CODE_SERVER = need("CODE_SERVER");
const TANDEM = need("TANDEM_BIN");
const EVERYTHING = need("TANDEM_TEST_EVERYTHING");
const SDK = need("MCP_SDK");
const VSIX = need("VSIX");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const ARTIFACTS = path.join(ext, "test-artifacts");
const WAIT = 30_000;

const { Client } = await import(pathToFileURL(path.join(SDK, "dist/esm/client/index.js")).href);
const { StdioClientTransport } = await import(pathToFileURL(path.join(SDK, "dist/esm/client/stdio.js")).href);

const root = mkdtempSync(path.join(os.tmpdir(), "tandem-vscode-e2e-"));
const dirs = {
    home: path.join(root, "home"),
    tandemHome: path.join(root, "tandem-home"),
    userData: path.join(root, "user-data"),
    extensions: path.join(root, "extensions"),
    repo: path.join(root, "repo"),
};
for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true });
// No `tandem` on PATH (a developer's ~/.cargo/bin may have one): the extension must find the
// binary it carries.
const hasTandem = (dir) => {
    try {
        return statSync(path.join(dir, "tandem")).isFile();
    } catch {
        return false;
    }
};
const env = {
    PATH: (process.env.PATH ?? "").split(path.delimiter).filter((d) => d && !hasTandem(d)).join(path.delimiter),
    HOME: dirs.home,
    TANDEM_HOME: dirs.tandemHome,
    XDG_DATA_HOME: path.join(root, "xdg/data"),
    XDG_CONFIG_HOME: path.join(root, "xdg/config"),
    XDG_STATE_HOME: path.join(root, "xdg/state"),
    XDG_CACHE_HOME: path.join(root, "xdg/cache"),
    TANDEM_EMBEDDING_MODEL: "off",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_CONFIG_NOSYSTEM: "1",
    // A daemon the stop below missed goes by itself.
    TANDEM_DAEMON_IDLE_SECS: "60",
    // code-server's extension host takes this environment instead of a login shell's.
    VSCODE_CLI: "1",
};

const started = []; // processes to stop: {name, child}
let browser;
let agent;
const figures = {};

function log(msg) {
    console.log(`[e2e ${new Date().toISOString().slice(11, 23)}] ${msg}`);
}

function git(...args) {
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@e", ...args], { cwd: dirs.repo, env, stdio: "pipe" });
}

function makeRepo() {
    const files = {
        "src/auth/jwt.ts": "export function verify() {}\n\nexport function sign() {}\n",
        "src/utils.ts": "export function helper() {}\n",
        "notes.md": "# Notes\n",
        // Cites the memory entry the agent adds (written then); here from the start, so that
        // Quick Open knows it.
        "cite.md": "No citation yet.\n",
        ".mcp.json": JSON.stringify({ mcpServers: { everything: { command: EVERYTHING, args: ["stdio"] } } }, null, 2) + "\n",
        // For the JSON schemas the extension contributes (Tandem reads neither file).
        "sub/.mcp.json": JSON.stringify({ mcpServers: { slow: { command: "x", timeoutMs: "slow" } } }, null, 2) + "\n",
        "tandem/config.json": JSON.stringify({ conventionalPrompts: { servers: { x: { bogus: true } } } }, null, 2) + "\n",
    };
    for (const [p, text] of Object.entries(files)) {
        mkdirSync(path.dirname(path.join(dirs.repo, p)), { recursive: true });
        writeFileSync(path.join(dirs.repo, p), text);
    }
    git("init", "-q");
    git("add", ".");
    git("commit", "-qm", "init");
}

function freePort() {
    return new Promise((resolve, reject) => {
        const s = createServer();
        s.once("error", reject);
        s.listen(0, "127.0.0.1", () => {
            const { port } = s.address();
            s.close(() => resolve(port));
        });
    });
}

/// Writes the settings: the test's own, then `own` (code-server's window is a remote one:
/// settings of machine scope, such as tandem.path, are read from the server's Machine
/// settings, the rest from the User settings). VS Code follows the files as they change.
function writeSettings(own) {
    const settings = {
        "workbench.startupEditor": "none",
        "security.workspace.trust.enabled": false,
        "chat.disableAIFeatures": true,
        "workbench.tips.enabled": false,
        "extensions.ignoreRecommendations": true,
        "extensions.autoCheckUpdates": false,
        "extensions.autoUpdate": false,
        "telemetry.telemetryLevel": "off",
        "update.mode": "none",
        "window.restoreWindows": "none",
        "editor.codeLens": true,
        ...own,
    };
    for (const scope of ["User", "Machine"]) {
        mkdirSync(path.join(dirs.userData, scope), { recursive: true });
        writeFileSync(path.join(dirs.userData, scope, "settings.json"), JSON.stringify(settings, null, 2));
    }
}

/// The SDK's OAuth example server (with its demo authorization server), listed by URL in the
/// user's config.json as `notes`.
async function startOAuthServer() {
    const [mcp, auth] = [await freePort(), await freePort()];
    const child = spawn("node", [path.join(SDK, "dist/esm/examples/server/simpleStreamableHttp.js"), "--oauth"], {
        env: { ...env, MCP_PORT: String(mcp), MCP_AUTH_PORT: String(auth) },
        stdio: "ignore",
        detached: true,
    });
    started.push({ name: "oauth server", child });
    for (const port of [mcp, auth]) {
        const deadline = Date.now() + WAIT;
        for (;;) {
            try {
                await fetch(`http://localhost:${port}/`);
                break;
            } catch {
                if (Date.now() > deadline) throw new Error(`the OAuth example server did not listen on ${port}`);
                await sleep(100);
            }
        }
    }
    writeFileSync(path.join(dirs.tandemHome, "config.json"), JSON.stringify({ mcpServers: { notes: { type: "http", url: `http://localhost:${mcp}/mcp` } } }));
}

async function startCodeServer() {
    // No tandem.path and no tandem on PATH: the extension runs the binary its .vsix carries.
    writeSettings({});
    const config = path.join(root, "code-server.yaml");
    writeFileSync(config, "auth: none\ncert: false\n");
    const common = ["--config", config, "--user-data-dir", dirs.userData, "--extensions-dir", dirs.extensions];
    execFileSync(CODE_SERVER, [...common, "--install-extension", VSIX], { env, stdio: "pipe", timeout: 120_000 });
    const port = await freePort();
    const child = spawn(
        CODE_SERVER,
        [...common, "--bind-addr", `127.0.0.1:${port}`, "--auth", "none", "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", dirs.repo],
        { env, stdio: ["ignore", "pipe", "pipe"], detached: true },
    );
    started.push({ name: "code-server", child });
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
        if (child.exitCode !== null) throw new Error(`code-server exited (${child.exitCode}):\n${output}`);
        try {
            const r = await fetch(`http://127.0.0.1:${port}/healthz`);
            if (r.ok) return port;
        } catch {
            // not listening yet
        }
        await sleep(100);
    }
    throw new Error(`code-server did not answer on port ${port} within 60 s:\n${output}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function shot(page, name) {
    await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`) });
}

/// Runs a palette command by its title; asks again while the command is not there yet (a
/// setting that brings it in takes a moment).
async function palette(page, title) {
    const deadline = Date.now() + WAIT;
    for (;;) {
        await page.keyboard.press("F1");
        const input = page.locator(".quick-input-widget input.input");
        await input.waitFor({ state: "visible", timeout: WAIT });
        await input.fill(`>${title}`);
        try {
            // Enter once the list is filtered: the focused row is the command.
            await page.locator(".quick-input-list .monaco-list-row.focused", { hasText: title }).first().waitFor({ timeout: 5000 });
            break;
        } catch (e) {
            if (Date.now() > deadline) throw e;
            await page.keyboard.press("Escape");
        }
    }
    await page.keyboard.press("Enter");
}

/// Hovers `target` until a hover showing `text` opens. A hover is asked for when the mouse
/// moves onto a word, so one that went out before the server had the document, or a mouse
/// already resting there, is asked again by moving away and back.
async function hoverUntil(page, target, text) {
    const deadline = Date.now() + WAIT;
    for (let attempt = 1; ; attempt++) {
        await page.mouse.move(0, 0);
        await target.hover();
        try {
            await page.locator(".monaco-hover", { hasText: text }).first().waitFor({ timeout: 5000 });
            if (attempt > 1) log(`the hover showed "${text}" on attempt ${attempt}`);
            return;
        } catch (e) {
            if (Date.now() > deadline) {
                const shown = await page.locator(".monaco-hover").allInnerTexts().catch(() => []);
                throw new Error(`no hover showed "${text}" in ${attempt} attempts; hovers shown: ${JSON.stringify(shown)}`);
            }
        }
    }
}

/// Types into the open quick input (replacing what is there).
async function quickType(page, text) {
    const input = page.locator(".quick-input-widget input.input");
    await input.waitFor({ state: "visible", timeout: WAIT });
    await input.fill(text);
}

async function quickRow(page, text) {
    const row = page.locator(".quick-input-list .monaco-list-row", { hasText: text }).first();
    await row.waitFor({ timeout: WAIT });
    return row;
}

/// Types `text` into the open quick input and waits for the row `row` (default: the text).
async function typeAndSee(page, text, row = text) {
    await quickType(page, text);
    return quickRow(page, row);
}

/// Runs Tandem: Run Prompt and picks server-everything's prompt `name`.
async function startPrompt(page, name) {
    await palette(page, "Tandem: Run Prompt");
    await typeAndSee(page, name, `/everything:${name}`);
    await page.keyboard.press("Enter");
}

async function quickTitle(page, text) {
    await page.locator(".quick-input-title", { hasText: text }).waitFor({ timeout: WAIT });
}

/// The text of the active editor's visible lines.
async function editorText(page) {
    return page.locator(".editor-group-container.active .monaco-editor .view-lines").first().innerText();
}

async function waitEditorText(page, text) {
    const deadline = Date.now() + WAIT;
    let last = "";
    while (Date.now() < deadline) {
        last = await editorText(page).catch(() => "");
        if (last.replace(/\u00a0/g, " ").includes(text)) return last;
        await sleep(100);
    }
    throw new Error(`the active editor never showed "${text}"; it shows:\n${last}`);
}

/// The extension's log so far (its output channel, as code-server writes it).
function tandemLog() {
    const logs = path.join(dirs.userData, "logs");
    const found = readdirSync(logs, { recursive: true }).filter((f) => String(f).endsWith(path.join("tandem.tandem", "Tandem.log")));
    return found.map((f) => readFileSync(path.join(logs, String(f)), "utf8")).join("\n");
}

async function tool(name, args) {
    const r = await agent.callTool({ name, arguments: args });
    if (r.isError) throw new Error(`${name} failed: ${JSON.stringify(r.content)}`);
    return r.structuredContent ?? JSON.parse(r.content[0].text);
}

const STATUS = '[id="tandem.tandem.status"]';

async function statusText(page) {
    return (await page.locator(STATUS).innerText().catch(() => "")).replace(/\u00a0/g, " ");
}

async function waitStatus(page, text, timeout = WAIT) {
    await page.waitForFunction(
        ([sel, want]) => (document.querySelector(sel)?.textContent ?? "").replace(/\u00a0/g, " ").includes(want),
        [STATUS, text],
        { timeout, polling: "raf" },
    );
}

async function main() {
    rmSync(ARTIFACTS, { recursive: true, force: true });
    mkdirSync(ARTIFACTS, { recursive: true });
    makeRepo();
    await startOAuthServer();
    log("starting code-server");
    const port = await startCodeServer();
    browser = await chromium.launch({
        executablePath: CHROMIUM,
        headless: true,
        args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
    });
    const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
    const opened = Date.now();
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(dirs.repo)}`);

    // Activation: from opening the window to the client running (the status bar says ready);
    // the workbench's own start (its status bar shown) is timed apart.
    await page.locator('[id="workbench.parts.statusbar"]').waitFor({ timeout: 60_000 });
    figures.workbench = Date.now() - opened;
    await page.locator(`${STATUS}[aria-label="Tandem: ready"], ${STATUS} [aria-label="Tandem: ready"]`).first().waitFor({ timeout: 60_000 });
    figures.activation = Date.now() - opened;
    log(`activation (window open → client running): ${figures.activation} ms (workbench shown: ${figures.workbench} ms)`);
    await shot(page, "01-ready");
    const using = /using (\S+) \(tandem /.exec(tandemLog())?.[1];
    if (!using?.startsWith(dirs.extensions) || !using.endsWith(path.join("server", "tandem"))) {
        throw new Error(`the extension runs ${using}, not the binary its package carries`);
    }
    log(`the extension runs the binary it carries: ${path.relative(dirs.extensions, using)}`);

    // The server asks to trust the workspace's .mcp.json (window/showMessageRequest).
    const trust = page.locator(".notification-toast .monaco-button", { hasText: /^Trust$/ }).first();
    await trust.waitFor({ timeout: WAIT });
    await shot(page, "02-trust-question");
    await trust.click();
    log("trusted .mcp.json from the server's question");

    // The agent starts a task and edits files, in scope and out of it.
    agent = new Client({ name: "e2e-agent", version: "1.0.0" });
    await agent.connect(new StdioClientTransport({ command: TANDEM, args: ["mcp"], env, cwd: dirs.repo, stderr: "pipe" }));
    const wf = await tool("start_workflow", { name: "Auth", description: "JWT auth" });
    const task = await tool("start_task", { workflow_id: wf.workflow_id, name: "Setup JWT middleware", goal: "verify tokens", areas: ["src/auth"] });
    writeFileSync(path.join(dirs.repo, "src/auth/jwt.ts"), "export function verify() {}\nexport function parse() {}\n\nexport function sign() {}\n");
    writeFileSync(path.join(dirs.repo, "src/utils.ts"), "export function helper() {}\nexport function extra() {}\n");
    await tool("log_milestone", { task_id: task.task_id, message: "Running tests", progress: 75 });
    log(`agent started task ${task.task_id} and edited two files`);

    // The status bar: the running task, its progress and milestone.
    await waitStatus(page, "Setup JWT middleware · 75% · Running tests");
    await shot(page, "03-status-bar");

    // The file the task changed: its code lens.
    await page.locator(".monaco-workbench").click({ position: { x: 800, y: 500 } });
    await page.keyboard.press("Control+P");
    await typeAndSee(page, "jwt.ts");
    await page.keyboard.press("Enter");
    await page.locator(".monaco-editor .codelens-decoration", { hasText: "Task: Setup JWT middleware" }).first().waitFor({ timeout: WAIT });
    const lenses = await page.locator(".monaco-editor .codelens-decoration").allInnerTexts();
    log(`code lenses: ${JSON.stringify(lenses)}`);
    if (!lenses.some((l) => l.includes("75%") && l.includes("Running tests"))) throw new Error(`no lens with the milestone: ${lenses}`);
    await shot(page, "04-code-lens");

    // The Problems panel: the in-scope change and the out-of-scope warning.
    await page.keyboard.press("Control+Shift+M");
    const markers = page.locator(".markers-panel");
    await markers.locator(".monaco-list-row", { hasText: "Changed by task" }).first().waitFor({ timeout: WAIT });
    await markers.locator(".monaco-list-row", { hasText: "Outside declared scope (src/auth)" }).first().waitFor({ timeout: WAIT });
    await shot(page, "05-problems");

    // The Tandem view: the workflow and its task with state and progress.
    await page.locator('.activitybar .action-item a[aria-label^="Tandem"], .activitybar .action-item[aria-label^="Tandem"]').first().click();
    const sidebar = page.locator('[id="workbench.parts.sidebar"]');
    const row = sidebar.locator(".monaco-list-row", { hasText: "Setup JWT middleware" }).first();
    await row.waitFor({ timeout: WAIT });
    const rowText = (await row.innerText()).replace(/\s+/g, " ");
    if (!rowText.includes("in progress · 75%")) throw new Error(`the view's task row says "${rowText}"`);
    await sidebar.locator(".monaco-list-row", { hasText: "Auth" }).first().waitFor({ timeout: WAIT });
    await shot(page, "06-tandem-view");
    // A task opens as its tandem:// document.
    await row.click();
    await waitEditorText(page, "verify tokens");
    await shot(page, "07-task-document");

    // Milestone → status bar: from the agent's call to the DOM change of the status bar
    // item, stamped in the page by a MutationObserver (the same clock as this process). The
    // agent's call alone, and the time to vscode-languageclient's own progress item (fed by
    // `$/progress` on the same path), are measured beside it: what VS Code itself costs.
    await page.evaluate(([ours, progress]) => {
        window.__seen = {};
        const note = () => {
            for (const [key, sel] of [["ours", ours], ["progress", progress]]) {
                const m = /Step (\d) of 5/.exec(document.querySelector(sel)?.textContent ?? "");
                if (m) window.__seen[`${key}${m[1]}`] ??= Date.now();
            }
        };
        new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
    }, [STATUS, '[id="status.progress"]']);
    const rows = { status: [], progress: [], call: [] };
    for (let i = 1; i <= 5; i++) {
        const message = `Step ${i} of 5`;
        const t0 = Date.now();
        await tool("log_milestone", { task_id: task.task_id, message, progress: 79 + i });
        rows.call.push(Date.now() - t0);
        await waitStatus(page, `${79 + i}% · ${message}`, 10_000);
        const seen = await page.waitForFunction((n) => window.__seen[`progress${n}`] && window.__seen, i, { timeout: 10_000 }).then((h) => h.jsonValue());
        rows.status.push(seen[`ours${i}`] - t0);
        rows.progress.push(seen[`progress${i}`] - t0);
    }
    const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    figures.milestone = rows;
    figures.median = Object.fromEntries(Object.entries(rows).map(([k, v]) => [k, median(v)]));
    log(`milestone → our status bar item: ${rows.status.join(", ")} ms; → languageclient's progress item: ${rows.progress.join(", ")} ms; the agent's call: ${rows.call.join(", ")} ms`);
    // The view follows too.
    await sidebar.locator(".monaco-list-row", { hasText: "84%" }).first().waitFor({ timeout: WAIT });

    // Memory search: a QuickPick that searches as you type, an entry opens as a document.
    const entry = await tool("rekall_add", { type: "pitfall", title: "Tokens expire at midnight UTC", content: "Check the clock skew before comparing exp." });
    await palette(page, "Tandem: Search Memory");
    await typeAndSee(page, "midnight tokens", "Tokens expire at midnight UTC");
    await shot(page, "08-memory-search");
    await page.keyboard.press("Enter");
    await waitEditorText(page, "Check the clock skew");
    log(`memory search found and opened entry ${entry.id}`);
    await shot(page, "09-memory-entry");

    // Workspace symbols (Ctrl+T) search memory too; hover on a citation shows the entry.
    await page.keyboard.press("Control+T");
    await typeAndSee(page, "#midnight", "Tokens expire at midnight UTC");
    await page.keyboard.press("Enter");
    await waitEditorText(page, "Check the clock skew");
    writeFileSync(path.join(dirs.repo, "cite.md"), `See [${entry.id.slice(0, 8)}] first.\n`);
    await page.keyboard.press("Control+P");
    await typeAndSee(page, "cite.md");
    await page.keyboard.press("Enter");
    await waitEditorText(page, "See [");
    await hoverUntil(page, page.locator(".editor-group-container.active .view-line span", { hasText: entry.id.slice(0, 8) }).first(), "Tokens expire at midnight UTC");
    await shot(page, "09-citation-hover");
    await page.keyboard.press("Escape");
    log("workspace symbols and the hover on a citation show the entry");

    // The prompt command: /everything:args-prompt, one input per argument.
    await startPrompt(page, "args-prompt");
    await quickTitle(page, "city (required)");
    await typeAndSee(page, "Paris");
    await shot(page, "10-prompt-argument");
    await page.keyboard.press("Enter");
    await quickTitle(page, "state (optional)");
    await quickRow(page, "(leave empty)");
    await page.keyboard.press("Enter");
    await waitEditorText(page, "Paris");
    await shot(page, "11-prompt-messages");
    log("ran /everything:args-prompt city=Paris");

    // Values complete through the server's completion/complete: department "E" → Engineering.
    await startPrompt(page, "completable-prompt");
    await quickTitle(page, "department");
    // The list for "E" is the one with the typed value and the server's answer for it (the
    // list for the empty value, all four departments, may show first).
    await typeAndSee(page, "E", "as typed");
    const engineering = await quickRow(page, "Engineering");
    const offered = (await page.locator(".quick-input-list .monaco-list-row").allInnerTexts()).map((t) => t.split("\n")[0]);
    if (offered.some((t) => t.startsWith("Marketing") || t.startsWith("Sales"))) throw new Error(`completion of "E" offered ${offered}`);
    await shot(page, "12-prompt-completion");
    await engineering.click();
    await quickTitle(page, "name");
    await typeAndSee(page, "Alice");
    await page.keyboard.press("Enter");
    await waitEditorText(page, "Engineering");
    log("completable-prompt: department completed to Engineering by the server");

    // The injection preview, a tandem:// document of its own.
    await palette(page, "Tandem: Preview Prompt Injection");
    await waitEditorText(page, "Injected context");

    // The servers: server-everything, running since the trust.
    await palette(page, "Tandem: Servers");
    const everything = (await (await quickRow(page, "everything")).innerText()).replace(/\s+/g, " ");
    await shot(page, "13-servers");
    await page.keyboard.press("Escape");
    if (!everything.includes("ready")) throw new Error(`server-everything is not ready: "${everything}"`);
    log(`servers: ${everything}`);

    // A server's question that no agent can take (this agent's client has no elicitation):
    // a form in VS Code. "Answer", then one step per field: the required name typed, Enter
    // for the others (their defaults, the first choice, the preselected picks).
    // server-everything is a boot server: active in the agent's session already.
    let answered;
    const call = agent
        .callTool({ name: "mcp_call", arguments: { server: "everything", tool: "trigger-elicitation-request", arguments: {} } })
        .then((r) => (answered = r));
    await quickTitle(page, "Server 'everything' asks: Please provide inputs");
    await shot(page, "13a-question");
    await (await quickRow(page, "Answer")).click();
    const titles = [];
    for (let step = 0; step < 40 && !answered; step++) {
        const title = page.locator(".quick-input-widget .quick-input-title");
        try {
            await title.waitFor({ state: "visible", timeout: 5000 });
        } catch {
            continue;
        }
        const text = (await title.innerText().catch(() => "")).trim();
        if (!text || text.includes("asks:") || text === titles.at(-1)) {
            await sleep(100);
            continue;
        }
        titles.push(text);
        if (text.startsWith("String *")) await quickType(page, "Ann");
        await page.keyboard.press("Enter");
    }
    await call;
    const form = JSON.stringify(answered.content);
    if (!form.includes("User provided the requested information") || !form.includes("Name: Ann")) {
        throw new Error(`the server did not get the form: ${form}`);
    }
    log(`answered server-everything's question in ${titles.length} steps of the form: ${titles.join(" | ")}`);

    // A remote server that asks for a sign-in: the list says so and picking it offers "Sign
    // in"; "Tandem: Sign In to MCP Server" signs in, the server offers its page to VS Code
    // too, and the result is shown. Tandem opens the sign-in page with $BROWSER, which
    // code-server sets to its helper that opens it in the user's browser: a tab of this
    // chromium, which the demo authorization server sends back to Tandem's loopback.
    await palette(page, "Tandem: Servers");
    await quickTitle(page, "Tandem: Servers of");
    const notes = (await (await quickRow(page, "notes")).innerText()).replace(/\s+/g, " ");
    if (!notes.includes("needs sign-in")) throw new Error(`the servers list does not say notes needs a sign-in: "${notes}"`);
    await (await quickRow(page, "notes")).click();
    await quickTitle(page, "Tandem: notes");
    await quickRow(page, "Sign in");
    await quickRow(page, "Show details");
    await page.keyboard.press("Escape");
    const tabs = () => page.context().pages().filter((p) => p !== page).map((p) => p.url());
    if (tabs().length) throw new Error(`a tab opened before the sign-in: ${tabs()}`);
    await palette(page, "Tandem: Sign In to MCP Server");
    await quickTitle(page, "Tandem: Sign In to MCP Server");
    await quickRow(page, "notes");
    await page.keyboard.press("Enter");
    await page.locator(".notification-toast", { hasText: "Server 'notes' waits for you to sign in" }).first().waitFor({ timeout: WAIT });
    const signedIn = page.locator(".notification-toast", { hasText: "Tandem: signed in to 'notes'" }).first();
    await signedIn.waitFor({ timeout: WAIT });
    const said = (await signedIn.innerText()).replace(/\s+/g, " ");
    await shot(page, "13b-signed-in");
    if (!said.includes("ready")) throw new Error(`the sign-in did not end ready: "${said}"`);
    const back = tabs().filter((u) => /^http:\/\/127\.0\.0\.1:\d+\/callback\?code=[^&]+&state=/.test(u));
    if (back.length !== 1) throw new Error(`no one tab came back to Tandem's loopback with a code: ${tabs()}`);
    log(`signed in from the palette, approved in a tab of the browser: ${said}`);

    // Save selection to memory: the type and title asked, then the entry added.
    await page.keyboard.press("Control+P");
    await typeAndSee(page, "notes.md");
    await page.keyboard.press("Enter");
    await waitEditorText(page, "# Notes");
    await page.locator(".editor-group-container.active .monaco-editor .view-lines").first().click();
    await page.keyboard.press("Control+A");
    await palette(page, "Tandem: Save Selection to Memory");
    await typeAndSee(page, "reference");
    await page.keyboard.press("Enter");
    await quickType(page, "The notes heading");
    await page.keyboard.press("Enter");
    await page.locator(".notification-toast", { hasText: "Tandem: saved to memory as [" }).first().waitFor({ timeout: WAIT });
    const found = await tool("rekall_search", { query: "notes heading" });
    if (!found.results.some((r) => r.title === "The notes heading" && r.type === "reference")) throw new Error(`the saved selection is not in memory: ${JSON.stringify(found)}`);
    log("saved the selection of notes.md to memory");

    // The JSON schemas: VS Code's JSON language server validates both files with them.
    for (const file of ["sub/.mcp.json", "tandem/config.json"]) {
        await page.keyboard.press("Control+P");
        await typeAndSee(page, file, path.basename(file));
        await page.keyboard.press("Enter");
        await waitEditorText(page, "{");
    }
    await page.keyboard.press("Control+Shift+M");
    await markers.locator(".monaco-list-row", { hasText: 'Incorrect type. Expected "integer"' }).first().waitFor({ timeout: WAIT });
    await markers.locator(".monaco-list-row", { hasText: "Property bogus is not allowed" }).first().waitFor({ timeout: WAIT });
    await shot(page, "14-json-schemas");
    log("the JSON schemas flag a bad timeoutMs in .mcp.json and an unknown member in config.json");

    // Completion ends the task: the status bar goes back to ready, the view shows success.
    await tool("complete_task", { task_id: task.task_id, status: "success", outcome: { summary: "tokens verified" } });
    await page.locator(`${STATUS}[aria-label="Tandem: ready"], ${STATUS} [aria-label="Tandem: ready"]`).first().waitFor({ timeout: WAIT });
    await sidebar.locator(".monaco-list-row", { hasText: "success" }).first().waitFor({ timeout: WAIT });
    await shot(page, "15-completed");
    // The completed task's warnings can be dismissed.
    await palette(page, "Tandem: Dismiss Review Warnings");
    await page.locator(".notification-toast", { hasText: `dismissed the review warnings of task ${task.task_id.slice(0, 8)}` }).first().waitFor({ timeout: WAIT });

    // Tandem: Restart: the status bar goes through "starting" back to "ready".
    await page.evaluate((sel) => {
        window.__labels = [];
        new MutationObserver(() => {
            const item = document.querySelector(sel);
            const label = item?.getAttribute("aria-label") ?? item?.querySelector("[aria-label]")?.getAttribute("aria-label");
            if (label && window.__labels.at(-1) !== label) window.__labels.push(label);
        }).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
    }, STATUS);
    await palette(page, "Tandem: Restart");
    await page.waitForFunction(() => window.__labels.includes("Tandem: starting") && window.__labels.at(-1) === "Tandem: ready", null, { timeout: WAIT });
    log(`restart: the status bar went ${JSON.stringify(await page.evaluate(() => window.__labels))}`);
    log(`status bar after completion: "${await statusText(page)}"`);

    // Tandem as an MCP server for VS Code's own agent (its AI features on now: their chat
    // panel takes the keyboard focus): VS Code lists it from the provider and starts it.
    writeSettings({ "chat.disableAIFeatures": false });
    await palette(page, "MCP: List Servers");
    await (await quickRow(page, "Tandem")).click();
    await shot(page, "16-mcp-server-actions");
    await (await quickRow(page, "Start Server")).click();
    // Its output channel, which VS Code shows as the server starts, says it runs and answered
    // with its tools. (Monaco renders spaces as no-break spaces: \s matches both.)
    const output = (re) => page.locator(".part.panel .view-line", { hasText: re }).first();
    await output(/Connection\sstate:\sRunning/).waitFor({ timeout: WAIT });
    const discovered = (await output(/Discovered\s\d+\stools/).innerText({ timeout: WAIT })).replace(/\s+/g, " ").trim();
    await shot(page, "17-mcp-server-running");
    log(`VS Code ran Tandem's MCP server: ${discovered}`);

    // A binary too old for the extension: the setting changes, the client restarts, and the
    // user is told what to do.
    const old = path.join(root, "old-tandem");
    writeFileSync(old, "#!/bin/sh\necho 'tandem 0.0.1'\n");
    chmodSync(old, 0o755);
    writeSettings({ "tandem.path": old });
    await page.locator(".notification-toast", { hasText: "is tandem 0.0.1; this extension needs" }).first().waitFor({ timeout: WAIT });
    await page.locator(`${STATUS}[aria-label="Tandem: failed"], ${STATUS} [aria-label="Tandem: failed"]`).first().waitFor({ timeout: WAIT });
    await page.locator(".notification-toast .monaco-button", { hasText: "Open Settings" }).first().waitFor({ timeout: WAIT });
    await shot(page, "18-too-old");
    log("a tandem 0.0.1 on tandem.path: the status bar says failed, a notification says what to do");
}

let cleaning;
/// Stops everything the run started, once (the end of the run, or a signal: `timeout`).
function cleanup() {
    cleaning ??= stopAll();
    return cleaning;
}

for (const signal of ["SIGTERM", "SIGINT"]) {
    process.on(signal, () => {
        console.error(`[e2e] ${signal}: stopping code-server, chromium and the daemon`);
        void cleanup().finally(() => process.exit(1));
    });
}

async function stopAll() {
    await agent?.close().catch(() => {});
    await browser?.close().catch(() => {});
    for (const { name, child } of started) {
        if (child.exitCode === null) {
            try {
                process.kill(-child.pid, "SIGTERM");
            } catch (e) {
                log(`stopping ${name}: ${e.message}`);
            }
        }
    }
    await sleep(500);
    for (const { child } of started) {
        if (child.exitCode === null) {
            try {
                process.kill(-child.pid, "SIGKILL");
            } catch {
                // already gone
            }
        }
    }
    try {
        execFileSync(TANDEM, ["daemon", "stop"], { env, stdio: "pipe", timeout: 30_000 });
    } catch (e) {
        log(`tandem daemon stop: ${e.message}`);
    }
    // code-server's logs (the extension host's, the Tandem output channel) are artefacts too.
    try {
        cpSync(path.join(dirs.userData, "logs"), path.join(ARTIFACTS, "code-server-logs"), { recursive: true });
    } catch {
        // none written
    }
    rmSync(root, { recursive: true, force: true });
}

let failed = false;
try {
    await main();
} catch (e) {
    failed = true;
    console.error(`[e2e] FAILED: ${e.stack ?? e}`);
    try {
        const pages = browser?.contexts().flatMap((c) => c.pages()) ?? [];
        if (pages[0]) await shot(pages[0], "failure");
    } catch {
        // no page to show
    }
} finally {
    await cleanup();
}
/// What the extension logged of its own start ("client running, N ms after activation").
function ownActivation() {
    const logs = path.join(ARTIFACTS, "code-server-logs");
    const found = readdirSync(logs, { recursive: true }).find((f) => String(f).endsWith(path.join("tandem.tandem", "Tandem.log")));
    const m = found && /client running, (\d+) ms after activation/.exec(readFileSync(path.join(logs, String(found)), "utf8"));
    return m ? `${m[1]} ms` : "not logged";
}

if (!failed) {
    console.log(`activation time: ${figures.activation} ms from opening the window (the workbench shown at ${figures.workbench} ms; activate() → client running: ${ownActivation()})`);
    const { status, progress, call } = figures.median;
    const [lo, hi] = [Math.min(...figures.milestone.status), Math.max(...figures.milestone.status)];
    console.log(`milestone → status bar latency: median ${status} ms (min ${lo}, max ${hi}) over 5; languageclient's progress item: median ${progress} ms; the agent's log_milestone call: median ${call} ms`);
    console.log(`screenshots: ${ARTIFACTS}`);
}
process.exit(failed ? 1 : 0);
